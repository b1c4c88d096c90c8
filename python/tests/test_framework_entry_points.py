"""The PyTorch and CuPy entry points, called as the frameworks call them: through C function
pointers of the frameworks' own types (CUDAPluggableAllocator's alloc/free, CFunctionAllocator's
malloc/free), and the per-thread current stream CuPy's allocations follow."""

import threading

from sim_support import MiB
from tidepool import _library


def pointer_to(name, function_type):
    # What the frameworks do: take the symbol's address and call it through their own type.
    return function_type(_library.function_address(name))


def test_torch_alloc_and_free_as_cuda_pluggable_allocator_calls_them(tp):
    alloc = pointer_to("tidepool_torch_alloc", _library.TORCH_ALLOC_FN)
    free = pointer_to("tidepool_torch_free", _library.TORCH_FREE_FN)
    live = tp.stats(0).live_allocations
    ptr = alloc(5 * MiB, 0, None)
    assert ptr
    assert tp.stats(0).live_allocations == live + 1
    assert alloc(0, 0, None) is None  # empty tensors get no memory
    free(ptr, 5 * MiB, 0, None)
    assert tp.stats(0).live_allocations == live


# tidepool_torch_alloc's failures are C++ exceptions for PyTorch to catch (it never checks for
# NULL); no C++ exception may cross ctypes, so they are tested in C++ (tests/capi) and, through
# PyTorch, by the GPU tests (python/tests/gpu).


def test_cupy_malloc_and_free_as_cfunction_allocator_calls_them(tp):
    malloc = pointer_to("tidepool_cupy_malloc", _library.CUPY_MALLOC_FN)
    free = pointer_to("tidepool_cupy_free", _library.CUPY_FREE_FN)
    live = tp.stats(0).live_allocations
    ptr = malloc(None, 3 * MiB, 0)
    assert ptr
    assert tp.stats(0).live_allocations == live + 1
    free(None, ptr, 0)
    assert tp.stats(0).live_allocations == live


def test_cupy_malloc_allocates_on_the_threads_current_stream(tp, lib):
    malloc = pointer_to("tidepool_cupy_malloc", _library.CUPY_MALLOC_FN)
    free = pointer_to("tidepool_cupy_free", _library.CUPY_FREE_FN)
    assert tp.get_current_stream(0) == 0
    # A stream the simulated GPU never made: if malloc honours the current stream, the pool
    # must refuse it.
    tp.set_current_stream(0, 0xDEAD0)
    try:
        assert tp.get_current_stream(0) == 0xDEAD0
        seen = []
        other = threading.Thread(target=lambda: seen.append(tp.get_current_stream(0)))
        other.start()
        other.join()
        assert seen == [0]  # per thread
        assert malloc(None, MiB, 0) is None
        assert lib.tidepool_last_status() == 4  # TIDEPOOL_INVALID_STREAM
    finally:
        tp.set_current_stream(0, None)
    ptr = malloc(None, MiB, 0)
    assert ptr
    free(None, ptr, 0)
