"""tidepool.set_pool_options(): the options pools are made with (byte cap, headroom, release
policy, growth slack, thread caches), over tidepool_set_default_pool_options; set before the first
allocation. tidepool.set_byte_cap() / byte_cap(): one device's cap, changed at any time
(tidepool_set_byte_cap), as torch.cuda.set_per_process_memory_fraction does for PyTorch."""

import ctypes

from . import _arguments, _errors, _library

_NO_LIMIT = 2**64 - 1

# tidepool_thread_caches (c_api.h): when a thread gets a cache of its own in front of a pool's lock.
_THREAD_CACHES = {"when_contended": 0, "always": 1, "never": 2}
_THREAD_CACHES_NAMES = {value: name for name, value in _THREAD_CACHES.items()}


def _thread_caches(function, value):
    """The C value of a thread_caches option: "when_contended", "always" or "never"."""
    choices = ", ".join(repr(name) for name in _THREAD_CACHES)
    if not isinstance(value, str):
        raise TypeError(f"tidepool.{function}: thread_caches must be one of {choices}, not "
                        f"{type(value).__name__} {value!r}")
    if value not in _THREAD_CACHES:
        raise _errors.InvalidArgumentError(
            _errors.INVALID_ARGUMENT,
            f"tidepool.{function}: thread_caches is {value!r}: expected one of {choices}")
    return _THREAD_CACHES[value]


def get_pool_options():
    """The options pools are made with now, as a dict (None: no limit)."""
    raw = _library.CPoolOptions(struct_size=ctypes.sizeof(_library.CPoolOptions))
    _library.check(_library.load().tidepool_get_default_pool_options(ctypes.byref(raw)))
    return {
        "byte_cap": None if raw.byte_cap == _NO_LIMIT else raw.byte_cap,
        "headroom": raw.headroom,
        "small_size_threshold": raw.small_size_threshold,
        "max_cached_bytes": None if raw.max_cached_bytes == _NO_LIMIT else raw.max_cached_bytes,
        "decay_ms": raw.decay_milliseconds,
        "address_range_bytes": raw.address_range_bytes,
        "immediate_release": bool(raw.immediate_release),
        "growth_slack": raw.growth_slack,
        "thread_caches": _THREAD_CACHES_NAMES.get(raw.thread_caches, raw.thread_caches),
        "alias_free_handles": bool(raw.alias_free_handles),
        "alias_slack": raw.alias_slack,
        "follow_graph_captures": bool(raw.follow_graph_captures),
        "compact_on_out_of_memory": bool(raw.compact_on_out_of_memory),
    }


def set_pool_options(**changes):
    """Sets the options pools are made with; call it before the first allocation (a pool keeps the
    options it was made with, so once one exists this raises InvalidArgumentError, a ValueError).
    Keys: byte_cap (bytes, None: no cap), headroom (bytes left free on the device),
    small_size_threshold, max_cached_bytes (None: no limit), decay_ms (free pages unused this long
    go back; 0: never), address_range_bytes, immediate_release (bool), growth_slack (how far held
    memory may pass peak in use before the pool moves free pages instead of making new ones; 1.0
    by default: a cap, smaller holds less only where a workload fragments past it and then pays
    driver calls in every step), thread_caches (when a thread allocating from a pool gets a small
    cache of its own in front of the pool's lock, at most 8 blocks and 64 MiB that its same-size
    frees and allocations reuse without the lock: "when_contended", the default, once threads keep
    finding the lock held, so a program with one allocating thread never has one; "always", from
    each thread's first call; "never"; while a thread has one, only the peaks count the blocks
    waiting in it as in use, and stats().thread_caches says how many threads have one),
    alias_free_handles (bool, experimental, off by default: past the alias budget, map idle pages a
    second time under a request before making new ones; holds training loops near their peak in
    use, stops by itself where it costs more than it saves; sleep() refuses while a live block lies
    on a page mapped twice),
    alias_slack (the alias budget: how far held memory may pass peak in use before that, 0.02 by
    default), follow_graph_captures (bool, on by default: what a CUDA graph capture allocates stays
    the graph's, even once freed, until the graph is destroyed; off saves one driver query per
    allocation on a stream other than the default one, docs/RESULTS.md section 11),
    compact_on_out_of_memory (bool, off by default: before an allocation fails, live tensors'
    bytes move off the pages they share with free memory when that would serve it, as compact()
    does, after a wait for the whole device; safe only where GPU work on this device is launched
    from one thread at a time, PyTorch's backward thread included). Byte counts
    are ints from 0 up: anything else raises TypeError or InvalidArgumentError (a ValueError)
    naming the option, and sets nothing."""
    options = _arguments.merged_options("pool", get_pool_options(), changes)
    fn = "set_pool_options"
    raw = _library.CPoolOptions(struct_size=ctypes.sizeof(_library.CPoolOptions))
    byte_cap = _arguments.byte_count(fn, "byte_cap", options["byte_cap"], allow_none=True)
    raw.byte_cap = _NO_LIMIT if byte_cap is None else byte_cap
    raw.headroom = _arguments.byte_count(fn, "headroom", options["headroom"])
    raw.small_size_threshold = _arguments.byte_count(fn, "small_size_threshold",
                                                     options["small_size_threshold"])
    max_cached = _arguments.byte_count(fn, "max_cached_bytes", options["max_cached_bytes"],
                                       allow_none=True)
    raw.max_cached_bytes = _NO_LIMIT if max_cached is None else max_cached
    raw.decay_milliseconds = _arguments.integer(fn, "decay_ms", options["decay_ms"],
                                                what="a number of milliseconds")
    raw.address_range_bytes = _arguments.byte_count(fn, "address_range_bytes",
                                                    options["address_range_bytes"])
    raw.immediate_release = _arguments.flag(fn, "immediate_release", options["immediate_release"])
    raw.growth_slack = _arguments.real(fn, "growth_slack", options["growth_slack"])
    raw.thread_caches = _thread_caches(fn, options["thread_caches"])
    raw.alias_free_handles = _arguments.flag(fn, "alias_free_handles", options["alias_free_handles"])
    raw.alias_slack = _arguments.real(fn, "alias_slack", options["alias_slack"])
    raw.follow_graph_captures = _arguments.flag(fn, "follow_graph_captures", options["follow_graph_captures"])
    raw.compact_on_out_of_memory = _arguments.flag(fn, "compact_on_out_of_memory",
                                                   options["compact_on_out_of_memory"])
    _library.check(_library.load().tidepool_set_default_pool_options(ctypes.byref(raw)))


def set_byte_cap(bytes, device=0):
    """Changes the most `device`'s pool maps, at any time (None lifts the cap): memory mapped
    beyond a lowered cap stays until it is freed and released; an allocation that would grow past
    it releases free cached memory first, then fails as out of memory. Handles made under a cap
    are a 256th of it at most, as on a device of that size. Before the device's pool exists, the
    pool is made with this cap. Tags' pools keep their own (set_pool_options' byte_cap).
    0 lets the pool grow no more."""
    fn = "set_byte_cap"
    device = _arguments.device(fn, device)
    cap = _arguments.byte_count(fn, "bytes", bytes, allow_none=True)
    _library.check(_library.load().tidepool_set_byte_cap(device, _NO_LIMIT if cap is None else cap))


def byte_cap(device=0):
    """The byte cap of `device`'s pool (or the one it will be made with); None: no cap."""
    device = _arguments.device("byte_cap", device)
    cap = ctypes.c_uint64()
    _library.check(_library.load().tidepool_byte_cap(device, ctypes.byref(cap)))
    return None if cap.value == _NO_LIMIT else cap.value
