"""release_cached_memory(): one call that hands back everything this process caches on the GPUs
it opened, and touches no other GPU.

The sources, in the order that lets each one's frees reach the next:
  1. Python's garbage collector, only where it can free device memory: not at all when no array
     or tensor is live on an opened GPU, and again only while a collection freed some (arrays in
     reference cycles); a full collection of a large program costs tens of milliseconds;
  2. CuPy's FFT plan caches (only where a plan is cached): their work areas go back to the pool
     they came from;
  3. CuPy's default device pool and pinned host pool (free_all_blocks);
  4. PyTorch's caching allocator (empty_cache), when torch is imported and not routed to tidepool;
  5. tidepool's pools, then the CUDA async pools and the C reclaim hooks.
Bytes come from each allocator's own counts (CuPy's total_bytes, PyTorch's memory_reserved,
tidepool's release counts), never from cudaMemGetInfo, which counts other processes too.
"""

import ctypes
import gc
import sys

from . import _allocate, _frameworks, _library

# At most this many collections: each one after the first runs only if the previous found garbage
# (finalizers of collected objects can free cycles of their own).
_MAX_COLLECTIONS = 4


class _Entry:
    __slots__ = ("source", "device", "bytes", "detail", "device_memory")

    def __init__(self, source, device, nbytes, detail="", device_memory=True):
        self.source = source
        self.device = device
        self.bytes = nbytes
        self.detail = detail
        self.device_memory = device_memory


def opened_devices(lib):
    """The devices this process holds a context on, by the driver (this opens none)."""
    count = ctypes.c_int(0)
    if lib.tidepool_device_count(ctypes.byref(count)) != 0:
        return []  # no driver (no CUDA here): no GPU was opened
    devices = []
    for device in range(count.value):
        has = ctypes.c_int(0)
        _library.check(lib.tidepool_has_context(device, ctypes.byref(has)))
        if has.value:
            devices.append(device)
    return devices


def _device_bytes_in_use(lib, devices):
    """Device memory live in tidepool's pools and the frameworks' caches on `devices`: what a
    garbage collection could free."""
    total = 0
    for device in devices:
        raw = _library.CStats(struct_size=ctypes.sizeof(_library.CStats))
        _library.check(lib.tidepool_stats(device, ctypes.byref(raw)))
        total += raw.in_use_bytes
    torch = _frameworks.torch_cache_active()
    if torch is not None:
        visible = torch.cuda.device_count()
        total += sum(torch.cuda.memory_allocated(d) for d in devices if d < visible)
    cupy = _frameworks.loaded("cupy")
    if cupy is not None and not _frameworks.routed["cupy"]:
        pool = _frameworks.cupy_pools(cupy)
        if pool is not None:
            for device in devices:
                with cupy.cuda.Device(device):
                    total += pool.used_bytes()
    return total


def _collect_garbage(lib, devices, entries):
    in_use = _device_bytes_in_use(lib, devices)
    if in_use == 0:
        # Nothing live on an opened GPU: a collection could free no device memory.
        entries.append(_Entry("python garbage collector", None, 0,
                              "not run: nothing live on an opened GPU", device_memory=False))
        return
    collected = rounds = 0
    while rounds < _MAX_COLLECTIONS:
        found = gc.collect()
        collected += found
        rounds += 1
        now = _device_bytes_in_use(lib, devices)
        freed_device_memory = now < in_use
        in_use = now
        # Again only if this one found garbage that held device memory: its finalizers may have
        # left more cycles, and a fruitless collection is pure cost.
        if not (found and freed_device_memory and in_use):
            break
    entries.append(_Entry("python garbage collector", None, 0,
                          f"{collected} unreachable objects in {rounds} collection(s)",
                          device_memory=False))


def _release_cupy(devices, entries):
    cupy = _frameworks.loaded("cupy")
    if cupy is None:
        return
    fft_config = sys.modules.get("cupy.fft.config") or sys.modules.get("cupy.fft._cache")
    for device in devices:
        with cupy.cuda.Device(device):
            if fft_config is not None and hasattr(fft_config, "get_plan_cache"):
                cache = fft_config.get_plan_cache()
                plans = cache.get_curr_size()
                if plans:
                    work_bytes = cache.get_curr_memsize()
                    cache.clear()
                    # The work areas' bytes are counted where their pool hands them back.
                    entries.append(_Entry("cupy fft plan cache", device, 0,
                                          f"{plans} plans dropped ({work_bytes} bytes of work "
                                          "areas back to their pool)", device_memory=False))
        entries.append(_Entry("cupy default memory pool", device,
                              _frameworks.empty_cupy_pool(device)))
    pinned_pool = getattr(cupy, "get_default_pinned_memory_pool", None)
    if pinned_pool is not None:
        pinned = pinned_pool()
        blocks = pinned.n_free_blocks()
        total = getattr(pinned, "total_bytes", None)
        before = total() if total else None
        pinned.free_all_blocks()
        detail = f"{blocks} free blocks"
        nbytes = 0
        if before is not None:
            nbytes = before - total()
            detail += f", {nbytes} bytes"
        entries.append(_Entry("cupy pinned memory pool (host)", None, nbytes, detail,
                              device_memory=False))


def _release_torch(devices, entries):
    for device, freed in sorted(_frameworks.empty_torch_cache(devices).items()):
        entries.append(_Entry("pytorch caching allocator", device, freed))


def _release_tidepool(lib, devices, entries):
    for device in devices:
        entries.append(_Entry("tidepool pool", device, _allocate.release(device)))
    # Now the pools are empty: what this returns is the CUDA async pools and the C hooks.
    released = ctypes.c_size_t(0)
    _library.check(lib.tidepool_release_cached_memory(ctypes.byref(released)))
    entries.append(_Entry("cuda async pools and reclaim hooks", None, released.value))


def release_entries(collect_garbage=True):
    """Runs every source; returns what each visited source handed back (zeros included)."""
    lib = _library.load()
    entries = []
    devices = opened_devices(lib)
    if collect_garbage:
        _collect_garbage(lib, devices, entries)
    _release_cupy(devices, entries)
    _release_torch(devices, entries)
    _release_tidepool(lib, devices, entries)
    return entries


def format_bytes(nbytes):
    """1536 -> '1.5 KiB'."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{nbytes} B"


def release_cached_memory(verbose=False, collect_garbage=True):
    """Hands back every cached byte of device memory this process holds, on every GPU it opened
    and no other; returns the bytes handed back, by the allocators' own counts. verbose=True
    prints what each source gave (host-side sources are printed but not counted)."""
    entries = release_entries(collect_garbage=collect_garbage)
    total = sum(entry.bytes for entry in entries if entry.device_memory)
    if verbose:
        for entry in entries:
            where = f"device {entry.device}" if entry.device is not None else "process"
            amount = format_bytes(entry.bytes) if entry.device_memory else "-"
            detail = f"  ({entry.detail})" if entry.detail else ""
            print(f"tidepool: {entry.source:<38} {where:<9} {amount:>10}{detail}")
        print(f"tidepool: released {format_bytes(total)} of device memory in total")
    return total
