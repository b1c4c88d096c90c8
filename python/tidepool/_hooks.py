"""Reclaim hooks written in Python: tidepool calls them when an allocation would fail (and from
release_cached_memory) so that memory cached elsewhere in the process can be handed back."""

import ctypes
import threading
import warnings

from . import _library

_lock = threading.Lock()
_callbacks = {}  # id -> the ctypes callback, kept alive while registered


def add_reclaim_hook(hook):
    """Registers hook(device, bytes_needed) -> bytes freed (bytes_needed is 2**64-1 when called
    from release_cached_memory). It runs on the thread that ran out of memory, holding the GIL,
    and must not allocate through tidepool. Returns an id for remove_reclaim_hook()."""
    if not callable(hook):
        raise TypeError(f"a reclaim hook must be callable, not {type(hook).__name__}")

    def call(device, bytes_needed, user_data):
        del user_data
        try:
            freed = hook(device, bytes_needed)
            return max(0, int(freed or 0))
        except Exception as error:  # noqa: BLE001 - nothing may raise into C
            warnings.warn(f"tidepool: reclaim hook {hook!r} failed on device {device}: {error}")
            return 0

    callback = _library.RECLAIM_FN(call)
    hook_id = ctypes.c_int(-1)
    _library.check(_library.load().tidepool_add_reclaim_hook(callback, None, ctypes.byref(hook_id)))
    with _lock:
        _callbacks[hook_id.value] = callback
    return hook_id.value


def remove_reclaim_hook(hook_id):
    """Unregisters a hook; an unknown id raises TidepoolError."""
    _library.check(_library.load().tidepool_remove_reclaim_hook(hook_id))
    with _lock:
        _callbacks.pop(hook_id, None)
