"""Routes PyTorch's CUDA allocations to tidepool's pools (torch.cuda.memory.CUDAPluggableAllocator
over tidepool_torch_alloc / tidepool_torch_free).

    import tidepool
    tidepool.torch.use()   # before the first CUDA allocation

PyTorch's allocator can be chosen once per process, before CUDA memory is first allocated; after
use(), torch.cuda.empty_cache() and torch.cuda.memory_reserved() no longer describe tidepool's
pools: use tidepool.release_cached_memory() and tidepool.stats().

Out of memory. When tidepool cannot satisfy an allocation, after releasing every cache it can
reach, PyTorch raises a RuntimeError whose message starts "CUDA out of memory." (PyTorch's own
words, followed by tidepool's report), the allocation is not made, and the program goes on: catch
it, free what you hold (or take a smaller batch) and retry. It is not torch.OutOfMemoryError:
PyTorch makes that type only from its own C++ exception class, which a pluggable allocator cannot
throw without being built against libtorch. Catch RuntimeError and ask is_out_of_memory(error),
which is true for both kinds:

    try:
        loss = step(batch)
    except RuntimeError as error:
        if not tidepool.torch.is_out_of_memory(error):
            raise
        ...   # smaller batch
"""

from . import _errors, _frameworks, _library

# What the message of an out-of-memory error holds, PyTorch's and tidepool's alike (it starts
# with it; a framework that wraps the error may put words before it).
OUT_OF_MEMORY_MESSAGE = "CUDA out of memory."


def use():
    """Routes PyTorch's CUDA allocations to tidepool. Raises TidepoolError if PyTorch already
    allocated CUDA memory with its own allocator."""
    import torch

    if _frameworks.routed["torch"]:
        return
    path = _library.path()  # loads the library, so a missing one fails here, clearly
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "tidepool_torch_alloc",
                                                         "tidepool_torch_free")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as error:
        raise _errors.TidepoolError(
            _errors.INVALID_ARGUMENT,
            "tidepool.torch.use() must run before PyTorch's first CUDA allocation "
            f"(PyTorch says: {error})") from error
    _frameworks.routed["torch"] = True


def is_used():
    """Whether PyTorch's allocations go to tidepool."""
    return _frameworks.routed["torch"]


def is_out_of_memory(error):
    """Whether `error` is PyTorch running out of device memory: torch.OutOfMemoryError (PyTorch's
    own allocator), or the RuntimeError PyTorch raises when tidepool's allocation fails."""
    torch = _frameworks.loaded("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(error, oom_type):
        return True
    return isinstance(error, RuntimeError) and OUT_OF_MEMORY_MESSAGE in str(error)
