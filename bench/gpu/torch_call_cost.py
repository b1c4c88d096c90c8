"""The host time of one PyTorch allocation and free under one allocator, in one process: what a
host-bound loop (sampling token by token) pays per tensor it makes.

    python3 bench/gpu/torch_call_cost.py {default,expandable,tidepool,async,pluggable-async} [--pairs N]

Prints microseconds per allocate + free pair, median of 5 rounds, for
  cached:    torch.empty of one size and del, again and again (the allocator's cached path);
  queued:    the same while the GPU runs behind (a long kernel queued first), so the stream's frees
             are not known complete;
  kv-concat: a decode step's pattern: a cache grown by torch.cat each step (a larger tensor made,
             the old one freed) beside a small temporary, with the GPU's work queued.
Each allocator in its own process (PYTORCH_CUDA_ALLOC_CONF must be set before torch is imported:
this script sets it for `expandable` and `async`; `tidepool` needs TIDEPOOL_LIBRARY or an installed
package). `async` is PyTorch's native cudaMallocAsync backend and `pluggable-async` the same
cudaMallocAsync behind PyTorch's pluggable-allocator interface (the library bench/gpu builds,
libtidepool_bench_pluggable_async.so, named by TIDEPOOL_BENCH_PLUGGABLE_ASYNC): the difference
between the two is the interface's own cost, which tidepool's package pays too.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "train"))
import catalog  # noqa: E402  (the allocators' settings, shared with the training benchmark)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("allocator", choices=("default", "expandable", "tidepool", "async", "pluggable-async"))
    parser.add_argument("--pairs", type=int, default=20000, help="allocate + free pairs per round")
    args = parser.parse_args(argv)
    conf = catalog.alloc_conf(args.allocator)
    if conf is not None:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import torch

    if args.allocator == "tidepool":
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
        import tidepool.torch

        tidepool.torch.use()
    elif args.allocator == catalog.PLUGGABLE_ASYNC:
        catalog.use_pluggable_async(torch)
    device = torch.device("cuda")
    busy = torch.randn(4096, 4096, device=device)

    def queue_gpu_work():
        for _ in range(20):  # tens of milliseconds of matrix products
            torch.mm(busy, busy, out=busy)

    def cached():
        for _ in range(args.pairs):
            t = torch.empty(65536, dtype=torch.uint8, device=device)
            del t

    def queued():
        queue_gpu_work()
        cached()

    def kv_concat():
        queue_gpu_work()
        cache = torch.empty(8, 0, 128, dtype=torch.bfloat16, device=device)
        token = torch.empty(8, 1, 128, dtype=torch.bfloat16, device=device)
        for step in range(args.pairs // 2):
            if step % 512 == 0:
                cache = cache[:, :0]  # a new sequence: the cache starts again
            cache = torch.cat((cache, token), dim=1)  # one allocation, the old cache freed
            scratch = torch.empty(8, 4096, dtype=torch.bfloat16, device=device)
            del scratch

    for name, body in (("cached", cached), ("queued", queued), ("kv-concat", kv_concat)):
        body()  # warm-up
        torch.cuda.synchronize()
        rounds = []
        for _ in range(5):
            start = time.perf_counter()
            body()
            rounds.append((time.perf_counter() - start) * 1e6 / args.pairs)
            torch.cuda.synchronize()
        print(f"{args.allocator:10s} {name:10s} {statistics.median(rounds):7.2f} us per pair "
              f"(rounds {', '.join(f'{r:.2f}' for r in rounds)})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
