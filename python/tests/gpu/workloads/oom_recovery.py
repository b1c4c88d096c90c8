"""Running out of device memory under tidepool and going on, as programs do with the frameworks'
own allocators: catch the error, free what the failed step held, take a smaller batch, finish.

Argument "torch": an MLP trained with Adam from a batch too large for the pool's byte cap; each
out-of-memory error (a RuntimeError from PyTorch, "CUDA out of memory." first) halves the batch,
then training runs to the end. Argument "cupy": an array reduced in chunks, halving the chunk on
cupy.cuda.memory.OutOfMemoryError. The cap (1 GiB) makes memory run out at once on any GPU; the
out-of-memory path is the one a full device takes (tidepool_torch_alloc, tidepool_cupy_malloc)."""

import gc
import math
import sys

import tidepool
from common import GiB, MiB, emit

CAP = 1 * GiB
tidepool.set_pool_options(byte_cap=CAP)
framework = sys.argv[1]
result = {"framework": framework, "errors": []}


def live():
    s = tidepool.stats(0)
    return s.live_allocations, s.in_use_bytes


def settle():
    """What is live once a failed step's frames and tensors are gone (the traceback holds them
    until its except clause ends)."""
    gc.collect()
    return live()


if framework == "torch":
    import torch

    tidepool.torch.use()
    torch.manual_seed(0)
    width = 2048
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.ReLU(),
                                torch.nn.Linear(4 * width, width)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step(batch):
        x = torch.randn(batch, width, device="cuda")
        loss = (model(x) - x).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss.item()

    step(8)  # Adam's state exists from here on: a failed step cannot leave a first part of it
    batch, losses = 1 << 15, []
    while len(losses) < 6:
        optimizer.zero_grad(set_to_none=True)
        before = live()
        failed = None
        try:
            losses.append(step(batch))
        except RuntimeError as error:
            if not tidepool.torch.is_out_of_memory(error):
                raise
            failed = {"batch": batch, "type": type(error).__name__,
                      "message": str(error).splitlines()[0][:300]}
        if failed is None:
            continue
        result["errors"].append(failed)
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()  # no sticky CUDA error: the allocation was never made
        result.setdefault("stranded", []).append([a - b for a, b in zip(settle(), before)])
        batch //= 2
    result.update(batch=batch, losses=losses, finite=all(math.isfinite(v) for v in losses))
    del model, optimizer
elif framework == "cupy":
    import cupy

    tidepool.cupy.use()
    kept = cupy.arange(64 * MiB // 4, dtype=cupy.float32)  # live across the failures
    total_elements = 2 * GiB  # one byte each (int8 ones: their sum is exact)
    chunk, done, sum_ = total_elements, 0, 0
    while done < total_elements:
        before = live()
        failed = None
        try:
            part = cupy.ones(min(chunk, total_elements - done), dtype=cupy.int8)
        except cupy.cuda.memory.OutOfMemoryError as error:
            failed = {"chunk_bytes": chunk, "type": type(error).__name__,
                      "cause": type(error.__cause__).__name__, "message": str(error)[:300]}
        if failed is not None:
            result["errors"].append(failed)
            result.setdefault("stranded", []).append([a - b for a, b in zip(settle(), before)])
            chunk //= 2
            continue
        sum_ += int(part.sum())
        done += part.size
        del part
    result.update(chunk_bytes=chunk, sum=sum_, expected=total_elements,
                  kept_ok=bool(float(kept[-1]) == kept.size - 1))
    del kept
else:
    raise SystemExit(f"unknown framework {framework!r}")
result["cap"] = CAP
result["live_at_end"] = live()[0]
emit(result)
