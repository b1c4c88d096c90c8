"""Two processes on one GPU (issue 14). Run as:

    sharing_neighbour.py holder tidepool|default   caches most of the GPU, then idles
    sharing_neighbour.py taker                     one large allocation through tidepool

The holder allocates about 70% of the GPU (100 GiB of an H200's 140) in 1 GiB tensors and frees
them, so the memory stays cached: in tidepool's pool (`tidepool`, PyTorch on tidepool) or in
PyTorch's own caching allocator (`default`, tidepool not loaded at all). It prints one JSON line
when ready and idles (tidepool serves requests on its helper thread) until stdin closes, then
prints a last JSON line. The taker, PyTorch on tidepool, allocates about 57% of the GPU (80 GiB of
140) at once: more than is free while the holder's cache is held. It prints whether that worked
and how long the allocation took. Sizes come from the device's total memory."""

import json
import sys
import time

import torch

GiB = 1 << 30


def total_bytes():
    return torch.cuda.get_device_properties(0).total_memory


def emit(record):
    print(json.dumps(record), flush=True)


def holder(mode):
    if mode == "tidepool":
        import tidepool

        tidepool.torch.use()
    torch.cuda.init()
    target = int(total_bytes() * 0.70)
    tensors = []
    while len(tensors) * GiB < target:
        tensors.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    cached = len(tensors) * GiB
    del tensors  # freed: cached by the allocator, not handed back
    record = {"role": "holder", "mode": mode, "cached_bytes": cached, "total_bytes": total_bytes()}
    if mode == "tidepool":
        import tidepool

        record["tidepool_cached_bytes"] = tidepool.stats(0).cached_bytes
    else:
        record["torch_reserved_bytes"] = torch.cuda.memory_reserved(0)
    emit(dict(record, ready=True))
    sys.stdin.read()  # idle until the test closes stdin
    if mode == "tidepool":
        import tidepool

        s = tidepool.stats(0)
        record.update(released_bytes=s.released_bytes, mapped_after=s.mapped_bytes)
    else:
        record["torch_reserved_after"] = torch.cuda.memory_reserved(0)
    emit(dict(record, done=True))


def taker():
    import tidepool

    tidepool.torch.use()
    torch.cuda.init()
    size = int(total_bytes() * 0.57)
    free_before, _ = torch.cuda.mem_get_info(0)
    start = time.perf_counter()
    try:
        block = torch.empty(size, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        ok, error = True, ""
        del block
    except RuntimeError as e:  # what a failed tidepool allocation becomes in PyTorch
        ok, error = False, str(e).splitlines()[0]
    seconds = time.perf_counter() - start
    emit({"role": "taker", "ok": ok, "error": error, "bytes": size, "seconds": seconds,
          "free_before": free_before, "total_bytes": total_bytes()})


if __name__ == "__main__":
    if sys.argv[1] == "holder":
        holder(sys.argv[2])
    else:
        taker()
