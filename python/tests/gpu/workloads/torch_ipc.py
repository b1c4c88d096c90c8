"""A CUDA tensor reduced for another process as torch.multiprocessing does
(torch.multiprocessing.reductions.reduce_tensor, which pickling a tensor for a queue or a spawned
process calls), under PyTorch's allocator or tidepool.torch.use(). `mode`: "default" or
"tidepool". Prints what happened as JSON."""

import sys

import torch
from torch.multiprocessing import reductions

mode = sys.argv[1] if len(sys.argv) > 1 else "tidepool"
if mode == "tidepool":
    import tidepool

    tidepool.torch.use()
from common import emit  # noqa: E402

tensor = torch.ones(1 << 20, device="cuda")
try:
    reductions.reduce_tensor(tensor)
    result = {"mode": mode, "shared": True}
except RuntimeError as error:
    result = {"mode": mode, "shared": False, "error": type(error).__name__,
              "message": str(error)}
result["tensor_intact"] = int(tensor.sum().item()) == 1 << 20
emit(result)
