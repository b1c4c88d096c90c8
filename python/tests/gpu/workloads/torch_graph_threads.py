"""Two threads capturing `torch.cuda.graph`s at the same time, each with its own PyTorch pool (a
server capturing per model or per GPU in threads). As a captured backward pass does on PyTorch's
autograd thread, each capture's work runs on a helper thread that entered no graph pool, so only
the pool given to the capture (or the all-threads default) says where its memory comes from. The
helpers go through their layers in lock step, so each frees intermediates while the other
allocates. Prints, as JSON, the graph memory tidepool keeps before and after the first capture's
graph is destroyed (it comes back only if it was in that capture's own graph pool), how many bytes of
one thread's captured tensors lie on addresses the other thread's captured tensors used (0 when
each capture keeps to its own pool), and whether both graphs, replayed at the same time on two
streams many times, give eager results. `mode`:
  default              PyTorch's allocator
  tidepool             tidepool.torch.use(): each capture is given its pool's tidepool graph pool
  tidepool-thread-only tidepool.torch.use() with the pool given to the capture left out, so only
                       the all-threads default graph pool (the last one entered) says where the
                       captures allocate: what use() did before captures were given their pool
"""

import gc
import sys
import threading
import time

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "tidepool"
if mode.startswith("tidepool"):
    import tidepool

    tidepool.torch.use()
    if mode == "tidepool-thread-only":
        import tidepool._torch_graphs as torch_graphs

        torch_graphs._give_capture = lambda graph_pool: 0
from common import emit  # noqa: E402

WIDTH, LAYERS, ROUNDS = 2048, 12, 40
torch.set_grad_enabled(False)


def make_weights(seed):
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return [(torch.randn(WIDTH, WIDTH, generator=generator) / WIDTH ** 0.5).cuda().half()
            for _ in range(LAYERS)]


def forward(weights, x, step=None, used=None):
    for weight in weights:
        h = torch.relu(x @ weight)
        x = x + h
        if used is not None:  # the ranges this capture allocated
            used.extend((t.data_ptr(), t.untyped_storage().nbytes()) for t in (h, x))
        if step is not None:
            step.wait()  # the other thread's layer runs between two of ours
    return x


class Capture:
    def __init__(self, seed, batch):
        self.weights = make_weights(seed)
        self.input = torch.randn(batch, WIDTH, device="cuda").half()
        self.expected = forward(self.weights, self.input)
        self.stream = torch.cuda.Stream()
        self.pool = torch.cuda.graph_pool_handle()
        self.graph = torch.cuda.CUDAGraph()
        self.used = []
        self.output = None
        self.error = None

    def capture(self, step):
        try:
            # Warm-up on the capture stream from a helper, as the capture runs (cuBLAS handles).
            warm = threading.Thread(target=self.warm_up)
            warm.start()
            warm.join()
            self.stream.synchronize()
            step.wait()
            with torch.cuda.graph(self.graph, pool=self.pool, stream=self.stream,
                                  capture_error_mode="relaxed"):
                helper = threading.Thread(target=self.forward_on_helper, args=(step,))
                helper.start()
                helper.join()
            if self.error:
                raise RuntimeError(self.error)
        except BaseException as error:  # reported, and the other thread let go
            self.error = repr(error)
            step.abort()

    def warm_up(self):
        with torch.cuda.stream(self.stream):
            forward(self.weights, self.input)

    def forward_on_helper(self, step):
        try:
            step.wait()  # both captures have begun before either allocates
            with torch.cuda.stream(self.stream):
                self.output = forward(self.weights, self.input, step, self.used)
        except BaseException as error:  # noqa: BLE001  (reported by the capturing thread)
            self.error = repr(error)
            step.abort()

    def matches(self):
        return torch.allclose(self.output.float(), self.expected.float(), atol=0.05, rtol=0.02)


captures = [Capture(1, 4096), Capture(2, 3072)]
torch.cuda.synchronize()
step = threading.Barrier(len(captures))
threads = [threading.Thread(target=c.capture, args=(step,)) for c in captures]
for t in threads:
    t.start()
for t in threads:
    t.join()
errors = [c.error for c in captures if c.error]
result = {"mode": mode, "errors": errors}
if not errors:
    first, second = captures

    def overlap(a, b):
        total = 0
        for start, size in a:
            for other_start, other_size in b:
                total += max(0, min(start + size, other_start + other_size) - max(start, other_start))
        return total

    result["shared_bytes"] = overlap(first.used, second.used)
    # Both graphs replayed at once on two streams, again and again: with scratch memory in common
    # one graph's kernels write over the other's intermediates.
    matched = []
    for _ in range(ROUNDS):
        for c in captures:
            with torch.cuda.stream(c.stream):
                c.graph.replay()
        torch.cuda.synchronize()
        matched.append(all(c.matches() for c in captures))
    result["concurrent_rounds"] = ROUNDS
    result["concurrent_rounds_matching_eager"] = sum(matched)
    if mode.startswith("tidepool"):
        result["graph_pools"] = [tidepool.torch.graph_pool_of(c.pool) for c in captures]
        # The first capture's graph destroyed: its memory comes back only if it was kept in its
        # own graph pool, not in the other capture's, whose graph still lives.
        torch.cuda.synchronize()
        kept_before, graphs_before = tidepool.stats().graph_kept_bytes, tidepool.stats().graphs
        first.graph = first.output = None
        gc.collect()
        for _ in range(1000):
            if tidepool.stats().graphs < graphs_before:
                break
            time.sleep(0.001)
        result["kept_bytes_before"] = kept_before
        result["kept_bytes_after_first_graph_destroyed"] = tidepool.stats().graph_kept_bytes
emit(result)
