"""Graph pools: CUDA graph captures that share memory, as PyTorch's torch.cuda.graph(pool=...).

tidepool keeps what a capture allocates for that graph alone while the graph lives (through
tidepool.torch.use() PyTorch's own `pool=` never reaches the allocator), so a server that
captures one graph per batch size holds the sum of their intermediates. Captures made under one
GraphPool share instead: what one capture freed serves the next on the same stream, and the
memory stays kept until every graph of the pool is gone.

    shared = tidepool.GraphPool()
    for batch in sizes:                          # largest first, as servers do
        with shared, torch.cuda.graph(graphs[batch]):
            outputs[batch] = model(inputs[batch])

As with PyTorch's shared pools, replay the graphs of one pool one after another (one stream's
order), never two at once. A capture joins the graph pool current on the thread that makes its
first allocation on a stream (PyTorch's autograd threads join through the capture, once the
forward pass allocated in it).
"""

import ctypes
import threading

from . import _library


class GraphPool:
    """A graph pool: captures made while it is entered (`with pool:`, on this thread) share their
    memory. Holds no memory of its own; entering it again, nested or on another thread, is fine."""

    def __init__(self):
        lib = _library.load()
        made = ctypes.c_uint64(0)
        _library.check(lib.tidepool_new_graph_pool(ctypes.byref(made)))
        self.id = made.value
        self._replaced = threading.local()

    def __enter__(self):
        lib = _library.load()
        previous = ctypes.c_uint64(0)
        _library.check(lib.tidepool_set_graph_pool(self.id, ctypes.byref(previous)))
        stack = getattr(self._replaced, "stack", None)
        if stack is None:
            stack = self._replaced.stack = []
        stack.append(previous.value)
        return self

    def __exit__(self, *exc):
        _library.check(_library.load().tidepool_set_graph_pool(self._replaced.stack.pop(), None))
        return False

    def __repr__(self):
        return f"tidepool.GraphPool(id={self.id})"


def current_graph_pool():
    """The id of the graph pool current on this thread (GraphPool.id), or 0 for none."""
    current = ctypes.c_uint64(0)
    _library.check(_library.load().tidepool_current_graph_pool(ctypes.byref(current)))
    return current.value
