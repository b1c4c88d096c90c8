"""The MemPool route to a tag (`with torch.cuda.use_mem_pool(tidepool.torch.mem_pool(tag)):`,
written for programs that keep PyTorch's allocator) run unchanged after tidepool.torch.use(),
where PyTorch makes no MemPool: a 64 MiB cache made inside comes from the tag's memory, sleeps
(NVML sees the bytes go) and wakes with its contents. Prints the checks as JSON."""

import torch

import tidepool
from common import MiB, emit, torch_memory

tidepool.torch.use()
with torch.cuda.use_mem_pool(tidepool.torch.mem_pool("kv-cache")):
    cache = torch.full((64 * MiB // 4,), 3.0, device="cuda")
outside = torch.ones(MiB, device="cuda")
tagged = tidepool.tag_stats("kv-cache")
torch.cuda.synchronize()
before = torch_memory().bytes()
slept = tidepool.sleep("kv-cache")
asleep = torch_memory().bytes()
tidepool.wake("kv-cache")
emit({"tag_in_use": tagged.in_use_bytes, "untagged_in_use": tidepool.stats().in_use_bytes,
      "slept": slept, "nvml_drop": before - asleep,
      "contents_back": bool((cache == 3.0).all().item()),
      "outside_intact": int(outside.sum().item())})
