"""Imports tidepool, torch and cupy in the order given on the command line, then allocates on
every framework imported, through tidepool, and exits. When tidepool comes, the library is loaded
and used at once (set_pool_options, available_bytes: the README's order, options before the first
allocation), so that it sits in the process before the frameworks that follow. A library that
lends or borrows symbols aborted here ("free(): invalid pointer") when it came before torch."""

import importlib
import sys

from common import emit

order = sys.argv[1:]
modules = {}
for name in order:
    modules[name] = importlib.import_module(name)
    if name == "tidepool":
        tidepool = modules[name]
        tidepool.set_pool_options(growth_slack=0.05)
        available = tidepool.available_bytes(0)
        assert available > 0, available

tidepool = modules["tidepool"]
result = {"order": order}
if "torch" in modules:
    torch = modules["torch"]
    tidepool.torch.use()
    x = torch.ones(1000, device="cuda")
    result["torch_sum"] = int((x * 2).sum().item())
    del x
if "cupy" in modules:
    cupy = modules["cupy"]
    tidepool.cupy.use()
    y = cupy.ones(1000, dtype=cupy.float32)
    result["cupy_sum"] = int((y * 3).sum().item())
    del y
stats = tidepool.stats(0)
result["allocations"] = stats.allocations
result["live_allocations"] = stats.live_allocations
result["growth_slack"] = tidepool.get_pool_options()["growth_slack"]
emit(result)
