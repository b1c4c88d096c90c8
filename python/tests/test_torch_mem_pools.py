"""tidepool.torch.mem_pool(tag) after tidepool.torch.use(): a TagMemPool, which
torch.cuda.use_mem_pool turns into tidepool.region(tag) (PyTorch makes no MemPool under a
pluggable allocator), so code written for the MemPool route runs unchanged; any other pool goes to
PyTorch's use_mem_pool.

These run over a stand-in `torch` module (torch_stand_in.py) on sim; the same code runs through
the real PyTorch on the GPU (gpu/test_sleep_wake_gpu.py)."""

from torch_stand_in import run_with_stand_in

MiB = 1 << 20


def test_use_mem_pool_with_a_tag_pool_allocates_from_the_tag():
    r = run_with_stand_in("""
import json
import tidepool
from tidepool import _allocate
tidepool.torch.use()
pool = tidepool.torch.mem_pool("kv-cache")
with torch.cuda.use_mem_pool(pool):
    inside = tidepool.current_tag()
    cache = _allocate.allocate(6 << 20)
outside = _allocate.allocate(2 << 20)
r = {"pool": repr(pool), "inside": inside, "after": tidepool.current_tag(),
     "tag_in_use": tidepool.tag_stats("kv-cache").in_use_bytes,
     "untagged_in_use": tidepool.stats().in_use_bytes, "pytorch_calls": len(pools_used)}
with torch.cuda.memory.use_mem_pool("another pool"):
    pass
r["other_pool_to_pytorch"] = pools_used
_allocate.deallocate(cache)
_allocate.deallocate(outside)
print(json.dumps(r))
""")
    assert r["pool"] == "tidepool.torch.TagMemPool('kv-cache')", r
    assert r["inside"] == "kv-cache" and r["after"] is None, r
    assert r["tag_in_use"] == 6 * MiB and r["untagged_in_use"] == 2 * MiB, r
    assert r["pytorch_calls"] == 0 and r["other_pool_to_pytorch"] == ["another pool"], r


def test_a_tag_pool_answers_what_code_asks_of_a_mempool():
    r = run_with_stand_in("""
import json
import threading
import tidepool
from tidepool import _allocate
tidepool.torch.use()
untagged = _allocate.allocate(2 << 20)
pool = tidepool.torch.mem_pool("kv-cache")
other = tidepool.torch.mem_pool("weights")
counts = [pool.use_count()]
with torch.cuda.use_mem_pool(pool):
    counts.append(pool.use_count())
    cache = _allocate.allocate(6 << 20)
    with torch.cuda.use_mem_pool(pool):
        counts.append(pool.use_count())
counts.append(pool.use_count())
with torch.cuda.use_mem_pool(other):
    weights = _allocate.allocate(3 << 20)
def live(segments):
    return sorted(b["address"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
r = {"id": pool.id, "other_id": other.id, "same_tag_id": tidepool.torch.mem_pool("kv-cache").id,
     "allocator": pool.allocator, "counts": counts, "cache": cache, "weights": weights,
     "untagged": untagged,
     "snapshot": live(pool.snapshot()), "snapshot_no_traces": live(pool.snapshot(include_traces=False)),
     "torch_pool_snapshot": live(torch.cuda.memory_snapshot(pool.id)),
     "torch_all": live(torch.cuda.memory_snapshot()),
     "pool_ids": sorted({str(s["segment_pool_id"]) for s in pool.snapshot()})}
print(json.dumps(r))
""")
    assert r["id"] == r["same_tag_id"] and r["id"] != r["other_id"], r
    assert r["id"][0] == 0 and r["id"][1] >= 1, r
    assert r["allocator"] is None, r
    assert r["counts"] == [1, 2, 3, 1], r
    assert r["snapshot"] == [r["cache"]] == r["snapshot_no_traces"] == r["torch_pool_snapshot"], r
    assert r["pool_ids"] == [str(tuple(r["id"]))], r
    assert r["torch_all"] == sorted([r["cache"], r["weights"], r["untagged"]]), r
