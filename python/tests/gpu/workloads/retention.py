"""The retention workload of DESIGN 1.1 (traces/loader.csv.gz, the loader-shaped RMM log made by
`tidepool generate-loader`), replayed through a framework's allocator: every allocation becomes a
framework array, every free drops it. Prints peak held / peak live and what is held after the
inputs close and release_cached_memory() runs, and under tidepool after compact() too ("held" is
NVML's figure for this process minus what it held before the workload), and the time the
workload's allocations and frees took (the load and merge of DESIGN 1.1: issue 15 asks for at most
1.5x the framework's own pool), NVML's sampling left out of it. Under tidepool the allocating time
is split by whether the allocation made driver calls (the pool's stats before and after each, read
outside the timed part), beside the pool's own count and time of driver calls, to tell the
driver's share from the per-call path's; RETENTION_SPLIT_DRIVER=0 leaves those reads out, so that
only NVML's runs between allocations, as under the framework's own pool (the split's figures are
then 0).
Arguments: torch|cupy, then tidepool|default."""

import csv
import gzip
import os
import sys
import time

import tidepool
from common import emit

framework, allocator = sys.argv[1], sys.argv[2]
trace = sys.argv[3]

if framework == "torch":
    import torch

    if allocator == "tidepool":
        tidepool.torch.use()
    from common import torch_memory as process_memory

    def make(size):
        return torch.empty(size, dtype=torch.uint8, device="cuda")

    def sync():
        torch.cuda.synchronize()

    torch.ones(1, device="cuda").sum().item()
else:
    import cupy

    if allocator == "tidepool":
        tidepool.cupy.use()
    from common import cupy_memory as process_memory

    def make(size):
        return cupy.empty(size, dtype=cupy.uint8)

    def sync():
        cupy.cuda.Device().synchronize()

    cupy.ones(1).sum().item()

tidepool.release_cached_memory()
memory = process_memory()
baseline = memory.bytes()
live = {}
live_bytes = peak_live = peak_held = 0
with gzip.open(trace, "rt") as rows:
    steps = [(row["Action"], row["Pointer"], int(row["Size"])) for row in csv.DictReader(rows)]
clock = time.perf_counter
allocating_s = freeing_s = 0.0
routed = allocator == "tidepool"
split = routed and os.environ.get("RETENTION_SPLIT_DRIVER", "1") != "0"
driver_calls = (lambda: tidepool.stats(0).driver_calls) if split else (lambda: 0)
calling = {"allocations": 0, "seconds": 0.0}  # allocations that made driver calls
pool_before = tidepool.stats(0) if routed else None
for action, pointer, size in steps:
    if action == "allocate":
        calls = driver_calls()
        start = clock()
        array = make(size)
        took = clock() - start
        allocating_s += took
        if driver_calls() != calls:
            calling["allocations"] += 1
            calling["seconds"] += took
        live[pointer] = (array, size)
        del array
        live_bytes += size
        peak_live = max(peak_live, live_bytes)
        peak_held = max(peak_held, memory.bytes() - baseline)
    elif action == "free":
        # Index the popped pair: unpacking it into a name would keep the array alive until
        # the next free, holding one more array than the trace says is live.
        start = clock()
        freed = live.pop(pointer)[1]
        freeing_s += clock() - start
        live_bytes -= freed
sync()
released = tidepool.release_cached_memory()
held_after_release = memory.bytes() - baseline
# The exact hand-back: what live arrays pin of the pages beside them moved away (tidepool only).
compacted = tidepool.compact(0) if routed else 0
held_after = memory.bytes() - baseline
# The pool's own figures beside NVML's, to tell the pool's memory from what else the process holds.
pool = tidepool.stats(0) if routed else None
emit({"pool_driver_calls": pool.driver_calls - pool_before.driver_calls if pool else None,
      "pool_driver_s": (pool.driver_microseconds - pool_before.driver_microseconds) / 1e6 if pool else None,
      "allocations_calling_driver": calling["allocations"] if pool else None,
      "allocating_s_calling_driver": calling["seconds"] if pool else None,
      "allocations": sum(1 for step in steps if step[0] == "allocate"),
      "pool_peak_mapped": pool.peak_mapped_bytes if pool else None,
      "pool_peak_in_use": pool.peak_in_use_bytes if pool else None,
      "pool_mapped_after": pool.mapped_bytes if pool else None,
      "framework": framework, "allocator": allocator, "peak_live": peak_live,
      "peak_held": peak_held, "peak_ratio": peak_held / peak_live, "live_after": live_bytes,
      "held_after_release": held_after_release, "compacted": compacted,
      "held_after": held_after, "held_after_ratio": held_after / max(live_bytes, 1),
      "released": released, "allocating_s": allocating_s, "freeing_s": freeing_s})
