"""cuDNN's benchmark mode kept off after tidepool.torch.use(), with a warning that says why.

With torch.backends.cudnn.benchmark on, PyTorch sizes the workspace of the convolution algorithms
it tries by asking the allocator for its largest cached block (CUDACachingAllocator::cacheInfo),
and its pluggable allocator interface refuses that call for every pluggable allocator: the first
convolution raises "CUDAPluggableAllocator does not yet support cacheInfo". The call is made in
C++, out of Python's reach, so tidepool cannot answer it. Training scripts turn the mode on as a
matter of course (timm's do), and a script that ran under PyTorch's allocator must not stop at its
first convolution under tidepool: use() turns the mode off if it is on and keeps it off when the
program sets it later (torch.backends.cudnn.benchmark = True, torch.backends.cudnn.flags(...)),
warning once. cuDNN then picks its algorithms by its heuristics, as under PyTorch's default
setting; results are those of any algorithm cuDNN picks (benchmark mode is not deterministic
either), only the choice by timing is lost.
"""

import functools
import warnings

WARNING = ("tidepool: torch.backends.cudnn.benchmark stays off under tidepool.torch.use(): "
           "PyTorch's cuDNN benchmark asks the allocator for its largest cached block "
           "(cacheInfo), which PyTorch's pluggable allocator interface refuses "
           "(\"CUDAPluggableAllocator does not yet support cacheInfo\" at the first convolution); "
           "cuDNN picks its algorithms by its heuristics instead, as by PyTorch's default")

_warned = [False]


def _warn_once():
    if not _warned[0]:
        _warned[0] = True
        warnings.warn(WARNING, RuntimeWarning, stacklevel=3)


def keep_benchmark_off(torch):
    """Turns cuDNN's benchmark mode off now and whenever the program sets it later. Every setter
    goes through torch._C._set_cudnn_benchmark: torch.backends.cudnn.flags() and set_flags() look
    it up at each call, and the `benchmark` attribute's ContextProp keeps it as its `setter`."""
    original = torch._C._set_cudnn_benchmark

    @functools.wraps(original)
    def set_cudnn_benchmark(on):
        if on:
            _warn_once()
        original(False)

    torch._C._set_cudnn_benchmark = set_cudnn_benchmark
    cudnn = getattr(torch.backends, "cudnn", None)
    prop = type(cudnn).__dict__.get("benchmark") if cudnn is not None else None
    if prop is not None and getattr(prop, "setter", None) is original:
        prop.setter = set_cudnn_benchmark
    if torch._C._get_cudnn_benchmark():
        set_cudnn_benchmark(True)
