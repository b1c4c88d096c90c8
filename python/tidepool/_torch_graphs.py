"""The PyTorch graph pool of a capture honoured by tidepool: after tidepool.torch.use(), every
capture (torch.cuda.graph's, so torch.cuda.make_graphed_callables' and serving engines', and a
program's own CUDAGraph.capture_begin / capture_end) runs under the tidepool graph pool that stands
for its PyTorch pool, so captures PyTorch would give one pool share their memory in tidepool too,
with no tidepool call in the program's code.

PyTorch's pluggable allocator interface passes none of its graph-pool calls on (capture_begin's
beginAllocateToPool reaches no pluggable allocator), so the pool is read where it is still known:
`torch.cuda.CUDAGraph.capture_begin` and `capture_end` are wrapped (torch.cuda.graph calls them).
Each PyTorch pool handle (the tuple that torch.cuda.graph_pool_handle() or CUDAGraph.pool()
returns) maps to one tidepool.GraphPool. A capture with no `pool=` gets a graph pool of its own,
which is what PyTorch's private pool is; once the capture ends its CUDAGraph.pool() is mapped to
that graph pool too, so a later capture given `pool=graph.pool()` shares with it, as in PyTorch.

The graph pool is entered for all threads (GraphPool(all_threads=True)) after PyTorch began the
capture, and left once it ended: a captured backward pass allocates on PyTorch's autograd thread.
It is also given to the capture itself (tidepool_set_capture_graph_pool on the capture's stream),
which wins over any thread's pool, so captures overlapping on several threads each keep their own
whichever thread allocates; the all-threads default is the fallback where the driver names no
capture.
A graph pool the program entered itself wins: on this thread, or as the default of every thread
(tidepool.GraphPool(all_threads=True) around the capture), nothing is entered here.
"""

import functools
import importlib.abc
import importlib.util
import sys
import threading

from . import _errors, _graph_pools

_lock = threading.Lock()
# PyTorch pool handle (a tuple of ints) -> the GraphPool that stands for it.
_graph_pools_by_handle = {}
# The ids of the graph pools made here: a default graph pool among them is another capture's, in
# progress on another thread, not one the program chose.
_made_here = set()
_WRAPPED_MARK = "_tidepool_follows_graph_pools"


def follow_graph_pools(cuda_graph_class):
    """Wraps `cuda_graph_class` (torch.cuda.CUDAGraph) so that its captures join the tidepool graph
    pool of their PyTorch pool. Wrapping twice wraps once."""
    if getattr(cuda_graph_class, _WRAPPED_MARK, False):
        return
    begin, end = cuda_graph_class.capture_begin, cuda_graph_class.capture_end

    @functools.wraps(begin)
    def capture_begin(self, pool=None, *args, **kwargs):
        begin(self, pool, *args, **kwargs)  # the capture runs on the current stream from here
        capture = 0
        try:
            graph_pool = _graph_pool_to_enter(() if pool is None else (pool,))
            if graph_pool is not None:
                graph_pool.__enter__()
                try:
                    capture = _give_capture(graph_pool)
                except BaseException:
                    graph_pool.__exit__(None, None, None)
                    raise
        except BaseException:
            end(self)  # ends the capture begun above
            raise
        self._tidepool_capture = (graph_pool, capture, pool is None)

    @functools.wraps(end)
    def capture_end(self, *args, **kwargs):
        graph_pool, capture, private = self.__dict__.pop("_tidepool_capture", (None, 0, False))
        try:
            end(self, *args, **kwargs)
        finally:
            if capture:
                _graph_pools.forget_capture(capture)
            if graph_pool is not None:
                graph_pool.__exit__(None, None, None)
        if graph_pool is not None and private:
            _map_private_pool(self, graph_pool)

    cuda_graph_class.capture_begin = capture_begin
    cuda_graph_class.capture_end = capture_end
    setattr(cuda_graph_class, _WRAPPED_MARK, True)


_INDUCTOR_CONFIG = "torch._inductor.config"


def capture_compiled_graphs_without_trees():
    """Turns inductor's CUDA graph trees off: torch.compile's mode="reduce-overhead" then captures
    each compiled graph through torch.cuda.graph, which the wrapper above follows; with the trees
    on, PyTorch refuses the first capture under any pluggable allocator (they ask the allocator for
    checkpoints: "CUDAPluggableAllocator does not yet support getCheckpointState"). Inductor's
    config is set now if the program imported it, else right after its import: importing it here
    would cost every program seconds, torch.compile or not."""
    config = sys.modules.get(_INDUCTOR_CONFIG)
    if config is not None:
        _turn_trees_off(config)
    elif not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_INDUCTOR_CONFIG, _turn_trees_off))


def _turn_trees_off(config):
    config.triton.cudagraph_trees = False


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `action(module)` once module `name` has been imported (its code run), then leaves
    sys.meta_path. The import itself is found by the other finders, as it would be without this."""

    def __init__(self, name, action):
        self.name, self.action = name, action

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ActingLoader(spec.loader, self.action)
        return spec


class _ActingLoader(importlib.abc.Loader):
    """`loader`, then `action` on the module it made."""

    def __init__(self, loader, action):
        self.loader, self.action = loader, action

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.action(module)


def graph_pool_of(handle):
    """The tidepool graph pool id that PyTorch pool `handle` maps to, or 0 when no capture used it
    yet."""
    with _lock:
        graph_pool = _graph_pools_by_handle.get(_handle_key(handle))
    return graph_pool.id if graph_pool is not None else 0


def _graph_pool_to_enter(pool_arguments):
    """The GraphPool a capture given `pool_arguments` (() or (handle,), the PyTorch pool given to
    capture_begin) enters, or None where the program entered one of its own."""
    if _graph_pools.thread_graph_pool() != 0:
        return None
    default = _graph_pools.default_graph_pool()
    with _lock:
        if default != 0 and default not in _made_here:
            return None
        if not pool_arguments:
            return _new_graph_pool()
        key = _handle_key(pool_arguments[0])
        graph_pool = _graph_pools_by_handle.get(key)
        if graph_pool is None:
            graph_pool = _graph_pools_by_handle[key] = _new_graph_pool()
        return graph_pool


def _give_capture(graph_pool):
    """Gives the capture just begun on the current stream `graph_pool` itself, so that all its
    allocations join it whatever thread makes them: the all-threads default entered with it
    serves only one of several captures overlapping on several threads. Returns the capture's id,
    or 0 where the driver names no capture on the stream (the thread's and the default pool still
    apply then)."""
    import torch

    try:
        return _graph_pools.give_capture(torch.cuda.current_device(),
                                         torch.cuda.current_stream().cuda_stream, graph_pool.id)
    except _errors.TidepoolError:
        return 0


def _map_private_pool(cuda_graph, graph_pool):
    """Maps a capture's private PyTorch pool (known only once the capture ended) to the graph pool
    it ran under."""
    try:
        handle = cuda_graph.pool()
    except RuntimeError:  # a graph not instantiated yet (keep_graph=True): PyTorch has no id either
        return
    with _lock:
        _graph_pools_by_handle.setdefault(_handle_key(handle), graph_pool)


def _new_graph_pool():
    graph_pool = _graph_pools.GraphPool(all_threads=True)
    _made_here.add(graph_pool.id)
    return graph_pool


def _handle_key(handle):
    try:
        return tuple(int(part) for part in handle)
    except TypeError:
        return handle

