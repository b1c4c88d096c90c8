"""torch.cuda.empty_cache() under tidepool.torch.use(): hands back what tidepool caches, as
PyTorch's own allocator does with its cache, and leaves live tensors alone; called inside a CUDA
graph capture it releases nothing and the capture stays valid. Prints the figures as JSON."""

import torch

import tidepool
from common import GiB, MiB, emit

tidepool.torch.use()
kept = torch.ones(256 * MiB, dtype=torch.uint8, device="cuda")
dropped = torch.empty(GiB, dtype=torch.uint8, device="cuda")
dropped.fill_(1)
torch.cuda.synchronize()
del dropped
before = tidepool.stats()
torch.cuda.empty_cache()
after = tidepool.stats()
result = {"cached_before": before.cached_bytes, "released": before.mapped_bytes - after.mapped_bytes,
          "in_use_before": before.in_use_bytes, "in_use_after": after.in_use_bytes,
          "kept_intact": bool((kept == 1).all().item())}

# Inside a capture (the current stream captured): nothing is released, the capture stays valid.
static = torch.ones(1 << 20, device="cuda")
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    doubled = static * 2
    torch.cuda.empty_cache()
    out = doubled + 1
static.fill_(2)
graph.replay()
torch.cuda.synchronize()
result["replay_after_empty_cache_in_capture_right"] = bool((out == 5).all().item())
emit(result)
