"""tidepool.set_sharing_options(): sharing a GPU with the user's other tidepool processes (issue
14). Before an allocation fails, tidepool asks the other processes on that GPU to hand back cached
memory, and a helper thread in this process serves their requests (its pools' free pages, then
PyTorch's and CuPy's caches; never live data). Over tidepool_set_sharing_options.

At exit the helper threads are stopped while the interpreter still runs, since a request served
after it has finalized could not run the framework-cache hook."""

import atexit
import ctypes

from . import _arguments, _library


def get_sharing_options():
    """The sharing options in force: {'enabled': bool, 'gives': bool, 'wait_ms': int}."""
    raw = _library.CSharingOptions(struct_size=ctypes.sizeof(_library.CSharingOptions))
    _library.check(_library.load().tidepool_get_sharing_options(ctypes.byref(raw)))
    return {"enabled": bool(raw.enabled), "gives": bool(raw.gives), "wait_ms": raw.wait_milliseconds}


def set_sharing_options(**changes):
    """Sets the sharing options, at any time. Keys: enabled (False: never ask, never serve; leave
    every GPU's ledger), gives (False: never hand memory to other processes, still ask them),
    wait_ms (how long one out-of-memory path waits for the others' answers, in all; 0 to 60000).
    Environment defaults: TIDEPOOL_SHARING, TIDEPOOL_SHARING_GIVES, TIDEPOOL_SHARING_WAIT_MS."""
    options = _arguments.merged_options("sharing", get_sharing_options(), changes)
    fn = "set_sharing_options"
    enabled = _arguments.flag(fn, "enabled", options["enabled"])
    gives = _arguments.flag(fn, "gives", options["gives"])
    raw = _library.CSharingOptions(struct_size=ctypes.sizeof(_library.CSharingOptions))
    raw.enabled = enabled
    raw.gives = gives
    raw.wait_milliseconds = _arguments.integer(fn, "wait_ms", options["wait_ms"],
                                               what="a number of milliseconds")
    _library.check(_library.load().tidepool_set_sharing_options(ctypes.byref(raw)))


def _stop_at_exit(lib):
    atexit.register(lib.tidepool_stop_sharing)


_library.on_load(_stop_at_exit)
