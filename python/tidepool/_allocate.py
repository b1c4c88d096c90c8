"""Direct allocation through tidepool's pools, for programs that manage raw device pointers
(and for tests). Framework users want tidepool.torch.use() or tidepool.cupy.use() instead."""

import ctypes

from . import _arguments, _library, _lifetime
from ._lifetime import PERSISTENT, SCRATCH

ANY_DEVICE = -1


def _plain(value, minimum, maximum):
    """Whether `value` is a plain int (not a bool or another integral type) within the range: the
    arguments that need no conversion, which allocate() and deallocate() pass on directly (the
    checks in _arguments cost about as much as the call into the library)."""
    return type(value) is int and minimum <= value <= maximum


def allocate(size, device=0, stream=None, persistent=None):
    """Allocates `size` bytes on `device` for use on `stream` (a cudaStream_t as an int, or None
    for the default stream); returns the device pointer as an int. `persistent`: whether it lives
    long (placed apart from scratch); None takes the thread's hint (tidepool.persistent())."""
    if not (_plain(size, 0, _arguments.MAX_BYTES) and _plain(device, 0, _arguments.MAX_DEVICE)
            and (stream is None or _plain(stream, 1, _arguments.MAX_POINTER))):
        size = _arguments.byte_count("allocate", "size", size)
        device = _arguments.device("allocate", device)
        stream = _arguments.stream("allocate", stream)
    out = ctypes.c_void_p()
    hint = _lifetime.thread_hint() if persistent is None else (PERSISTENT if persistent else SCRATCH)
    _library.check(_library.load().tidepool_allocate(size, device, stream, hint, ctypes.byref(out)))
    return out.value


def deallocate(ptr, device=ANY_DEVICE, stream=None):
    """Frees a pointer from allocate(); device may be left to be found. Freeing it twice raises
    TidepoolError TIDEPOOL_DOUBLE_FREE ("double free")."""
    if not (_plain(ptr, 1, _arguments.MAX_POINTER) and _plain(device, -1, _arguments.MAX_DEVICE)
            and (stream is None or _plain(stream, 1, _arguments.MAX_POINTER))):
        ptr = _arguments.pointer("deallocate", "ptr", ptr)
        device = _arguments.device("deallocate", device, any_device=True)
        stream = _arguments.stream("deallocate", stream)
    _library.check(_library.load().tidepool_deallocate(ptr, device, stream))


def record_stream(ptr, stream, device=ANY_DEVICE):
    """Marks `ptr` as used on `stream` too (not reused before that stream's work completes)."""
    ptr = _arguments.pointer("record_stream", "ptr", ptr)
    stream = _arguments.stream("record_stream", stream)
    device = _arguments.device("record_stream", device, any_device=True)
    _library.check(_library.load().tidepool_record_stream(ptr, device, stream))


def forget_stream(stream, device=ANY_DEVICE):
    """Tells tidepool that `stream` (a cudaStream_t as an int) is, or is about to be, destroyed:
    the pools never name it to the driver again, and a new stream that CUDA gives the same handle
    starts afresh. tidepool.cupy.use() does it for the CuPy streams it sees."""
    _library.check(_library.load().tidepool_forget_stream(device, stream))


def release(device):
    """Hands `device`'s free cached memory back to the driver; returns the bytes."""
    device = _arguments.device("release", device)
    released = ctypes.c_size_t(0)
    _library.check(_library.load().tidepool_release(device, ctypes.byref(released)))
    return released.value


def compact(device):
    """release(device), then the rest of what live allocations pin: every handle they cover only in
    part is made again under just the 2 MiB granules they touch, their bytes moved (through pinned
    host memory) to the same addresses, so that the pool holds what its live allocations touch and
    no more; the pools of the tags on `device` too, but a sleeping one. Returns the bytes handed
    back, release's included. It waits for the pool's streams first; while it runs, no GPU work may
    use the pool's memory (call it between phases, as for sleep()), and allocations on other
    threads wait until it returns. With PyTorch: `torch.cuda.empty_cache();
    tidepool.compact(torch.cuda.current_device())`."""
    device = _arguments.device("compact", device)
    released = ctypes.c_size_t(0)
    _library.check(_library.load().tidepool_compact(device, ctypes.byref(released)))
    return released.value


def device_count():
    """Devices the driver sees."""
    count = ctypes.c_int(0)
    _library.check(_library.load().tidepool_device_count(ctypes.byref(count)))
    return count.value


def has_context(device):
    """Whether this process holds a context on `device` (asking opens none)."""
    device = _arguments.device("has_context", device)
    has = ctypes.c_int(0)
    _library.check(_library.load().tidepool_has_context(device, ctypes.byref(has)))
    return bool(has.value)


def set_current_stream(device, stream):
    """Sets the calling thread's current stream on `device`: the stream tidepool_cupy_malloc
    allocates on. tidepool.cupy.use() keeps it equal to CuPy's current stream."""
    device = _arguments.device("set_current_stream", device)
    stream = _arguments.stream("set_current_stream", stream)
    _library.check(_library.load().tidepool_set_current_stream(device, stream))


def get_current_stream(device):
    """The calling thread's current stream on `device` (0 for the default stream)."""
    device = _arguments.device("get_current_stream", device)
    stream = _library.c_stream()
    _library.check(_library.load().tidepool_get_current_stream(device, ctypes.byref(stream)))
    return stream.value or 0
