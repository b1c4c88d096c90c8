"""torch.cuda.set_per_process_memory_fraction and get_per_process_memory_fraction answered by
tidepool, after tidepool.torch.use().

PyTorch's pluggable allocator interface drops the fraction (set_per_process_memory_fraction returns
and nothing is capped) and refuses get_per_process_memory_fraction ("CUDAPluggableAllocator does not
yet support getMemoryFraction"). A program sharing a GPU this way (several workers or test processes
on one GPU) would then take the whole GPU. use() wraps both: PyTorch's own call first (its checks: a
float from 0 to 1), then the device's tidepool pool gets a byte cap of `fraction` times the GPU's
total memory (tidepool.set_byte_cap), which its growth keeps to as PyTorch's allocator keeps to the
fraction: what is held beyond a lowered cap stays until freed and released, an allocation that would
pass it releases the free cache first, then raises PyTorch's "CUDA out of memory." error. Memory in
tags' pools (tidepool.region) is outside the cap, as it is outside torch.cuda.memory_reserved().
"""

from . import _options, _torch_replace, _torch_stats

# The fraction last set on each device, to answer exactly while the cap is the one it made.
_fractions = {}


def follow_memory_fraction(torch):
    """Installs the replacements in torch.cuda and torch.cuda.memory."""

    def setting_the_cap(original_set):
        def set_per_process_memory_fraction(fraction, device=None):
            original_set(fraction, device)  # PyTorch's checks, and its call (dropped)
            set_cap(fraction, device)

        return set_per_process_memory_fraction

    def set_cap(fraction, device):
        index = _torch_stats.device_index(torch, device)
        total = torch.cuda.get_device_properties(index).total_memory
        cap = None if fraction >= 1.0 else int(fraction * total)
        _options.set_byte_cap(cap, index)
        _fractions[index] = (fraction, cap)

    def get_per_process_memory_fraction(device=None):
        """The fraction of the GPU's memory the device's tidepool pool may hold (its byte cap over
        the GPU's total memory; 1.0 where it has no cap)."""
        index = _torch_stats.device_index(torch, device)
        cap = _options.byte_cap(index)
        if index in _fractions and _fractions[index][1] == cap:
            return _fractions[index][0]
        if cap is None:
            return 1.0
        return min(1.0, cap / torch.cuda.get_device_properties(index).total_memory)

    _torch_replace.replace_memory_call(torch, "set_per_process_memory_fraction", setting_the_cap)
    _torch_replace.replace_memory_call(torch, "get_per_process_memory_fraction",
                                       lambda original: get_per_process_memory_fraction)
