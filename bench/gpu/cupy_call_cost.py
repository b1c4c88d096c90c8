"""The host time of one CuPy allocation and free under one allocator, in one process: what the
loader workload's 8,000 allocations that find their block cached pay each (python/tests/gpu's
retention workload times them through cupy.empty, as this does).

    python3 bench/gpu/cupy_call_cost.py {cupy,tidepool,tidepool-unrouted} [--pairs N]

Prints microseconds per cupy.empty + del pair, median of 5 rounds, for
  cached:  one size again and again (the allocator's cached path);
  mixed:   64 live arrays of sizes from 512 B to 4 MiB replaced in turn (a free and an allocation
           of another size each pair), the loader's mix of small and large requests.
`cupy` is CuPy's own memory pool; `tidepool` is `tidepool.cupy.use()` (the allocator the package
installs: CuPy's current stream read and passed on, then tidepool_cupy_malloc through CuPy's
CFunctionAllocator); `tidepool-unrouted` is the same CFunctionAllocator set as CuPy's allocator
directly, with no stream passed on: the difference between the two is what the package's Python
wrapper costs per allocation. Each allocator in its own process; tidepool needs TIDEPOOL_LIBRARY
or an installed package.
"""

import argparse
import os
import random
import statistics
import sys
import time


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("allocator", choices=("cupy", "tidepool", "tidepool-unrouted"))
    parser.add_argument("--pairs", type=int, default=20000, help="allocate + free pairs per round")
    args = parser.parse_args(argv)
    import cupy

    if args.allocator != "cupy":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
        import tidepool.cupy
        from tidepool import _library

        if args.allocator == "tidepool":
            tidepool.cupy.use()
        else:
            cupy.cuda.set_allocator(tidepool.cupy._c_function_allocator(cupy, _library.load()).malloc)
    cupy.ones(1).sum().item()  # the context and the first kernels
    sizes = [512 << (k % 14) for k in range(64)]  # 512 B to 4 MiB
    random.Random(0).shuffle(sizes)

    def cached():
        for _ in range(args.pairs):
            a = cupy.empty(65536, dtype=cupy.uint8)
            del a

    live = [cupy.empty(size, dtype=cupy.uint8) for size in sizes]

    def mixed():
        for i in range(args.pairs):
            slot = i % len(live)
            live[slot] = None
            live[slot] = cupy.empty(sizes[(slot + i // len(live)) % len(sizes)], dtype=cupy.uint8)

    for name, body in (("cached", cached), ("mixed", mixed)):
        body()  # warm-up: every size the round asks for is cached after it
        cupy.cuda.Device().synchronize()
        rounds = []
        for _ in range(5):
            start = time.perf_counter()
            body()
            rounds.append((time.perf_counter() - start) * 1e6 / args.pairs)
        cupy.cuda.Device().synchronize()
        print(f"{args.allocator:17s} {name:7s} {statistics.median(rounds):7.2f} us per pair "
              f"(rounds {', '.join(f'{r:.2f}' for r in rounds)})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
