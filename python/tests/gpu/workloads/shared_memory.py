"""Memory freed by one framework serves the other: with PyTorch and CuPy both routed to tidepool,
allocate and free 1 GiB in PyTorch, then allocate 1 GiB in CuPy: the process's device memory
(NVML) does not grow."""

import cupy
import torch

import tidepool
from common import GiB, emit, torch_memory

tidepool.torch.use()
tidepool.cupy.use()
torch.ones(1, device="cuda").sum().item()
cupy.ones(1).sum().item()
memory = torch_memory()

tensor = torch.empty(GiB, dtype=torch.uint8, device="cuda")
tensor.fill_(7)
torch.cuda.synchronize()
del tensor  # back to tidepool's cache, on the default stream both frameworks use here
after_torch = memory.bytes()
mapped_after_torch = tidepool.stats(0).mapped_bytes

array = cupy.empty(GiB, dtype=cupy.uint8)
array.fill(3)
cupy.cuda.Device().synchronize()
after_cupy = memory.bytes()
emit({"after_torch": after_torch, "after_cupy": after_cupy,
      "mapped_after_torch": mapped_after_torch, "mapped_after_cupy": tidepool.stats(0).mapped_bytes,
      "GiB": GiB})
