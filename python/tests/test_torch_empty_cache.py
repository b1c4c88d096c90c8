"""tidepool.torch.use() makes torch.cuda.empty_cache() hand back what tidepool's pools cache, after
PyTorch's own call, and leaves the cache alone while the current stream is being captured.

PyTorch is not installed on the machines that run these tests: they run in a fresh interpreter
over a stand-in `torch` module (torch_stand_in.py); the same path through the real PyTorch runs on
the GPU (python/tests/gpu/test_frameworks_gpu.py)."""

from sim_support import MiB
from torch_stand_in import run_with_stand_in


def test_empty_cache_hands_back_tidepools_cache_except_in_a_capture():
    r = run_with_stand_in("""
import json
import tidepool
MiB = 1 << 20
tidepool.torch.use()
from tidepool import _allocate
kept = _allocate.allocate(8 * MiB)
ptr = _allocate.allocate(64 * MiB)
_allocate.deallocate(ptr)
result = {"cached_before": tidepool.stats().cached_bytes}
capturing[0] = True
torch.cuda.empty_cache()
result["cached_while_capturing"] = tidepool.stats().cached_bytes
capturing[0] = False
torch.cuda.memory.empty_cache()
after = tidepool.stats()
result["cached_after"] = after.cached_bytes
result["in_use_after"] = after.in_use_bytes
result["pytorch_calls"] = calls["empty_cache"]
result["wrapped_name"] = torch.cuda.empty_cache.__name__
_allocate.deallocate(kept)
print(json.dumps(result))
""")
    assert r["cached_before"] >= 64 * MiB, r
    assert r["cached_while_capturing"] == r["cached_before"], r
    assert r["cached_after"] < r["cached_before"] - 32 * MiB, r
    assert r["in_use_after"] >= 8 * MiB, r
    assert r["pytorch_calls"] == 2, r  # PyTorch's own call runs first, every time
    assert r["wrapped_name"] == "empty_cache", r
