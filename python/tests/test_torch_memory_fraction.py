"""torch.cuda.set_per_process_memory_fraction caps the device's tidepool pool after
tidepool.torch.use() (PyTorch's pluggable interface drops the fraction), and
get_per_process_memory_fraction answers (PyTorch refuses it for pluggable allocators): growth past
the cap fails as out of memory, 1.0 lifts it, PyTorch's own checks and call come first and a
fraction they refuse changes nothing.

These run over a stand-in `torch` module (torch_stand_in.py: a GPU of 1 GiB) on sim; the real
PyTorch runs the same through its out-of-memory error on the GPU (gpu/test_frameworks_gpu.py)."""

from torch_stand_in import run_with_stand_in

MiB = 1 << 20


def test_the_fraction_caps_the_devices_pool_and_is_read_back():
    r = run_with_stand_in("""
import json
import tidepool
from tidepool import _allocate
tidepool.torch.use()
r = {"before": torch.cuda.get_per_process_memory_fraction()}
torch.cuda.set_per_process_memory_fraction(0.25)
r["cap"] = tidepool.byte_cap(0)
r["read_back"] = torch.cuda.memory.get_per_process_memory_fraction(0)
held = _allocate.allocate(200 << 20)
try:
    _allocate.allocate(100 << 20)
    r["past_the_cap"] = "allocated"
except tidepool.OutOfMemoryError as error:
    r["past_the_cap"] = "byte cap 256.00 MiB" in str(error)
for bad in (1.5, 1):
    try:
        torch.cuda.set_per_process_memory_fraction(bad)
    except (ValueError, TypeError) as error:
        r.setdefault("refused", []).append(type(error).__name__)
r["cap_after_refusals"] = tidepool.byte_cap(0)
torch.cuda.set_per_process_memory_fraction(1.0)
r["lifted"] = [tidepool.byte_cap(0), torch.cuda.get_per_process_memory_fraction("cuda:0")]
more = _allocate.allocate(100 << 20)
tidepool.set_byte_cap(300 << 20)  # set by tidepool directly: the fraction follows the cap
r["from_cap"] = torch.cuda.get_per_process_memory_fraction()
r["pytorch_calls"] = fractions_to_pytorch
_allocate.deallocate(held)
_allocate.deallocate(more)
print(json.dumps(r))
""", TIDEPOOL_SIM_CAPACITY=str(1 << 30))
    assert r["before"] == 1.0, r
    assert r["cap"] == 256 * MiB and r["read_back"] == 0.25, r
    assert r["past_the_cap"] is True, r
    assert r["refused"] == ["ValueError", "TypeError"], r
    assert r["cap_after_refusals"] == 256 * MiB, r
    assert r["lifted"] == [None, 1.0], r
    assert r["from_cap"] == 300 / 1024, r
    assert r["pytorch_calls"] == [0.25, 1.0], r


def test_a_fraction_set_before_the_first_allocation_caps_the_pool_made_later():
    r = run_with_stand_in("""
import json
import tidepool
from tidepool import _allocate
tidepool.torch.use()
torch.cuda.set_per_process_memory_fraction(0.0625)
try:
    _allocate.allocate(128 << 20)
    result = "allocated"
except tidepool.OutOfMemoryError:
    result = "out of memory"
print(json.dumps({"result": result, "cap": tidepool.byte_cap(0)}))
""", TIDEPOOL_SIM_CAPACITY=str(1 << 30))
    assert r == {"result": "out of memory", "cap": 64 * MiB}, r
