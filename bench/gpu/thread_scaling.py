"""Thread scaling on the GPU (issue 10): cached allocate + free from 1, 2, 4, 8 and 16 threads, on one
device and on two (threads alternate between them), tidepool beside PyTorch's caching allocator in
the same process; then the latency of a cached tidepool allocation while another thread is inside
a slow driver call (a 2 GiB allocation no cache holds, released after each round, so the other
thread keeps creating handles).

Both allocators are driven from Python threads: PyTorch through
torch.cuda.caching_allocator_alloc/delete, tidepool through its ctypes package (ctypes drops the
GIL during the call). The figures therefore include each binding's cost and the GIL's: with more
threads they show Python's scaling more than the allocators'. `tidepool_compare_bench threads`
(bench/gpu/compare_threads.cpp) has the same comparison from C++ threads, and
bench/thread_scaling_bench.cpp tidepool's own scaling on sim. With one GPU the two-device rows are
skipped, and the table (and the JSON's "skipped") says so.

    python3 bench/gpu/thread_scaling.py [--seconds S] [--json OUT]

Needs torch with CUDA and TIDEPOOL_LIBRARY pointing at libtidepool.so. Prints one table.
"""

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

MiB = 1 << 20
SIZES = (4096, MiB, 16 * MiB)
THREADS = (1, 2, 4, 8, 16)


def run_threads(count, work, seconds):
    """Runs work(index, stop) on `count` threads for about `seconds`; returns pairs per second
    (every thread's pairs over the time from the start to the last thread's end)."""
    stop = threading.Event()
    done = [0] * count
    start = threading.Barrier(count + 1)

    def body(i):
        start.wait()
        done[i] = work(i, stop)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - began)


def torch_work(torch, devices):
    def work(i, stop):
        device = i % devices
        with torch.cuda.device(device):
            stream = torch.cuda.Stream(device)
            for size in SIZES:  # warm this stream's cache (the first pairs create memory)
                torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(size, device, stream))
            pairs = 0
            while not stop.is_set():
                for size in SIZES:
                    ptr = torch.cuda.caching_allocator_alloc(size, device, stream)
                    torch.cuda.caching_allocator_delete(ptr)
                pairs += len(SIZES)
            return pairs
    return work


def tidepool_work(tp, torch, devices):
    def work(i, stop):
        device = i % devices
        with torch.cuda.device(device):
            stream = torch.cuda.Stream(device)
            handle = stream.cuda_stream
            for size in SIZES:
                tp.deallocate(tp.allocate(size, device, stream=handle), device, stream=handle)
            pairs = 0
            while not stop.is_set():
                for size in SIZES:
                    ptr = tp.allocate(size, device, stream=handle)
                    tp.deallocate(ptr, device, stream=handle)
                pairs += len(SIZES)
            tp.forget_stream(handle, device)
            return pairs
    return work


def latency_beside_slow_call(tp, seconds):
    """p50/p99 of cached 1 MiB pairs on one thread while another keeps growing by 2 GiB."""
    stop = threading.Event()
    in_growth = threading.Event()

    def grow():
        while not stop.is_set():
            in_growth.set()
            ptr = tp.allocate(2 << 30, 0)
            in_growth.clear()
            tp.deallocate(ptr, 0)
            tp.release(0)

    # A block held throughout keeps its granule mapped through the grower's release(), so the
    # timed pairs find their 1 MiB cached (the granule's other half) instead of creating memory.
    keeper = tp.allocate(MiB, 0)
    tp.deallocate(tp.allocate(MiB, 0), 0)
    grower = threading.Thread(target=grow)
    grower.start()
    waits = []
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        during = in_growth.is_set()
        t0 = time.perf_counter()
        ptr = tp.allocate(MiB, 0)
        tp.deallocate(ptr, 0)
        if during:
            waits.append((time.perf_counter() - t0) * 1e6)
    stop.set()
    grower.join()
    tp.deallocate(keeper, 0)
    waits.sort()
    at = (lambda q: waits[int(q * (len(waits) - 1))]) if waits else (lambda q: float("nan"))
    return {"pairs": len(waits), "p50_us": at(0.5), "p99_us": at(0.99), "max_us": waits[-1] if waits else float("nan")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per point (default 1)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    import torch
    import tidepool as tp

    gpus = torch.cuda.device_count()
    if gpus < 1:
        print("no CUDA device: nothing to measure")
        return 0
    results = []
    skipped = None
    print(f"{'devices':>7} {'threads':>7} {'torch Mpairs/s':>15} {'tidepool Mpairs/s':>18}")
    for devices in (1, 2):
        if devices > gpus:
            skipped = f"two devices skipped: this machine has {gpus} GPU"
            print(f"({skipped})")
            continue
        for d in range(devices):
            torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(MiB, d))
        for count in THREADS:
            row = {"devices": devices, "threads": count}
            for name, work in (("torch", torch_work(torch, devices)), ("tidepool", tidepool_work(tp, torch, devices))):
                row[name + "_pairs_per_s"] = run_threads(count, work, args.seconds)
            results.append(row)
            print(f"{devices:>7} {count:>7} {row['torch_pairs_per_s'] / 1e6:>15.3f} {row['tidepool_pairs_per_s'] / 1e6:>18.3f}")
    latency = latency_beside_slow_call(tp, args.seconds)
    print(f"tidepool cached 1 MiB pair while another thread grows by 2 GiB: p50 {latency['p50_us']:.1f} us, "
          f"p99 {latency['p99_us']:.1f} us, max {latency['max_us']:.1f} us over {latency['pairs']} pairs")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"gpus": gpus, "skipped": skipped, "scaling": results, "beside_slow_call": latency}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
