"""A CUDA graph captured with CuPy routed to tidepool (tidepool.cupy.use()): a temporary freed in
the capture and the output dropped after it stay the graph's; eager arrays made after a release
are untouched by launches; the graph destroyed, its memory comes back. Prints the checks as JSON."""

import gc

import cupy

import tidepool
from common import emit, graphs_kept_after_waiting

tidepool.cupy.use()
n = 1 << 22  # 16 MiB of float32
x = cupy.arange(n, dtype=cupy.float32)
stream = cupy.cuda.Stream(non_blocking=True)
with stream:
    stream.begin_capture()
    temporary = x * 2.0
    out = temporary + 1.0
    graph_memory = [temporary.data.ptr, out.data.ptr]
    del temporary
    graph = stream.end_capture()
result = {"graphs_kept": tidepool.stats().graphs}
graph.launch(stream=stream)
stream.synchronize()
result["graph_ran"] = bool((out == x * 2.0 + 1.0).all())
del out
gc.collect()
result["graph_kept_bytes"] = tidepool.stats().graph_kept_bytes
result["released"] = tidepool.release_cached_memory()
eager = [cupy.full(n, i + 1, dtype=cupy.float32) for i in range(8)]
cupy.cuda.Device().synchronize()
result["eager_on_graph_memory"] = sum(any(a <= e.data.ptr < a + 4 * n for a in graph_memory) for e in eager)
for _ in range(3):
    graph.launch(stream=stream)
stream.synchronize()
result["eager_intact"] = all(bool((e == i + 1).all()) for i, e in enumerate(eager))
del graph
gc.collect()
result["graphs_after_destroy"] = graphs_kept_after_waiting(tidepool)
result["released_after_destroy"] = tidepool.release_cached_memory()
emit(result)
