"""torch.cuda's memory statistics under tidepool.torch.use(), which PyTorch refuses under any
pluggable allocator ("does not yet support getDeviceStats"): memory_allocated, max_memory_allocated,
memory_reserved, memory_stats, reset_peak_memory_stats and reset_accumulated_memory_stats
answer from tidepool's pool of the device. Prints what they said beside tidepool.stats() as JSON."""

import torch

import tidepool
from common import MiB, emit

tidepool.torch.use()
kept = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
dropped = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
del dropped
stats = tidepool.stats()
result = {"allocated": torch.cuda.memory_allocated(), "in_use": stats.in_use_bytes,
          "max_allocated": torch.cuda.max_memory_allocated("cuda:0"),
          "peak_in_use": stats.peak_in_use_bytes,
          "reserved": torch.cuda.memory_reserved(torch.device("cuda")), "mapped": stats.mapped_bytes,
          "requested_peak": torch.cuda.memory_stats()["requested_bytes.all.peak"]}
torch.cuda.reset_peak_memory_stats()
result["max_allocated_after_reset"] = torch.cuda.max_memory_allocated()
result["in_use_after_reset"] = tidepool.stats().in_use_bytes
result["summary_first_line"] = torch.cuda.memory_summary().splitlines()[0]
torch.cuda.reset_accumulated_memory_stats()
torch.empty(MiB, dtype=torch.uint8, device="cuda")  # one allocation, freed at once
flat = torch.cuda.memory_stats()
result["counts_after_accumulated_reset"] = [flat[f"allocation.all.{key}"]
                                            for key in ("current", "allocated", "freed")]
del kept
emit(result)
