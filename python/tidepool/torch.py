"""Routes PyTorch's CUDA allocations to tidepool's pools (torch.cuda.memory.CUDAPluggableAllocator
over tidepool_torch_alloc / tidepool_torch_free).

    import tidepool
    tidepool.torch.use()   # before the first CUDA allocation

PyTorch's allocator can be chosen once per process, before CUDA memory is first allocated; after
use(), torch.cuda.empty_cache() and torch.cuda.memory_reserved() no longer describe tidepool's
pools: use tidepool.release_cached_memory() and tidepool.stats().
"""

from . import _errors, _frameworks, _library


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
