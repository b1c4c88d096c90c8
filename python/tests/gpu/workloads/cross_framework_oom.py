"""Out of memory across frameworks: PyTorch on its own allocator holds a large freed cache; CuPy
on tidepool asks for more than the GPU has free. tidepool's reclaim chain (its framework-cache
hook) empties PyTorch's cache, and the CuPy allocation succeeds."""

import cupy
import torch

import tidepool
from common import GiB, emit

tidepool.cupy.use()
torch.ones(1, device="cuda").sum().item()
cupy.ones(1).sum().item()

free, _ = torch.cuda.mem_get_info()
cache = free - 4 * GiB
block = torch.empty(cache, dtype=torch.uint8, device="cuda")
del block  # freed into PyTorch's cache: still held by the process
torch.cuda.synchronize()
cached = torch.cuda.memory_reserved(0)
free_now, _ = torch.cuda.mem_get_info()
need = free_now + 16 * GiB  # more than is free, less than PyTorch's cache

array = cupy.empty(need, dtype=cupy.uint8)
array[-1] = 1
cupy.cuda.Device().synchronize()
emit({"torch_cached_before": cached, "free_before": free_now, "cupy_bytes": need,
      "torch_reserved_after": torch.cuda.memory_reserved(0),
      "recoveries": tidepool.stats(0).out_of_memory_recoveries})
