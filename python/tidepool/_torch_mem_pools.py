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
"""

from . import _tags, _torch_replace


class TagMemPool:
    """Tag `tag`'s memory, for torch.cuda.use_mem_pool after tidepool.torch.use()."""

    def __init__(self, tag):
        self.tag = tag

    def __repr__(self):
        return f"tidepool.torch.TagMemPool({self.tag!r})"


def route_tag_pools(torch):
    """Wraps torch.cuda.use_mem_pool (in torch.cuda.memory and torch.cuda) to take TagMemPools."""

    def taking_tag_pools(original):
        def use_mem_pool(pool, *args, **kwargs):
            if isinstance(pool, TagMemPool):
                return _tags.region(pool.tag)
            return original(pool, *args, **kwargs)

        return use_mem_pool

    _torch_replace.replace_memory_call(torch, "use_mem_pool", taking_tag_pools)
