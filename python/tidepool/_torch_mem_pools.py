"""tidepool.torch.mem_pool(tag) under tidepool.torch.use(), and torch.cuda.use_mem_pool given it.

Without use(), mem_pool(tag) is a torch.cuda.MemPool whose segments come from the tag's pool (a
pluggable allocator of its own, kept by PyTorch's caching allocator, as vLLM runs). Under use(),
PyTorch's allocator is tidepool's pluggable one, and PyTorch makes no MemPool under a pluggable
allocator ("pluggable does not yet support createOrIncrefPool", checked on the H200). So under
use() mem_pool(tag) is a TagMemPool, and use() wraps torch.cuda.use_mem_pool so that, given one,
it enters tidepool.region(tag): what the calling thread allocates inside comes from the tag's
pool, as PyTorch's use_mem_pool routes the calling thread's allocations. A program written with
`with torch.cuda.use_mem_pool(tidepool.torch.mem_pool(tag)):` runs unchanged with or without
use(). Any other pool goes to PyTorch's use_mem_pool (and a MemPool stays refused under use()).
A TagMemPool answers what code written for a MemPool asks of it: `id`, `allocator`, `use_count()`
and `snapshot()`.
"""

import contextlib
import threading

from . import _memory, _tags, _torch_replace


class TagMemPool:
    """Tag `tag`'s memory, for torch.cuda.use_mem_pool after tidepool.torch.use(), with what
    torch.cuda.MemPool offers besides."""

    def __init__(self, tag):
        self.tag = tag
        self._id = _memory.tag_pool_id(tag)
        self._uses = 0
        self._lock = threading.Lock()

    def __repr__(self):
        return f"tidepool.torch.TagMemPool({self.tag!r})"

    @property
    def id(self):
        """The pool's id, as MemPool.id: (0, the tag's index + 1), the segment_pool_id of its
        segments in torch.cuda.memory_snapshot() and tidepool.memory_snapshot()."""
        return self._id

    @property
    def allocator(self):
        """None, as for a MemPool on PyTorch's own allocator: after use() that is tidepool."""
        return None

    def use_count(self):
        """1 for the pool object, plus one for each use_mem_pool context open on it now (any
        thread), as MemPool.use_count() counts them."""
        with self._lock:
            return 1 + self._uses

    def snapshot(self, include_traces=True):
        """The tag's segments on every device, as MemPool.snapshot(): the segments of
        torch.cuda.memory_snapshot() whose segment_pool_id is this pool's id (include_traces is
        taken as MemPool's is; segments carry no trace entries either way)."""
        return _memory.memory_snapshot(self._id)["segments"]

    def _entered(self, change):
        with self._lock:
            self._uses += change


@contextlib.contextmanager
def _counted_region(pool):
    """tidepool.region(pool.tag), counted in pool.use_count() while open."""
    with _tags.region(pool.tag):
        pool._entered(+1)
        try:
            yield
        finally:
            pool._entered(-1)


def route_tag_pools(torch):
    """Wraps torch.cuda.use_mem_pool (in torch.cuda.memory and torch.cuda) to take TagMemPools."""

    def taking_tag_pools(original):
        def use_mem_pool(pool, *args, **kwargs):
            if isinstance(pool, TagMemPool):
                return _counted_region(pool)
            return original(pool, *args, **kwargs)

        return use_mem_pool

    _torch_replace.replace_memory_call(torch, "use_mem_pool", taking_tag_pools)
