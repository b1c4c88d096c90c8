"""What sending tidepool allocations to another process costs (tidepool.share_memory through a
multiprocessing queue to a spawned child), round after round, without a framework: the time from
the put until the child has every ImportedMemory, and with --profile the child's last round under
cProfile. On the GPU that is the driver's export, import and mapping plus Python; on sim
(TIDEPOOL_DEVICE=sim TIDEPOOL_SIM_HOST_MEMORY=1 TIDEPOOL_SIM_UUID=any) Python's share alone.

    TIDEPOOL_LIBRARY=build/src/libtidepool.so PYTHONPATH=python python3 bench/gpu/ipc_send.py \
        --count 64 --mib 16 --rounds 4 --profile
"""

import argparse
import cProfile
import io
import multiprocessing as mp
import pstats
import time


def receive(queue, answers, rounds, profile):
    previous = []
    for round_index in range(rounds):
        profiler = cProfile.Profile() if profile and round_index == rounds - 1 else None
        if profiler:
            profiler.enable()
        started = time.perf_counter()
        memories = queue.get()
        received_s = time.perf_counter() - started
        for memory in previous:  # the last round's, let go as a receiver replacing its weights does
            memory.close()
        previous = memories
        if profiler:
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
            print(text.getvalue(), flush=True)
        answers.put(received_s)
    for memory in previous:
        memory.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=64, help="allocations sent each round")
    parser.add_argument("--mib", type=int, default=16, help="size of each, MiB")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--profile", action="store_true", help="cProfile the child's last round")
    args = parser.parse_args()

    import tidepool

    pointers = [tidepool.allocate(args.mib << 20) for _ in range(args.count)]
    ctx = mp.get_context("spawn")
    queue, answers = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=receive, args=(queue, answers, args.rounds, args.profile))
    child.start()
    print(f"| round | put to received (ms) | the child's get (ms) |  ({args.count} x {args.mib} MiB)")
    print("|---|---|---|")
    for round_index in range(args.rounds):
        started = time.perf_counter()
        queue.put([tidepool.share_memory(p, keep=p) for p in pointers])
        child_s = answers.get(timeout=120)
        print(f"| {round_index + 1} | {(time.perf_counter() - started) * 1e3:.1f} | {child_s * 1e3:.1f} |", flush=True)
    child.join(60)
    for p in pointers:
        tidepool.deallocate(p)


if __name__ == "__main__":
    main()
