"""Reclaim hooks written in Python: tidepool calls them when an allocation would fail (and from
release_cached_memory) so that memory cached elsewhere in the process can be handed back.

Each hook is a ctypes thunk the library calls. A thunk must live while the library may call it:
tidepool_remove_reclaim_hook waits for calls in progress on other threads (ctypes drops the GIL
during the call, so they can finish), after which the thunk is dropped. A hook that removes itself
from inside its own call is still running on this thread's stack, so its thunk is kept until this
thread is out of every hook call."""

import ctypes
import threading
import warnings

from . import _library

_lock = threading.Lock()
_callbacks = {}  # id -> the ctypes callback, kept alive while registered


class _ThisThread(threading.local):
    def __init__(self):
        self.inside = []     # ids of the hooks this thread is calling now, innermost last
        self.graveyard = []  # thunks of hooks removed from inside their own call


_this_thread = _ThisThread()


def _bury_returned_thunks():
    """Drops the thunks of self-removed hooks once this thread is out of every hook call (a thunk
    freed while it runs would be returned into by C)."""
    if not _this_thread.inside:
        _this_thread.graveyard.clear()


def add_reclaim_hook(hook):
    """Registers hook(device, bytes_needed) -> bytes freed (bytes_needed is 2**64-1 when called
    from release_cached_memory). It runs on the thread that ran out of memory, holding the GIL,
    and must not allocate through tidepool. Returns an id for remove_reclaim_hook()."""
    if not callable(hook):
        raise TypeError(f"a reclaim hook must be callable, not {type(hook).__name__}")
    _bury_returned_thunks()
    own_id = [None]  # known once the library has registered it

    def call(device, bytes_needed, user_data):
        del user_data
        _this_thread.inside.append(own_id[0])
        try:
            freed = hook(device, bytes_needed)
            return max(0, int(freed or 0))
        except Exception as error:  # noqa: BLE001 - nothing may raise into C
            warnings.warn(f"tidepool: reclaim hook {hook!r} failed on device {device}: {error}")
            return 0
        finally:
            _this_thread.inside.pop()

    callback = _library.RECLAIM_FN(call)
    hook_id = ctypes.c_int(-1)
    with _lock:
        _library.check(_library.load().tidepool_add_reclaim_hook(callback, None, ctypes.byref(hook_id)))
        own_id[0] = hook_id.value
        _callbacks[hook_id.value] = callback
    return hook_id.value


def remove_reclaim_hook(hook_id):
    """Unregisters a hook; an unknown id raises TidepoolError. Returns once no other thread is
    running the hook; it may be called from inside the hook itself."""
    _library.check(_library.load().tidepool_remove_reclaim_hook(hook_id))
    with _lock:
        callback = _callbacks.pop(hook_id, None)
    if callback is not None and hook_id in _this_thread.inside:
        _this_thread.graveyard.append(callback)
    _bury_returned_thunks()
