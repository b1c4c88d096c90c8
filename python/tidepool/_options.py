"""tidepool.set_pool_options(): the options of the pools made from now on (byte cap, headroom,
release policy), over tidepool_set_default_pool_options."""

import ctypes

from . import _library

_NO_LIMIT = 2**64 - 1


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
    }


def set_pool_options(**changes):
    """Changes the options of pools made from now on (call before the first allocation; pools
    that exist keep theirs). Keys: byte_cap (bytes, None: no cap), headroom (bytes left free on
    the device), small_size_threshold, max_cached_bytes (None: no limit), decay_ms (free pages
    unused this long go back; 0: never), address_range_bytes, immediate_release (bool),
    growth_slack (how far held memory may pass peak in use before the pool moves free pages
    instead of making new ones; 0.01 by default, larger trades memory for fewer driver calls)."""
    options = get_pool_options()
    unknown = set(changes) - set(options)
    if unknown:
        raise TypeError(f"unknown pool options: {', '.join(sorted(unknown))}; "
                        f"known: {', '.join(sorted(options))}")
    options.update(changes)
    raw = _library.CPoolOptions(struct_size=ctypes.sizeof(_library.CPoolOptions))
    raw.byte_cap = _NO_LIMIT if options["byte_cap"] is None else int(options["byte_cap"])
    raw.headroom = int(options["headroom"])
    raw.small_size_threshold = int(options["small_size_threshold"])
    raw.max_cached_bytes = (_NO_LIMIT if options["max_cached_bytes"] is None
                            else int(options["max_cached_bytes"]))
    raw.decay_milliseconds = int(options["decay_ms"])
    raw.address_range_bytes = int(options["address_range_bytes"])
    raw.immediate_release = 1 if options["immediate_release"] else 0
    raw.growth_slack = float(options["growth_slack"])
    _library.check(_library.load().tidepool_set_default_pool_options(ctypes.byref(raw)))
