"""The release scenario: a 1 GiB PyTorch tensor in a reference cycle and a 1 GiB CuPy array, both
dropped; tidepool.release_cached_memory() must hand back exactly 2 GiB, by NVML, and leave the
process holding what it held at the start.
Argument: "default" (each framework on its own allocator) or "tidepool" (both routed to tidepool)."""

import sys

import cupy
import torch

import tidepool
from common import GiB, MiB, emit, torch_memory

mode = sys.argv[1]
if mode == "tidepool":
    tidepool.torch.use()
    tidepool.cupy.use()

# Open the contexts and the frameworks' own state, then hand everything back: the baseline.
torch.ones(1, device="cuda").sum().item()
cupy.ones(1).sum().item()
tidepool.release_cached_memory()
memory = torch_memory()
start = memory.bytes()


class Holder:
    def __init__(self, tensor):
        self.tensor = tensor
        self.me = self  # a reference cycle: only the garbage collector frees the tensor


holder = Holder(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
array = cupy.empty(GiB, dtype=cupy.uint8)
holder.tensor.fill_(1)
array.fill(1)
torch.cuda.synchronize()
cupy.cuda.Device().synchronize()
loaded = memory.bytes()
del holder, array

released = tidepool.release_cached_memory(verbose=True)
after = memory.bytes()
emit({"start": start, "loaded": loaded, "after": after, "released": released,
      "nvml_released": loaded - after, "GiB": GiB, "MiB": MiB})
