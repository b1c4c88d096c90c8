"""torch.compile(mode="reduce-overhead") trained through tidepool.torch.use(): a residual MLP
stack, its loss and backward compiled with CUDA graphs, trained with SGD for 12 steps over two
batch sizes (so two sets of graphs). Under tidepool, use() turns inductor's CUDA graph trees off
(PyTorch's trees need allocator checkpoints that its pluggable interface refuses); the reference
run turns them off too, so both compile the same kernels. Prints the losses (exact, as hex), the
device memory held and in use after training, the time use() took, and, under tidepool, the graphs
kept. `mode`: "default" (PyTorch's allocator) or "tidepool". Prints the figures as JSON."""

import sys
import time

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "tidepool"
result = {"mode": mode}
if mode == "tidepool":
    import tidepool

    started = time.perf_counter()
    tidepool.torch.use()
    result["use_seconds"] = time.perf_counter() - started
from common import emit, residual_mlp  # noqa: E402

import torch._inductor.config as inductor_config  # noqa: E402  (after use(): its hook acts here)

if mode != "tidepool":
    inductor_config.triton.cudagraph_trees = False
result["cudagraph_trees"] = inductor_config.triton.cudagraph_trees
torch.manual_seed(0)
WIDTH, LAYERS, BATCHES, STEPS = 1024, 4, (256, 128), 12
model = residual_mlp(WIDTH, LAYERS).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def loss_of(x, target):
    return torch.nn.functional.mse_loss(model(x), target)


compiled = torch.compile(loss_of, mode="reduce-overhead")
data = torch.Generator(device="cuda").manual_seed(1)
losses = []
for step in range(STEPS):
    batch = BATCHES[0] if step < 8 else BATCHES[1]
    x = torch.randn(batch, WIDTH, device="cuda", generator=data)
    target = torch.randn(batch, WIDTH, device="cuda", generator=data)
    optimizer.zero_grad(set_to_none=True)
    loss = compiled(x, target)
    loss.backward()
    optimizer.step()
    losses.append(float(loss.item()).hex())
torch.cuda.synchronize()
result["losses"] = losses
if mode == "tidepool":
    stats = tidepool.stats()
    result.update(graphs=stats.graphs, graph_kept_bytes=stats.graph_kept_bytes,
                  held=stats.mapped_bytes, in_use=stats.in_use_bytes)
else:
    result.update(held=torch.cuda.memory_reserved(), in_use=torch.cuda.memory_allocated())
emit(result)
