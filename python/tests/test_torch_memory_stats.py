"""tidepool.torch.use() makes torch.cuda's memory statistics answer from tidepool's pool where
PyTorch refuses them under any pluggable allocator: memory_allocated, max_memory_allocated,
memory_reserved, max_memory_reserved and memory_stats give the device pool's figures, and
reset_peak_memory_stats brings the peaks down to now (tidepool.reset_peak_stats), leaving the
pool's growth budget alone (tested in C++ on sim, tests/core/pool_growth_test.cpp), and
reset_accumulated_memory_stats restarts the allocated and freed counts.

These run over a stand-in `torch` module (torch_stand_in.py: PyTorch is not installed on the
machines that run them), whose readers call memory_stats_as_nested_dict as PyTorch 2.11's do."""

from sim_support import MiB
from torch_stand_in import run_with_stand_in


def test_memory_statistics_answer_from_tidepools_pool_and_peaks_reset():
    r = run_with_stand_in("""
import json
import tidepool
from tidepool import _allocate
MiB = 1 << 20
try:
    torch.cuda.memory_allocated()
    refused_before_use = False
except RuntimeError:
    refused_before_use = True
tidepool.torch.use()
big = _allocate.allocate(64 * MiB)
small = _allocate.allocate(3 * MiB)
_allocate.deallocate(big)
stats = tidepool.stats()
result = {"refused_before_use": refused_before_use,
          "allocated": torch.cuda.memory_allocated(), "in_use": stats.in_use_bytes,
          "max_allocated": torch.cuda.max_memory_allocated(0),
          "peak_in_use": stats.peak_in_use_bytes,
          "reserved": torch.cuda.memory_reserved(), "mapped": stats.mapped_bytes,
          "max_reserved": torch.cuda.max_memory_reserved(), "peak_mapped": stats.peak_mapped_bytes,
          "flat": torch.cuda.memory_stats()}
torch.cuda.reset_peak_memory_stats()
after = tidepool.stats()
result.update(max_allocated_after_reset=torch.cuda.max_memory_allocated(),
              max_reserved_after_reset=torch.cuda.memory.max_memory_reserved(),
              in_use_after_reset=after.in_use_bytes, mapped_after_reset=after.mapped_bytes,
              summary=torch.cuda.memory_summary())
torch.cuda.reset_accumulated_memory_stats()
_allocate.deallocate(_allocate.allocate(MiB))
result["after_accumulated_reset"] = [torch.cuda.memory_stats()[f"allocation.all.{key}"]
                                     for key in ("current", "allocated", "freed")]
_allocate.deallocate(small)
print(json.dumps(result))
""")
    assert r["refused_before_use"], r  # the stand-in refuses as PyTorch does
    assert r["allocated"] == r["in_use"] >= 3 * MiB, r
    assert r["max_allocated"] == r["peak_in_use"] >= 67 * MiB, r
    assert r["reserved"] == r["mapped"] and r["max_reserved"] == r["peak_mapped"], r
    flat = r["flat"]
    assert flat["requested_bytes.all.current"] == 3 * MiB, flat
    assert flat["requested_bytes.all.peak"] == 67 * MiB, flat
    assert flat["allocation.all.current"] == 1 and flat["allocation.all.allocated"] == 2, flat
    assert flat["allocation.all.freed"] == 1, flat
    assert r["max_allocated_after_reset"] == r["in_use_after_reset"] < 64 * MiB, r
    assert r["max_reserved_after_reset"] == r["mapped_after_reset"], r
    assert r["summary"].startswith("tidepool "), r
    # Counts from the reset on (one allocation and its free since), what is live unchanged.
    assert r["after_accumulated_reset"] == [1, 1, 1], r


def test_a_device_that_does_not_exist_is_a_clear_error():
    r = run_with_stand_in("""
import json
import tidepool
tidepool.torch.use()
messages = []
for call in (lambda: torch.cuda.memory_allocated(7), lambda: torch.cuda.reset_peak_memory_stats(7)):
    try:
        call()
        messages.append(None)
    except tidepool.TidepoolError as error:
        messages.append(error.name)
print(json.dumps(messages))
""")
    assert r == ["TIDEPOOL_INVALID_DEVICE"] * 2
