"""tidepool.compact() on a GPU, under tidepool.torch.use(): tensors of many sizes, half of them
freed, the cache emptied; then compact() moves the live tensors' bytes so that only the 2 MiB
granules they touch stay held. Prints the figures (the pool's own and NVML's, for a first compact
and for a second one after more churn) and whether every live tensor still holds its values at its
address, and whether a CUDA graph captured over one of them replays right after the move. JSON."""

import random

import torch

import tidepool
from common import emit, torch_memory, touched_granule_bytes

tidepool.torch.use()
rng = random.Random(7)


def churn(count):
    """`count` tensors of 1 KiB to about 24 MiB of float32, each filled through temporaries (whose
    holes the next ones fill, sharing handles), then half of them freed at random: the rest."""
    tensors = []
    for i in range(count):
        numel = int(2 ** rng.uniform(8, 22.6))
        t = torch.empty(numel, dtype=torch.float32, device="cuda")
        t.copy_(torch.arange(numel, dtype=torch.float32, device="cuda") * 0.5 + i)
        tensors.append(t)
    rng.shuffle(tensors)
    return tensors[count // 2:]


live = churn(160)
expected = [t.cpu() for t in live]
addresses = [t.data_ptr() for t in live]

# A graph captured over one live tensor (the smallest: little capture memory) before the move
# must read the moved bytes after it.
first = min(range(len(live)), key=lambda k: live[k].numel())
static = live[first]
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    doubled = static * 2
torch.cuda.synchronize()
torch.cuda.empty_cache()
touched = touched_granule_bytes(live)
nvml = torch_memory()
nvml_before = nvml.bytes()
held_before = tidepool.stats().mapped_bytes
returned = tidepool.compact(torch.cuda.current_device())
after = tidepool.stats()
nvml_after = nvml.bytes()
graph.replay()
torch.cuda.synchronize()

result = {"held_after_release": held_before,
          "returned": returned,
          "held_after_compact": after.mapped_bytes,
          "live_bytes": after.in_use_bytes,
          "nvml_drop": nvml_before - nvml_after,
          "graph_output_bytes": doubled.numel() * 4,
          "touched_granule_bytes": touched,
          "same_addresses": [t.data_ptr() for t in live] == addresses,
          "values_kept": all(torch.equal(t.cpu(), e) for t, e in zip(live, expected)),
          "graph_reads_moved_bytes": bool(torch.equal(doubled.cpu(), expected[first] * 2))}

# Again, once the pool has made a copy stream before: more churn, then a second compact.
more = churn(80)  # kept live: the second compact moves them too
torch.cuda.synchronize()
torch.cuda.empty_cache()
nvml_before_again = nvml.bytes()
result["returned_again"] = tidepool.compact(torch.cuda.current_device())
result["nvml_drop_again"] = nvml_before_again - nvml.bytes()
result["values_kept_again"] = all(torch.equal(t.cpu(), e) for t, e in zip(live, expected))
emit(result)
