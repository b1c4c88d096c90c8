"""torch.cuda's memory statistics answered from tidepool's pools, after tidepool.torch.use().

PyTorch's pluggable allocator interface refuses its statistics calls ("CUDAPluggableAllocator does
not yet support getDeviceStats", and resetPeakStats), so under any pluggable allocator
torch.cuda.memory_allocated(), max_memory_allocated(), memory_reserved(), memory_stats() and
reset_peak_memory_stats() raise, and a program that logs or plans its memory with them (training
loops, a server sizing its cache after a profiling run) stops there. use() replaces the two calls
the others go through: torch.cuda.memory.memory_stats_as_nested_dict (memory_stats and every
*_memory_* reader call it) answers from the device's tidepool pool, and reset_peak_memory_stats
resets that pool's reported peaks (tidepool.reset_peak_stats); reset_accumulated_memory_stats
restarts the allocated and freed counts PyTorch reports from now. torch.cuda.memory_summary()
gives tidepool.summary().

The figures, in PyTorch's names, under "all" (tidepool keeps no small and large pools apart):
allocated_bytes (blocks in use, current and peak), requested_bytes (bytes asked for),
reserved_bytes (memory mapped, current and peak), allocation (live blocks; allocated and freed
counts). What tidepool does not count is absent rather than made up. Memory in tags' pools
(tidepool.region) is not in them: tidepool.tag_stats has it.
"""

from . import _stats, _torch_replace

# Per device, the pool's allocation and free counts when reset_accumulated_memory_stats last ran:
# tidepool's counts are its whole life, PyTorch's restart at that call.
_accumulated_since = {}


def answer_memory_statistics(torch):
    """Installs the replacements in torch.cuda and torch.cuda.memory."""

    def memory_stats_as_nested_dict(device=None):
        if not torch.cuda.is_initialized():
            return {}  # as PyTorch: nothing allocated yet, no device opened
        index = device_index(torch, device)
        return nested_stats(_stats.stats(index), _accumulated_since.get(index, (0, 0)))

    def reset_peak_memory_stats(device=None):
        _stats.reset_peak_stats(device_index(torch, device))

    def reset_accumulated_memory_stats(device=None):
        index = device_index(torch, device)
        stats = _stats.stats(index)
        _accumulated_since[index] = (stats.allocations, stats.deallocations)

    def memory_summary(device=None, abbreviated=False):
        return _stats.summary()

    for replacement in (memory_stats_as_nested_dict, reset_peak_memory_stats,
                        reset_accumulated_memory_stats, memory_summary):
        _torch_replace.replace_memory_call(torch, replacement.__name__,
                                           lambda original, replacement=replacement: replacement)


def nested_stats(stats, accumulated_since=(0, 0)):
    """tidepool.Stats as torch.cuda.memory_stats_as_nested_dict's dict; the allocated and freed
    counts from `accumulated_since` (the counts at the last reset_accumulated_memory_stats)."""
    return {
        "allocated_bytes": {"all": {"current": stats.in_use_bytes,
                                    "peak": stats.peak_in_use_bytes}},
        "requested_bytes": {"all": {"current": stats.requested_bytes,
                                    "peak": stats.peak_requested_bytes}},
        "reserved_bytes": {"all": {"current": stats.mapped_bytes, "peak": stats.peak_mapped_bytes}},
        "allocation": {"all": {"current": stats.live_allocations,
                               "allocated": stats.allocations - accumulated_since[0],
                               "freed": stats.deallocations - accumulated_since[1]}},
    }


def device_index(torch, device):
    """PyTorch's device argument (None: the current device; an int; "cuda:1"; a torch.device) as
    an ordinal."""
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    return device.index if device.index is not None else torch.cuda.current_device()
