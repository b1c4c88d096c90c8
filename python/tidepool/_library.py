"""Finding and loading libtidepool.so, and the ctypes prototypes of its C API.

The library is looked for, in order: at $TIDEPOOL_LIBRARY (and only there when it is set); next
to this package (where `pip install ./python` and `cmake --install` put it); then by the dynamic
loader (LD_LIBRARY_PATH, the ldconfig cache, the system's library folders). The package itself is
pure Python: the library comes from the CMake build (python/setup.py runs it).
"""

import ctypes
import ctypes.util
import os
import threading

from . import _errors

LIBRARY_FILE = "libtidepool.so"

c_stream = ctypes.c_void_p  # cudaStream_t
RECLAIM_FN = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p)
# The function types the frameworks cast the entry points to.
TORCH_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, c_stream)
TORCH_FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, c_stream)
CUPY_MALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
CUPY_FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


class CStats(ctypes.Structure):
    """tidepool_stats_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint64),
        ("in_use_bytes", ctypes.c_uint64),
        ("requested_bytes", ctypes.c_uint64),
        ("cached_bytes", ctypes.c_uint64),
        ("mapped_bytes", ctypes.c_uint64),
        ("reserved_address_bytes", ctypes.c_uint64),
        ("peak_in_use_bytes", ctypes.c_uint64),
        ("peak_requested_bytes", ctypes.c_uint64),
        ("peak_mapped_bytes", ctypes.c_uint64),
        ("live_allocations", ctypes.c_uint64),
        ("allocations", ctypes.c_uint64),
        ("deallocations", ctypes.c_uint64),
        ("out_of_memory_recoveries", ctypes.c_uint64),
        ("released_bytes", ctypes.c_uint64),
        ("driver_calls", ctypes.c_uint64),
        ("driver_microseconds", ctypes.c_double),
        ("asleep_bytes", ctypes.c_uint64),
        ("thread_caches", ctypes.c_uint64),
        ("graph_kept_bytes", ctypes.c_uint64),
        ("graphs", ctypes.c_uint64),
        ("waits", ctypes.c_uint64),
        ("wait_microseconds", ctypes.c_double),
    ]


class CPoolOptions(ctypes.Structure):
    """tidepool_pool_options_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint64),
        ("byte_cap", ctypes.c_uint64),
        ("headroom", ctypes.c_uint64),
        ("small_size_threshold", ctypes.c_uint64),
        ("max_cached_bytes", ctypes.c_uint64),
        ("decay_milliseconds", ctypes.c_uint64),
        ("address_range_bytes", ctypes.c_uint64),
        ("immediate_release", ctypes.c_int32),
        ("reserved_", ctypes.c_int32),
        ("growth_slack", ctypes.c_double),
        ("thread_caches", ctypes.c_int32),
        ("reserved2_", ctypes.c_int32),
        ("alias_free_handles", ctypes.c_int32),
        ("reserved3_", ctypes.c_int32),
        ("alias_slack", ctypes.c_double),
        ("follow_graph_captures", ctypes.c_int32),
        ("reserved4_", ctypes.c_int32),
        ("compact_on_out_of_memory", ctypes.c_int32),
        ("reserved5_", ctypes.c_int32),
    ]


class CSharingOptions(ctypes.Structure):
    """tidepool_sharing_options_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint64),
        ("enabled", ctypes.c_int32),
        ("gives", ctypes.c_int32),
        ("wait_milliseconds", ctypes.c_uint64),
    ]


class CBlockInfo(ctypes.Structure):
    """tidepool_block_info_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint64),
        ("address", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("requested", ctypes.c_uint64),
        ("stream", ctypes.c_uint64),
        ("range", ctypes.c_uint64),
        ("state", ctypes.c_int32),
        ("flags", ctypes.c_int32),
    ]


class CMemorySummary(ctypes.Structure):
    """tidepool_memory_summary_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint64),
        ("held_bytes", ctypes.c_uint64),
        ("in_use_bytes", ctypes.c_uint64),
        ("cached_bytes", ctypes.c_uint64),
        ("largest_free_block", ctypes.c_uint64),
        ("releasable_bytes", ctypes.c_uint64),
        ("blocks", ctypes.c_uint64),
        ("handles", ctypes.c_uint64),
    ]


class CMemoryEvent(ctypes.Structure):
    """tidepool_memory_event_t."""

    _fields_ = [
        ("struct_size", ctypes.c_uint64),
        ("action", ctypes.c_int32),
        ("thread", ctypes.c_uint32),
        ("time_ns", ctypes.c_int64),
        ("address", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("stream", ctypes.c_uint64),
    ]


BLOCK_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(CBlockInfo), ctypes.c_void_p)
HANDLE_FN = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)
EVENT_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(CMemoryEvent), ctypes.c_void_p)

_status = ctypes.c_int
_size_p = ctypes.POINTER(ctypes.c_size_t)
_int_p = ctypes.POINTER(ctypes.c_int)

# name: (restype, argtypes), as in include/tidepool/c_api.h.
_PROTOTYPES = {
    "tidepool_version": (ctypes.c_char_p, []),
    "tidepool_last_error": (ctypes.c_char_p, []),
    "tidepool_last_status": (ctypes.c_int, []),
    "tidepool_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "tidepool_device_count": (_status, [_int_p]),
    "tidepool_has_context": (_status, [ctypes.c_int, _int_p]),
    "tidepool_allocate": (_status, [ctypes.c_size_t, ctypes.c_int, c_stream, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_void_p)]),
    "tidepool_deallocate": (_status, [ctypes.c_void_p, ctypes.c_int, c_stream]),
    "tidepool_record_stream": (_status, [ctypes.c_void_p, ctypes.c_int, c_stream]),
    "tidepool_forget_stream": (_status, [ctypes.c_int, c_stream]),
    "tidepool_set_current_stream": (_status, [ctypes.c_int, c_stream]),
    "tidepool_get_current_stream": (_status, [ctypes.c_int, ctypes.POINTER(c_stream)]),
    "tidepool_set_thread_lifetime": (_status, [ctypes.c_int]),
    "tidepool_get_thread_lifetime": (_status, [ctypes.POINTER(ctypes.c_int)]),
    "tidepool_torch_alloc": (ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, c_stream]),
    "tidepool_torch_free": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, c_stream]),
    "tidepool_cupy_malloc": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]),
    "tidepool_cupy_free": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]),
    "tidepool_stats": (_status, [ctypes.c_int, ctypes.POINTER(CStats)]),
    "tidepool_reset_peak_stats": (_status, [ctypes.c_int]),
    "tidepool_release": (_status, [ctypes.c_int, _size_p]),
    "tidepool_compact": (_status, [ctypes.c_int, _size_p]),
    "tidepool_release_cached_memory": (_status, [_size_p]),
    "tidepool_available_bytes": (_status, [ctypes.c_int, _size_p]),
    "tidepool_set_byte_cap": (_status, [ctypes.c_int, ctypes.c_uint64]),
    "tidepool_byte_cap": (_status, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]),
    "tidepool_set_default_pool_options": (_status, [ctypes.POINTER(CPoolOptions)]),
    "tidepool_get_default_pool_options": (_status, [ctypes.POINTER(CPoolOptions)]),
    "tidepool_add_reclaim_hook": (_status, [RECLAIM_FN, ctypes.c_void_p, _int_p]),
    "tidepool_remove_reclaim_hook": (_status, [ctypes.c_int]),
    "tidepool_set_sharing_options": (_status, [ctypes.POINTER(CSharingOptions)]),
    "tidepool_get_sharing_options": (_status, [ctypes.POINTER(CSharingOptions)]),
    "tidepool_stop_sharing": (_status, []),
    "tidepool_start_recording": (_status, [ctypes.c_char_p]),
    "tidepool_stop_recording": (_status, []),
    "tidepool_recording_path": (_status, [ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "tidepool_describe": (_status, [ctypes.c_int, ctypes.POINTER(CMemorySummary), BLOCK_FN, HANDLE_FN,
                                    ctypes.c_void_p]),
    "tidepool_describe_tag": (_status, [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(CMemorySummary), BLOCK_FN,
                                        HANDLE_FN, ctypes.c_void_p]),
    "tidepool_recent_events": (_status, [ctypes.c_int, EVENT_FN, ctypes.c_void_p]),
    "tidepool_push_tag": (_status, [ctypes.c_char_p]),
    "tidepool_pop_tag": (_status, []),
    "tidepool_set_default_tag": (_status, [ctypes.c_char_p]),
    "tidepool_default_tag": (_status, [ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "tidepool_current_tag": (_status, [ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "tidepool_tag_id": (_status, [ctypes.c_char_p, _int_p]),
    "tidepool_tag_count": (_status, [_int_p]),
    "tidepool_tag_name": (_status, [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, _size_p]),
    "tidepool_sleep": (_status, [ctypes.c_char_p, ctypes.c_int, _size_p]),
    "tidepool_wake": (_status, [ctypes.c_char_p]),
    "tidepool_tag_asleep": (_status, [ctypes.c_char_p, _int_p]),
    "tidepool_tag_stats": (_status, [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(CStats)]),
    "tidepool_new_graph_pool": (_status, [ctypes.POINTER(ctypes.c_uint64)]),
    "tidepool_set_graph_pool": (_status, [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]),
    "tidepool_current_graph_pool": (_status, [ctypes.POINTER(ctypes.c_uint64)]),
    "tidepool_set_default_graph_pool": (_status, [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]),
    "tidepool_default_graph_pool": (_status, [ctypes.POINTER(ctypes.c_uint64)]),
    "tidepool_set_capture_graph_pool": (_status, [ctypes.c_int, c_stream, ctypes.c_uint64,
                                                  ctypes.POINTER(ctypes.c_uint64)]),
    "tidepool_forget_capture_graph_pool": (_status, [ctypes.c_uint64]),
    "tidepool_export_memory": (_status, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint8), _int_p, _size_p,
                                         ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, _size_p, _size_p,
                                         _size_p]),
    "tidepool_end_export": (_status, [ctypes.c_void_p]),
    "tidepool_device_uuid": (_status, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint8)]),
    "tidepool_open_cuda_ipc_memory": (_status, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint8),
                                                ctypes.POINTER(ctypes.c_void_p)]),
    "tidepool_close_cuda_ipc_memory": (_status, [ctypes.c_void_p]),
    "tidepool_import_memory": (_status, [ctypes.POINTER(ctypes.c_uint8), _int_p, _size_p, ctypes.c_size_t,
                                         ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                                         _int_p]),
    "tidepool_close_imported_memory": (_status, [ctypes.c_void_p]),
    "tidepool_imported_bytes": (_status, [_size_p]),
}

_lock = threading.RLock()
_lib = None
_path = None
_on_load = []  # callables run once, after the library is first loaded


def _candidates():
    """(where, what to dlopen) in search order, and what was ruled out without trying."""
    explicit = os.environ.get("TIDEPOOL_LIBRARY")
    if explicit:
        return [("TIDEPOOL_LIBRARY", explicit)], []
    skipped = ["TIDEPOOL_LIBRARY is not set"]
    candidates = []
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_FILE)
    if os.path.exists(beside):
        candidates.append(("next to the package", beside))
    else:
        skipped.append(f"{beside} does not exist")
    candidates.append(("the dynamic loader's search path", LIBRARY_FILE))
    found = ctypes.util.find_library("tidepool")
    if found and found != LIBRARY_FILE:
        candidates.append(("the ldconfig cache", found))
    return candidates, skipped


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


def load():
    """The loaded library (a ctypes.CDLL); loads it on first use. Raises LibraryNotFoundError."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        candidates, tried = _candidates()
        for where, target in candidates:
            try:
                lib = ctypes.CDLL(target)
            except OSError as error:
                tried.append(f"{target} ({where}): {error}")
                continue
            try:
                _declare(lib)
            except AttributeError as error:
                tried.append(f"{target} ({where}) is not tidepool's C API: {error}")
                continue
            _lib = lib
            _path = os.path.abspath(target) if os.sep in target else target
            break
        else:
            raise _errors.LibraryNotFoundError(
                "libtidepool.so was not found: " + "; ".join(tried) + ". Install the package with its library "
                "(pip install --no-build-isolation ./python), or build it with CMake "
                "(scripts/build.sh) and set TIDEPOOL_LIBRARY=<build>/src/libtidepool.so, or "
                "install it next to the package with `cmake --install <build>`.")
        for callback in _on_load:
            callback(_lib)
        return _lib


def path():
    """What the library was loaded from (a path, or the name the loader resolved)."""
    load()
    return _path


def on_load(callback):
    """Runs callback(lib) once the library is loaded (at once if it already is)."""
    with _lock:
        if _lib is None:
            _on_load.append(callback)
            return
    callback(_lib)


def last_error():
    """The calling thread's last error message from the library."""
    return load().tidepool_last_error().decode(errors="replace")


def check(status):
    """Raises the error of a failed status, with the library's message."""
    if status != _errors.SUCCESS:
        raise _errors.error_for(status, last_error())


def function_address(name):
    """The address of a C entry point, as the frameworks take it."""
    return ctypes.cast(getattr(load(), name), ctypes.c_void_p).value
