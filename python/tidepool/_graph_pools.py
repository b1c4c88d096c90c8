"""Graph pools: CUDA graph captures that share memory, as PyTorch's torch.cuda.graph(pool=...).

tidepool keeps what a capture allocates for that graph alone while the graph lives, so a server
that captures one graph per batch size would hold the sum of their intermediates. Captures made
under one GraphPool share instead: what one capture freed serves the next on the same stream, and
the memory stays kept until every graph of the pool is gone. After tidepool.torch.use(),
torch.cuda.graph enters the GraphPool that stands for its `pool=` by itself (_torch_graphs.py);
CuPy's captures, and code that wants its own grouping, enter one as below (one the program
entered wins).

    shared = tidepool.GraphPool()
    for batch in sizes:                          # largest first, as servers do
        with shared, torch.cuda.graph(graphs[batch]):
            outputs[batch] = model(inputs[batch])

As with PyTorch's shared pools, replay the graphs of one pool one after another (one stream's
order), never two at once. A capture joins the graph pool given to it (give_capture, which the
torch.cuda.graph wrapper calls), else the one current on the thread that makes its first
allocation on a stream. A captured backward pass (torch.cuda.make_graphed_callables, or
torch.autograd.grad inside a capture) allocates on PyTorch's autograd threads: a pool entered by
hand must be every thread's, GraphPool(all_threads=True), as tidepool.region(tag,
all_threads=True) does for tags (the pools torch.cuda.graph enters after use() are).
"""

import ctypes
import threading

from . import _library


class _AllThreadsDefaults:
    """The default graph pool while GraphPool(all_threads=True) entries are in progress, on any
    threads: the latest one entered that has not left, else the default in force before the first
    of them. Entries may leave in any order (captures overlapping on two threads), so each exit
    does not simply restore what its entry replaced: that would leave the other capture without
    its pool, or a pool no capture uses as every thread's default."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = []  # [entry token, graph pool id], oldest first
        self._before = 0

    def enter(self, lib, pool_id):
        with self._lock:
            replaced = ctypes.c_uint64(0)
            _library.check(lib.tidepool_set_default_graph_pool(pool_id, ctypes.byref(replaced)))
            if not self._entries:
                self._before = replaced.value
            entry = object()
            self._entries.append((entry, pool_id))
            return entry

    def leave(self, lib, entry):
        with self._lock:
            self._entries = [e for e in self._entries if e[0] is not entry]
            now = self._entries[-1][1] if self._entries else self._before
            _library.check(lib.tidepool_set_default_graph_pool(now, None))


_defaults = _AllThreadsDefaults()


class GraphPool:
    """A graph pool: captures made while it is entered (`with pool:`, on this thread) share their
    memory. With all_threads=True, entering it also makes it the default of every thread with
    none of its own (PyTorch's autograd threads), until the matching exit. Holds no memory of its
    own; entering it again, nested or on another thread, is fine."""

    def __init__(self, all_threads=False):
        lib = _library.load()
        made = ctypes.c_uint64(0)
        _library.check(lib.tidepool_new_graph_pool(ctypes.byref(made)))
        self.id = made.value
        self.all_threads = bool(all_threads)
        self._replaced = threading.local()

    def __enter__(self):
        lib = _library.load()
        previous = ctypes.c_uint64(0)
        entry = _defaults.enter(lib, self.id) if self.all_threads else None
        _library.check(lib.tidepool_set_graph_pool(self.id, ctypes.byref(previous)))
        stack = getattr(self._replaced, "stack", None)
        if stack is None:
            stack = self._replaced.stack = []
        stack.append((previous.value, entry))
        return self

    def __exit__(self, *exc):
        lib = _library.load()
        previous, entry = self._replaced.stack.pop()
        _library.check(lib.tidepool_set_graph_pool(previous, None))
        if entry is not None:
            _defaults.leave(lib, entry)
        return False

    def __repr__(self):
        return f"tidepool.GraphPool(id={self.id}, all_threads={self.all_threads})"


def current_graph_pool():
    """The id of the graph pool current on this thread (GraphPool.id), else of the default one
    (GraphPool(all_threads=True) entered on any thread), or 0 for none: the one a capture whose
    first allocation this thread makes would join."""
    return thread_graph_pool() or default_graph_pool()


def thread_graph_pool():
    """The id of the graph pool this thread entered (GraphPool.id), or 0 for none."""
    current = ctypes.c_uint64(0)
    _library.check(_library.load().tidepool_current_graph_pool(ctypes.byref(current)))
    return current.value


def default_graph_pool():
    """The id of the default graph pool (GraphPool(all_threads=True) entered on any thread), or 0
    for none."""
    current = ctypes.c_uint64(0)
    _library.check(_library.load().tidepool_default_graph_pool(ctypes.byref(current)))
    return current.value


def give_capture(device, stream, graph_pool_id):
    """Makes the capture running on `stream` (a cudaStream_t as an int) of `device` join graph
    pool `graph_pool_id` for every allocation it makes, on whatever thread
    (tidepool_set_capture_graph_pool). Returns the capture's id, for forget_capture; raises
    TidepoolError (TIDEPOOL_INVALID_STREAM) when the stream is not being captured."""
    capture = ctypes.c_uint64(0)
    _library.check(_library.load().tidepool_set_capture_graph_pool(
        device, stream, graph_pool_id, ctypes.byref(capture)))
    return capture.value


def forget_capture(capture_id):
    """Forgets the graph pool given to capture `capture_id` (give_capture)."""
    _library.check(_library.load().tidepool_forget_capture_graph_pool(capture_id))

