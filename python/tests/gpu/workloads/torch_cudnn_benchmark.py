"""A convolution net trained with torch.backends.cudnn.benchmark = True, set the way training
scripts set it (timm's do), under tidepool.torch.use() or PyTorch's allocator. PyTorch's cuDNN
benchmark asks the allocator's cacheInfo, which its pluggable interface refuses; use() keeps the
mode off with one warning, so the net trains as under PyTorch's allocator with the mode off (the
reference run here: the same algorithms, cuDNN's deterministic ones in both). Eight SGD steps over
three batch sizes, bf16 autocast on every other step. `mode`: "default" (PyTorch's allocator,
benchmark off), "tidepool" (use(), then benchmark on), "unguarded" (tidepool's allocator through
PyTorch's own CUDAPluggableAllocator, no use(), benchmark on: what a program meets without use()).
Prints the losses (exact, as hex), the flag as read after setting it, the warnings and the error,
if any, as JSON."""

import sys
import warnings

import torch

import tidepool
from common import emit

mode = sys.argv[1] if len(sys.argv) > 1 else "tidepool"
result = {"mode": mode}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if mode == "tidepool":
        tidepool.torch.use()
    elif mode == "unguarded":
        torch.cuda.memory.change_current_allocator(torch.cuda.memory.CUDAPluggableAllocator(
            tidepool._library.path(), "tidepool_torch_alloc", "tidepool_torch_free"))
    torch.backends.cudnn.benchmark = mode != "default"
    torch.backends.cudnn.deterministic = True
    result["benchmark_read_back"] = torch.backends.cudnn.benchmark
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 7, stride=2, padding=3), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.BatchNorm2d(128), torch.nn.ReLU(),
        torch.nn.Conv2d(128, 128, 3, stride=2, padding=1), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(128, 10)).cuda()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    data = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    try:
        for step, batch in enumerate([8, 16, 8, 32, 16, 8, 32, 16]):
            x = torch.randn(batch, 3, 96, 96, device="cuda", generator=data)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=step % 2 == 1):
                loss = net(x).float().square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item().hex())
        result["error"] = None
    except RuntimeError as error:
        result["error"] = str(error).splitlines()[0]
result["losses"] = losses
result["warnings"] = [str(w.message) for w in caught if "cudnn" in str(w.message)]
emit(result)
