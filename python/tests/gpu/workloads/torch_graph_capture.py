"""CUDA graphs captured with PyTorch routed to tidepool (tidepool.torch.use()), as a serving engine
captures them: several batch sizes one after another, each in CUDA's default (global) capture mode,
replayed in any order. Then the hazard a graph-unaware pool has: the program drops a graph's output
and releases the cache, eager tensors are made, the graphs replay; the eager tensors must be
untouched. Then the graphs are destroyed and their memory must come back. `mode`: "tidepool" or
"default" (PyTorch's own allocator, the reference). Prints the checks as JSON."""

import gc
import sys

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "tidepool"
if mode == "tidepool":
    import tidepool

    tidepool.torch.use()
from common import emit, graphs_kept_after_waiting  # noqa: E402

torch.set_grad_enabled(False)  # inference, as a server captures: intermediates die in the capture
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
batches = [8, 64, 256, 1024]
inputs = {b: torch.randn(b, 1024, device="cuda") for b in batches}
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for b in batches:
        model(inputs[b])
torch.cuda.current_stream().wait_stream(side)

graphs, outputs, intermediates = {}, {}, []
for b in batches:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # global capture mode, PyTorch's default
        hidden = model[0](inputs[b])
        intermediates.append((hidden.data_ptr(), hidden.numel() * hidden.element_size()))
        out = model[2](model[1](hidden))
        del hidden
    graphs[b], outputs[b] = g, out
    del g, out

result = {"mode": mode}
expected = {b: model(inputs[b]).clone() for b in batches}
for b in reversed(batches):
    graphs[b].replay()
torch.cuda.synchronize()
result["replays_match_eager"] = all(torch.allclose(outputs[b], expected[b], atol=1e-3) for b in batches)

# The program drops the largest graph's output and releases the cache; eager work follows.
dropped = (outputs[1024].data_ptr(), outputs[1024].numel() * outputs[1024].element_size())
del outputs[1024]
gc.collect()
torch.cuda.synchronize()
if mode == "tidepool":
    stats = tidepool.stats()
    result["graphs_kept"] = stats.graphs
    result["graph_kept_bytes"] = stats.graph_kept_bytes
    result["released"] = tidepool.release_cached_memory()
else:
    torch.cuda.empty_cache()
eager = [torch.full((1024, 4096), float(i + 1), device="cuda") for i in range(16)]
graph_memory = intermediates + [dropped]


def overlaps(t):
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    return any(start < a + n and a < end for a, n in graph_memory)


result["eager_on_graph_memory"] = sum(overlaps(t) for t in eager)
for _ in range(3):
    for b in batches:
        graphs[b].replay()
torch.cuda.synchronize()
result["eager_intact"] = all(bool((t == i + 1).all()) for i, t in enumerate(eager))
result["kept_replays_match_eager"] = all(torch.allclose(outputs[b], expected[b], atol=1e-3) for b in batches[:-1])
del eager

# The graphs go: their memory comes back (the driver tells the pool on a thread of its own).
del graphs, outputs
gc.collect()
torch.cuda.synchronize()
if mode == "tidepool":
    result["graphs_after_destroy"] = graphs_kept_after_waiting(tidepool)
    result["released_after_destroy"] = tidepool.release_cached_memory()
    result["in_use_after"] = tidepool.stats().in_use_bytes
    result["mapped_after"] = tidepool.stats().mapped_bytes
emit(result)
