"""Routes CuPy's allocations to tidepool's pools (cupy.cuda.set_allocator with a
cupy.cuda.memory.CFunctionAllocator over tidepool_cupy_malloc / tidepool_cupy_free).

    import tidepool
    tidepool.cupy.use()

CuPy passes no stream to its allocator. Before each allocation, the allocator installed here reads
CuPy's current stream (cupy.cuda.get_current_stream()) and, when it differs from what this thread
last told the library, sets the library's per-thread current stream for the current device
(tidepool_set_current_stream); tidepool_cupy_malloc then allocates on that stream, and
tidepool_cupy_free frees on the stream the block was allocated on, as CuPy's own pool does.
A failed allocation raises cupy.cuda.memory.OutOfMemoryError, as CuPy's pool would.

CuPy destroys a stream when its Stream object is collected, and arrays made on it may be freed
later. So for each stream CuPy owns that it sees, the allocator registers a finalizer that tells
the library (tidepool_forget_stream) once the stream is gone: the library then never names the
destroyed handle to the driver, and a new stream that gets the same handle starts afresh.
"""

import threading
import weakref

from . import _errors, _frameworks, _library

_SPECIAL_STREAMS = (0, 1, 2)  # the legacy default stream (0 or 1) and the per-thread one: never destroyed
_watched = {}  # id(cupy Stream) -> its weakref.finalize, while it lives


def _forget(key, ptr):
    _watched.pop(key, None)
    lib = _library.load()
    lib.tidepool_forget_stream(-1, ptr)  # every device; a finalizer must not raise


def _watch(cupy, stream):
    """Tells the library when `stream` is destroyed, if CuPy owns it."""
    key = id(stream)
    if key in _watched or stream.ptr in _SPECIAL_STREAMS:
        return
    external = getattr(cupy.cuda, "ExternalStream", None)
    if external is not None and isinstance(stream, external):
        return  # the program owns it and destroys it itself (it may call tidepool.forget_stream)
    try:
        _watched[key] = weakref.finalize(stream, _forget, key, stream.ptr)
    except TypeError:
        pass  # a stream type without weak references: the program can call tidepool.forget_stream


class _StreamTracker(threading.local):
    """What this thread last told the library: (device, stream pointer)."""

    last = None


def _c_function_allocator(cupy, lib):
    """CuPy's CFunctionAllocator over tidepool_cupy_malloc / tidepool_cupy_free: what use() installs
    behind the stream it passes on (bench/gpu/cupy_call_cost.py sets it alone, to time that)."""
    return cupy.cuda.memory.CFunctionAllocator(
        0, _library.function_address("tidepool_cupy_malloc"),
        _library.function_address("tidepool_cupy_free"), lib)


def use():
    """Routes CuPy's allocations to tidepool (from now on; arrays made before stay in CuPy's
    pool until freed, and release_cached_memory() empties that pool)."""
    import cupy

    if _frameworks.routed["cupy"]:
        return
    lib = _library.load()
    c_allocator = _c_function_allocator(cupy, lib)
    tracker = _StreamTracker()
    get_device = cupy.cuda.runtime.getDevice
    get_stream = cupy.cuda.get_current_stream
    set_stream = lib.tidepool_set_current_stream

    def allocate(size):
        device = get_device()
        current = get_stream()
        stream = current.ptr
        if tracker.last != (device, stream):
            _library.check(set_stream(device, stream or None))
            tracker.last = (device, stream)
            _watch(cupy, current)
        memory = c_allocator.malloc(size)
        if size and not memory.ptr:
            _raise_failure(cupy, size, device, lib.tidepool_last_status())
        return memory

    cupy.cuda.set_allocator(allocate)
    _frameworks.routed["cupy"] = True


def _raise_failure(cupy, size, device, status):
    """Raises what a NULL from tidepool_cupy_malloc meant: CuPy's OutOfMemoryError when memory ran
    out (so code that catches it keeps working), else the TidepoolError."""
    cause = _errors.error_for(status, _library.last_error())
    if status != _errors.OUT_OF_MEMORY:
        raise cause
    from ._stats import stats

    try:
        error = cupy.cuda.memory.OutOfMemoryError(size, stats(device).in_use_bytes)
    except TypeError:  # a CuPy whose OutOfMemoryError takes other arguments
        error = MemoryError(str(cause))
    raise error from cause


def is_used():
    """Whether CuPy's allocations go to tidepool."""
    return _frameworks.routed["cupy"]
