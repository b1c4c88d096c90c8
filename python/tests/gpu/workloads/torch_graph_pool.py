"""An inference server's CUDA graphs: one forward pass captured per batch size, largest first,
all given one memory pool (`torch.cuda.graph(pool=...)`, as vLLM does), outputs kept in static
buffers. Prints the device memory the captures took (held after them less held before), whether
replays served one at a time in any order match eager results, and which outputs stay intact when
every graph replays before any output is read. `mode`:
  default          PyTorch's allocator, the captures sharing one pool
  default-private  PyTorch's allocator, each capture with a pool of its own
  tidepool          tidepool.torch.use(), the captures sharing one pool: use() maps it to a
                    tidepool graph pool (PyTorch's pool= reaches no pluggable allocator)
  tidepool-private  tidepool.torch.use(), each capture with no pool: its memory its own
  tidepool-shared   tidepool.torch.use(), the captures given one pool and made under one
                    tidepool.GraphPool the program entered itself
  tidepool-direct   tidepool.torch.use(), the captures given one pool through
                    CUDAGraph.capture_begin(pool) / capture_end() on a stream of the program's
                    own, without torch.cuda.graph
Prints the figures as JSON."""

import contextlib
import gc
import random
import sys

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "tidepool-shared"
uses_tidepool = mode.startswith("tidepool")
if uses_tidepool:
    import tidepool

    tidepool.torch.use()
from common import (drop_allocator_cache, emit, graphs_kept_after_waiting,  # noqa: E402
                    held_by_allocator, residual_mlp, touched_granule_bytes)

torch.set_grad_enabled(False)
torch.manual_seed(0)
WIDTH, LAYERS = 2048, 8
BATCHES = [2048, 1536, 1024, 768, 512, 384, 256, 128, 64, 32, 16, 8, 4, 2, 1]

model = residual_mlp(WIDTH, LAYERS).cuda().to(torch.bfloat16)
inputs = {b: torch.randn(b, WIDTH, device="cuda", dtype=torch.bfloat16) for b in BATCHES}
expected = {b: model(inputs[b]).clone() for b in BATCHES}
torch.cuda.synchronize()


def held():
    return held_by_allocator(uses_tidepool)


# What the program holds before capturing: weights, inputs, expected results; no cache.
drop_allocator_cache(uses_tidepool)
held_before = held()
in_use_before = tidepool.stats().in_use_bytes if uses_tidepool else torch.cuda.memory_allocated()

shared_pool = torch.cuda.graph_pool_handle() if not mode.endswith("-private") else None
graph_pool = tidepool.GraphPool() if mode == "tidepool-shared" else contextlib.nullcontext()
graphs, outputs = {}, {}
capture_stream = torch.cuda.Stream()
for b in BATCHES:
    g = torch.cuda.CUDAGraph()
    if mode == "tidepool-direct":
        torch.cuda.synchronize()
        with torch.cuda.stream(capture_stream):
            g.capture_begin(pool=shared_pool)
            outputs[b] = model(inputs[b])
            g.capture_end()
    else:
        with graph_pool, torch.cuda.graph(g, pool=shared_pool):
            outputs[b] = model(inputs[b])
    graphs[b] = g
del g
torch.cuda.synchronize()
result = {"mode": mode, "batches": len(BATCHES), "held_before": held_before, "in_use_before": in_use_before,
          "graph_bytes": held() - held_before}
if uses_tidepool:
    stats = tidepool.stats()
    result["graphs_kept"] = stats.graphs
    result["graph_kept_bytes"] = stats.graph_kept_bytes
    mapped = tidepool.torch.graph_pool_of(shared_pool) if shared_pool else 0
    result["graph_pool_of_shared_pool"] = mapped


def matches(b):
    return torch.allclose(outputs[b].float(), expected[b].float(), atol=0.05, rtol=0.02)


# As a server replays: one graph per step, its output read before the next replay; any order.
order = list(BATCHES)
random.Random(0).shuffle(order)
served = []
for b in order + BATCHES + order[::-1]:
    graphs[b].replay()
    torch.cuda.synchronize()
    served.append(matches(b))
result["served_replays_match_eager"] = all(served)
# Every graph replayed in capture order, then every output read: each later capture's output
# lies outside what earlier graphs write, so all hold.
for b in BATCHES:
    graphs[b].replay()
torch.cuda.synchronize()
result["outputs_kept_after_replays_in_capture_order"] = all(matches(b) for b in BATCHES)
# In the other order a shared pool's outputs are not all kept, with PyTorch's pools as with
# tidepool's: a later capture's output lies in an earlier graph's scratch (a figure, not a check).
for b in reversed(BATCHES):
    graphs[b].replay()
torch.cuda.synchronize()
result["outputs_kept_after_replays_in_reverse_order"] = all(matches(b) for b in BATCHES)

del graphs, outputs
gc.collect()
torch.cuda.synchronize()
if uses_tidepool:
    result["graphs_after_destroy"] = graphs_kept_after_waiting(tidepool)
drop_allocator_cache(uses_tidepool)
if uses_tidepool:
    result["in_use_after_destroy"] = tidepool.stats().in_use_bytes
# More than before the captures by what the program still holds: PyTorch's cuBLAS workspace of the
# capture stream, made in the first capture, kept after it (by PyTorch's allocator too).
result["held_after_destroy"] = held()
if uses_tidepool:
    # release() leaves the parts of handles that live tensors pin; compact() moves their bytes so
    # that only the granules they touch stay held.
    live = list(model.parameters()) + list(inputs.values()) + list(expected.values())
    result["live_tensor_bytes"] = sum(t.numel() * t.element_size() for t in live)
    result["touched_granule_bytes"] = touched_granule_bytes(live)
    tidepool.compact(torch.cuda.current_device())
    result["held_after_compact"] = held()
emit(result)
