"""The MemPool route to a tag (`with torch.cuda.use_mem_pool(tidepool.torch.mem_pool(tag)):`,
written for programs that keep PyTorch's allocator) run unchanged after tidepool.torch.use(),
where PyTorch makes no MemPool: a 64 MiB cache made inside comes from the tag's memory, sleeps
(NVML sees the bytes go) and wakes with its contents; the pool answers id, use_count() and
snapshot() as a MemPool, and torch.cuda.memory_snapshot(pool.id) gives the tag's segments alone.
Prints the checks as JSON."""

import torch

import tidepool
from common import MiB, emit, torch_memory

tidepool.torch.use()
pool = tidepool.torch.mem_pool("kv-cache")
with torch.cuda.use_mem_pool(pool):
    count_inside = pool.use_count()
    cache = torch.full((64 * MiB // 4,), 3.0, device="cuda")
outside = torch.ones(MiB, device="cuda")


def live(segments):
    return sorted(b["address"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated")


pool_live = live(pool.snapshot())
torch_pool_live = live(torch.cuda.memory_snapshot(pool.id))
all_live = live(torch.cuda.memory_snapshot())
tagged = tidepool.tag_stats("kv-cache")
torch.cuda.synchronize()
before = torch_memory().bytes()
slept = tidepool.sleep("kv-cache")
asleep = torch_memory().bytes()
tidepool.wake("kv-cache")
emit({"tag_in_use": tagged.in_use_bytes, "untagged_in_use": tidepool.stats().in_use_bytes,
      "slept": slept, "nvml_drop": before - asleep,
      "contents_back": bool((cache == 3.0).all().item()),
      "outside_intact": int(outside.sum().item()),
      "counts": [count_inside, pool.use_count()], "pool_id": list(pool.id),
      "pool_live_is_cache": pool_live == [cache.data_ptr()], "torch_pool_live_is_cache": torch_pool_live == pool_live,
      "all_has_both": cache.data_ptr() in all_live and outside.data_ptr() in all_live})
