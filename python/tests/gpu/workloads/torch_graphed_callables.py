"""A training step whose forward and backward passes are CUDA graphs, made by
torch.cuda.make_graphed_callables (PyTorch runs the captured backward pass on its autograd thread,
not the thread that captures). The graphed copy of a model is trained beside an eager copy from
the same weights on the same batches; prints whether their losses and weights agree, the device
memory the captures took, whether held memory moves once training runs, and what comes back once
the graphs are gone. `mode`:
  default          PyTorch's allocator (make_graphed_callables gives its captures one pool)
  tidepool         tidepool.torch.use(), which maps that pool to a tidepool graph pool entered
                   for all threads, so the backward capture on the autograd thread joins the
                   forward's
  tidepool-shared  the same, the captures made under a tidepool.GraphPool(all_threads=True) the
                   program entered itself
Prints the figures as JSON."""

import contextlib
import copy
import gc
import sys

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "tidepool-shared"
uses_tidepool = mode.startswith("tidepool")
if uses_tidepool:
    import tidepool

    tidepool.torch.use()
from common import (MiB, drop_allocator_cache, emit, graphs_kept_after_waiting,  # noqa: E402
                    held_by_allocator, residual_mlp)

torch.manual_seed(0)
WIDTH, LAYERS, BATCH, STEPS = 1024, 8, 512, 20

eager = residual_mlp(WIDTH, LAYERS).cuda()
graphed = copy.deepcopy(eager)
data = torch.Generator(device="cuda").manual_seed(1)
batches = [(torch.randn(BATCH, WIDTH, device="cuda", generator=data),
            torch.randn(BATCH, WIDTH, device="cuda", generator=data)) for _ in range(STEPS)]
torch.cuda.synchronize()


def held():
    return held_by_allocator(uses_tidepool)


def drop_cache():
    drop_allocator_cache(uses_tidepool)


# What the program holds before capturing: the two models and the batches; no cache.
drop_cache()
held_before = held()
in_use_before = tidepool.stats().in_use_bytes if uses_tidepool else torch.cuda.memory_allocated()
graph_pool = tidepool.GraphPool(all_threads=True) if mode == "tidepool-shared" else contextlib.nullcontext()
with graph_pool:
    graphed = torch.cuda.make_graphed_callables(graphed, (torch.zeros(BATCH, WIDTH, device="cuda"),))
torch.cuda.synchronize()
# The warm-up iterations' cache goes; what stays is the graphs' own.
drop_cache()
result = {"mode": mode, "graph_bytes": held() - held_before}
if uses_tidepool:
    stats = tidepool.stats()
    result["graphs_kept"] = stats.graphs
    result["graph_kept_bytes"] = stats.graph_kept_bytes
    # Free memory that release() could not give back and no graph keeps: parts of handles that
    # live or kept blocks pin.
    result["pinned_free_bytes"] = stats.cached_bytes - stats.graph_kept_bytes
    result["in_use_growth"] = stats.in_use_bytes - in_use_before
else:
    result["pinned_free_bytes"] = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    result["in_use_growth"] = torch.cuda.memory_allocated() - in_use_before

optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, graphed)]
losses = {"eager": [], "graphed": []}
held_at = {}
for step, (x, target) in enumerate(batches):
    for name, model, optimizer in zip(("eager", "graphed"), (eager, graphed), optimizers):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses[name].append(loss.item())
    held_at[step] = held()
torch.cuda.synchronize()
result["losses_match"] = all(abs(a - b) <= 1e-3 * abs(a) + 1e-5 for a, b in zip(losses["eager"], losses["graphed"]))
result["weights_match"] = all(torch.allclose(a, b, rtol=1e-3, atol=1e-4)
                              for a, b in zip(eager.parameters(), graphed.parameters()))
result["loss_first_last"] = [losses["graphed"][0], losses["graphed"][-1]]
# Every step after the second is the same work: the memory held must not move.
result["held_growth_after_step_2"] = held_at[STEPS - 1] - held_at[2]
result["held_training_mib"] = held_at[STEPS - 1] / MiB

# The loop's names hold the graphed model too: every reference goes, so the graphs do.
del graphed, optimizers, model, optimizer, loss
gc.collect()
torch.cuda.synchronize()
if uses_tidepool:
    result["graphs_after_destroy"] = graphs_kept_after_waiting(tidepool)
drop_cache()
if uses_tidepool:
    result["in_use_after_destroy"] = tidepool.stats().in_use_bytes
result["held_after_destroy"] = held()
emit(result)
