"""Tags, sleep and wake (issue 13): name the memory that goes to sleep together, hand it back to
the driver while another engine uses the GPU, and take it again at the same addresses.

    with tidepool.region("weights"):     # allocations made here carry the tag
        model = build_model().cuda()     # (with tidepool.torch.use(), or tidepool.allocate)
    freed = tidepool.sleep("weights")    # bytes handed back; addresses stay reserved
    ...                                  # the other engine runs
    tidepool.wake("weights")             # same addresses, same bytes: CUDA graphs stay valid

Each tag has pools of its own (its own address ranges and cache), so one tag's freed memory is
never reused by another. The tag is the calling thread's: allocations on other threads (or in
asyncio tasks that interleave on this thread) carry their own, PyTorch's autograd threads (the
backward pass) included, unless region(tag, all_threads=True) makes it every untagged thread's.
While asleep, allocating in the tag
raises AsleepError, freeing works, and the GPU must not touch the memory: on a GPU that is an
illegal address fault, which ends the CUDA context.
"""

import contextlib
import ctypes

from . import _library
from ._stats import Stats

_KEEP = {"contents": 0, "nothing": 1}


def _name(tag):
    if not isinstance(tag, str):
        raise TypeError(f"a tag is a str, not {type(tag).__name__}")
    return tag.encode()


@contextlib.contextmanager
def region(tag, all_threads=False):
    """Allocations this thread makes inside come from tag `tag`'s memory (tags nest). With
    all_threads=True, so do those of every thread with no tag of its own, such as PyTorch's
    autograd threads, which run the backward pass (gradients): use it around training steps whose
    gradients should sleep with the weights."""
    lib = _library.load()
    if all_threads:
        previous = _current_default(lib)
        _library.check(lib.tidepool_set_default_tag(_name(tag)))
    _library.check(lib.tidepool_push_tag(_name(tag)))
    try:
        yield tag
    finally:
        _library.check(lib.tidepool_pop_tag())
        if all_threads:
            _library.check(lib.tidepool_set_default_tag(previous))


def _current_default(lib):
    """The default tag now (bytes, b"" for none)."""
    length = ctypes.c_size_t(0)
    buffer = ctypes.create_string_buffer(80)
    _library.check(lib.tidepool_default_tag(buffer, len(buffer), ctypes.byref(length)))
    return buffer.value


def current_tag():
    """The calling thread's current tag, or None."""
    lib = _library.load()
    length = ctypes.c_size_t(0)
    buffer = ctypes.create_string_buffer(80)
    _library.check(lib.tidepool_current_tag(buffer, len(buffer), ctypes.byref(length)))
    return buffer.value.decode() if length.value else None


def sleep(tag, keep="contents"):
    """Puts tag `tag` to sleep on every device where it has memory and returns the bytes handed
    back to the driver (exact). Waits for the work queued on the streams the tag's memory was used
    on first. keep="contents" copies live memory to pinned host memory, restored by wake();
    keep="nothing" drops it (weights reloaded from elsewhere, a KV cache to refill). Memory shared
    with another process that still maps it (tidepool.share_memory, tensors sent through
    torch.multiprocessing) stays awake, with what shares its physical memory: it is that
    process's too."""
    if keep not in _KEEP:
        raise ValueError(f"keep is 'contents' or 'nothing', not {keep!r}")
    lib = _library.load()
    nbytes = ctypes.c_size_t(0)
    _library.check(lib.tidepool_sleep(_name(tag), _KEEP[keep], ctypes.byref(nbytes)))
    return nbytes.value


def wake(tag):
    """Maps memory again under tag `tag`'s addresses and restores what sleep kept. Raises
    OutOfMemoryError when the device has no room after every cache was asked (the tag then stays
    asleep with its contents, and wake may be tried again)."""
    lib = _library.load()
    _library.check(lib.tidepool_wake(_name(tag)))


def is_asleep(tag):
    """Whether tag `tag` is asleep."""
    lib = _library.load()
    asleep = ctypes.c_int(0)
    _library.check(lib.tidepool_tag_asleep(_name(tag), ctypes.byref(asleep)))
    return bool(asleep.value)


def tag_id(tag):
    """The tag's index (made if new): the slot of its PyTorch entry point."""
    lib = _library.load()
    index = ctypes.c_int(-1)
    _library.check(lib.tidepool_tag_id(_name(tag), ctypes.byref(index)))
    return index.value


def tags():
    """The names of the tags this process has named, in order of first use (the order of
    tag_id())."""
    lib = _library.load()
    count = ctypes.c_int(0)
    _library.check(lib.tidepool_tag_count(ctypes.byref(count)))
    names = []
    length = ctypes.c_size_t(0)
    buffer = ctypes.create_string_buffer(80)  # a tag is at most 64 characters
    for index in range(count.value):
        _library.check(lib.tidepool_tag_name(index, buffer, len(buffer), ctypes.byref(length)))
        names.append(buffer.value.decode())
    return names


def tag_stats(tag, device=0):
    """The figures of tag `tag`'s pool on `device` (all zero where it has none); asleep_bytes is
    what wake() will map again."""
    lib = _library.load()
    raw = _library.CStats()
    raw.struct_size = ctypes.sizeof(_library.CStats)
    _library.check(lib.tidepool_tag_stats(_name(tag), device, ctypes.byref(raw)))
    values = {name: getattr(raw, name) for name, _ in _library.CStats._fields_ if name != "struct_size"}
    return Stats(device=device, **values)
