"""The calling thread's lifetime hint: what PyTorch and CuPy allocate through tidepool carries it,
since neither framework can pass one (tidepool_set_thread_lifetime).

    with tidepool.persistent():
        optimizer.step()   # the first step makes the optimizer's state: it lives to the end

Memory marked persistent is placed apart from scratch, so a block that lives long never sits in
the handle of freed scratch and pins it: release() (torch.cuda.empty_cache()) can then hand back
the scratch whole. Only the calling thread is affected; PyTorch runs backward passes on threads
of its own, which keep theirs."""

import contextlib
import ctypes
import threading

from . import _library

SCRATCH = 0  # tidepool_lifetime's values
PERSISTENT = 1

_thread = threading.local()  # the hint as this module set it, read by tidepool.allocate()


def _get():
    hint = ctypes.c_int(SCRATCH)
    _library.check(_library.load().tidepool_get_thread_lifetime(ctypes.byref(hint)))
    return hint.value


def allocating_persistent():
    """Whether the calling thread's allocations are marked persistent now (tidepool.persistent())."""
    return _get() == PERSISTENT


def thread_hint():
    """The hint tidepool.allocate() uses when given none: PERSISTENT inside tidepool.persistent()."""
    return getattr(_thread, "hint", SCRATCH)


def _set(hint):
    _library.check(_library.load().tidepool_set_thread_lifetime(hint))
    _thread.hint = hint


@contextlib.contextmanager
def persistent():
    """Marks what the calling thread allocates through tidepool (tidepool.allocate(), PyTorch and
    CuPy after use()) as persistent until the block ends; nested blocks are fine, and the hint
    before it comes back on the way out, an exception included."""
    before = _get()
    _set(PERSISTENT)
    try:
        yield
    finally:
        _set(before)
