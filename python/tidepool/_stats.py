"""tidepool.stats(device), tidepool.reset_peak_stats(device), tidepool.memory_summary(device),
tidepool.summary() and tidepool.available_bytes(device)."""

import ctypes
import dataclasses

from . import _arguments, _frameworks, _library
from ._release import format_bytes, opened_devices


@dataclasses.dataclass(frozen=True)
class Stats:
    """The figures of one device's pool (all zero where no pool was made). thread_caches: threads
    with a cache of their own in front of the pool's lock (set_pool_options(thread_caches=...));
    the other figures count what those caches handed out, so they stay exact. graph_kept_bytes:
    free memory kept for CUDA graphs still alive (captured through tidepool), which only their
    capture reuses and release_cached_memory() leaves; graphs: how many such graphs (once per
    stream each allocated on). waits, wait_microseconds: how often and how long the pool waited for
    the GPU (an event, a stream or the whole device: the out-of-memory path, a handle split for a
    block from its stream's fresh frees, growth past its budget while the GPU runs behind,
    release, sleep); the queued work drains meanwhile."""

    device: int
    in_use_bytes: int
    requested_bytes: int
    cached_bytes: int
    mapped_bytes: int
    reserved_address_bytes: int
    peak_in_use_bytes: int
    peak_requested_bytes: int
    peak_mapped_bytes: int
    live_allocations: int
    allocations: int
    deallocations: int
    out_of_memory_recoveries: int
    released_bytes: int
    driver_calls: int
    driver_microseconds: float
    asleep_bytes: int = 0
    thread_caches: int = 0
    graph_kept_bytes: int = 0
    graphs: int = 0
    waits: int = 0
    wait_microseconds: float = 0.0


def stats(device=0):
    """The figures of `device`'s pool."""
    lib = _library.load()
    raw = _library.CStats()
    raw.struct_size = ctypes.sizeof(_library.CStats)
    _library.check(lib.tidepool_stats(device, ctypes.byref(raw)))
    values = {name: getattr(raw, name) for name, _ in _library.CStats._fields_ if name != "struct_size"}
    return Stats(device=device, **values)


def reset_peak_stats(device=0):
    """Brings the peaks stats(device) reports (peak_in_use_bytes, peak_requested_bytes,
    peak_mapped_bytes) down to the current figures, as torch.cuda.reset_peak_memory_stats does;
    what the pool does (its growth budget) is not touched. A no-op where no pool exists yet."""
    device = _arguments.device("reset_peak_stats", device)
    _library.check(_library.load().tidepool_reset_peak_stats(device))


@dataclasses.dataclass(frozen=True)
class MemorySummary:
    """What one device's pool holds now (tidepool_describe's summary)."""

    device: int
    held_bytes: int
    in_use_bytes: int
    cached_bytes: int
    largest_free_block: int
    releasable_bytes: int
    blocks: int
    handles: int


def memory_summary(device=0):
    """Held, in use and cached bytes of `device`'s pool, its largest free (cached) block and what
    release() could hand back now."""
    lib = _library.load()
    raw = _library.CMemorySummary()
    raw.struct_size = ctypes.sizeof(_library.CMemorySummary)
    _library.check(lib.tidepool_describe(device, ctypes.byref(raw), _library.BLOCK_FN(),
                                         _library.HANDLE_FN(), None))
    values = {name: getattr(raw, name) for name, _ in _library.CMemorySummary._fields_ if name != "struct_size"}
    return MemorySummary(device=device, **values)


def available_bytes(device=0):
    """The largest allocation that could succeed on `device` now: tidepool's cache plus what the
    driver reports free, within the pool's byte cap and headroom. Opens no context."""
    lib = _library.load()
    nbytes = ctypes.c_size_t(0)
    _library.check(lib.tidepool_available_bytes(device, ctypes.byref(nbytes)))
    return nbytes.value


def _framework_lines(devices):
    lines = []
    torch = _frameworks.loaded("torch")
    if torch is not None:
        if _frameworks.routed["torch"]:
            lines.append("PyTorch: allocations routed to tidepool")
        elif _frameworks.torch_cache_active() is not None:
            reserved = ", ".join(f"device {d}: {format_bytes(torch.cuda.memory_reserved(d))}"
                                 for d in devices if d < torch.cuda.device_count())
            lines.append(f"PyTorch: own caching allocator, reserved {reserved or 'nothing'}")
        else:
            lines.append("PyTorch: own caching allocator, CUDA not initialised")
    cupy = _frameworks.loaded("cupy")
    if cupy is not None:
        if _frameworks.routed["cupy"]:
            lines.append("CuPy: allocations routed to tidepool")
        else:
            pool = _frameworks.cupy_pools(cupy)
            held = []
            for d in devices:
                with cupy.cuda.Device(d):
                    held.append(f"device {d}: {format_bytes(pool.total_bytes())}")
            lines.append(f"CuPy: default memory pool, holding {', '.join(held) or 'nothing'}")
    return lines


def summary():
    """A readable table of every device's pool, and where the frameworks allocate."""
    lib = _library.load()
    version = lib.tidepool_version().decode()
    count = ctypes.c_int(0)
    _library.check(lib.tidepool_device_count(ctypes.byref(count)))
    devices = opened_devices(lib)
    # held = in use + cached; "largest free" is the largest cached block (what a request can get
    # without the driver), "releasable" what release() could hand back now.
    columns = ("device", "held", "in use", "cached", "largest free", "releasable", "peak held", "live",
               "allocs", "released", "OOM saves", "available")
    rows = []
    for device in range(count.value):
        s = stats(device)
        if s.allocations == 0 and device not in devices:
            continue  # never used by this process
        m = memory_summary(device)
        rows.append((str(device), format_bytes(m.held_bytes), format_bytes(m.in_use_bytes),
                     format_bytes(m.cached_bytes), format_bytes(m.largest_free_block),
                     format_bytes(m.releasable_bytes), format_bytes(s.peak_mapped_bytes),
                     str(s.live_allocations), str(s.allocations), format_bytes(s.released_bytes),
                     str(s.out_of_memory_recoveries), format_bytes(available_bytes(device))))
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
              for i, c in enumerate(columns)]
    lines = [f"tidepool {version}: {count.value} device(s), {len(devices)} opened by this process"]
    lines.append("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for row in rows:
        lines.append("  ".join(v.rjust(w) for v, w in zip(row, widths)))
    if not rows:
        lines.append("(no device used yet)")
    lines.extend(_framework_lines(devices))
    return "\n".join(lines)
