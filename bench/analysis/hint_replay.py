"""What the optimizer-state hint (tidepool.torch.persistent_optimizer_state) would give a recorded
loop: each trace replayed through tidepool's Python package on the simulated GPU twice, in a fresh
process each time, once as recorded (every request scratch) and once with the optimizer's state
allocated persistent, placed apart from scratch as the hint places it. Prints peak held / peak in
use (the pool's peak_mapped_bytes over its peak_requested_bytes, as `tidepool replay` counts them)
and the driver calls of each, for one pass. Every request goes to the default stream: a trace
whose streams each allocate is not replayed as `tidepool replay` does it. With `--rule kept`, every request never freed that is
made after the program's first free is persistent instead: what a program gets that also makes what
it keeps after its start under tidepool.persistent() (a frozen model cast to bf16 after the
others were built, say). With `--capacity F`, both replays run on a simulated GPU F times the
trace's peak in use (as `tidepool replay --capacity Fx`), and each line adds the allocations that
failed there (skipped, as the replay tool skips them).

The trace does not say which requests are the optimizer's state, so they are found as the hint
would mark them: the state an optimizer makes in its first step is never freed, is made after the
program's first free (the weights come before it), and comes in one burst, one or two tensors per
parameter. optimizer_state_rows takes the burst of never-freed requests after the first free
(requests less than BURST_GAP rows apart) with the most bytes.

    TIDEPOOL_LIBRARY=build/src/libtidepool.so PYTHONPATH=python \\
        python3 bench/analysis/hint_replay.py [--rule state|kept] [--capacity F] TRACE...
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from best_fit_models import MiB, read_rows  # noqa: E402
from planner_models import blocks_of  # noqa: E402

BURST_GAP = 200  # rows: never-freed requests closer than this belong to one burst
RULES = ("state", "kept")


def never_freed(rows):
    """The row indexes of the allocations that are never freed (planner_models.blocks_of ends them
    after the last row)."""
    blocks, _ = blocks_of(rows)
    return sorted(start for start, end, _, _ in blocks if end == len(rows))


def kept_after_first_free(rows):
    """The rows of the never-freed allocations made after the program's first free."""
    first_free = next((t for t, (action, _, _) in enumerate(rows) if action == "free"), len(rows))
    return [t for t in never_freed(rows) if t > first_free]


def optimizer_state_rows(rows):
    """The rows of the optimizer's state, as the module's text says: the burst of never-freed
    allocations made after the first free with the most bytes (empty where there is none)."""
    bursts = []
    for t in kept_after_first_free(rows):
        if bursts and t - bursts[-1][-1] < BURST_GAP:
            bursts[-1].append(t)
        else:
            bursts.append([t])
    if not bursts:
        return set()
    return set(max(bursts, key=lambda burst: sum(rows[t][2] for t in burst)))


def replay(rows, persistent_rows):
    """Replays `rows` through tidepool's Python package in this process (a fresh pool: call once a
    process), the rows in `persistent_rows` allocated persistent; returns the pool's figures."""
    import tidepool

    pointers = {}
    failed = 0
    for t, (action, pointer, size) in enumerate(rows):
        if action == "allocate":
            try:
                pointers[pointer] = tidepool.allocate(max(size, 1), 0, None, persistent=t in persistent_rows)
            except tidepool.OutOfMemoryError:  # past a simulated capacity: counted, and its free skipped
                failed += 1
        elif action == "free" and pointer in pointers:
            tidepool.deallocate(pointers.pop(pointer), 0)
    s = tidepool.stats(0)
    return {"peak_mapped_bytes": s.peak_mapped_bytes, "peak_requested_bytes": s.peak_requested_bytes,
            "driver_calls": s.driver_calls, "failed": failed}


def persistent_rows(rows, rule):
    """The rows `rule` allocates persistent: "state", the optimizer's state; "kept", every request
    never freed made after the first free; None, none."""
    if rule is None:
        return set()
    return optimizer_state_rows(rows) if rule == "state" else set(kept_after_first_free(rows))


def worker(path, rule):
    """One replay of `path` under `rule` (persistent_rows), in this process; prints one JSON line."""
    rows = read_rows(path)
    state = persistent_rows(rows, rule)
    result = replay(rows, state)
    result.update({"hinted_rows": len(state), "hinted_bytes": sum(rows[t][2] for t in state)})
    print(json.dumps(result), flush=True)


def run_worker(path, rule, capacity_bytes=None):
    """One replay under `rule` (persistent_rows) in a fresh process on the simulated GPU, of
    `capacity_bytes` where given; its JSON line."""
    env = dict(os.environ, TIDEPOOL_DEVICE="sim")
    if capacity_bytes is not None:
        env["TIDEPOOL_SIM_CAPACITY"] = str(capacity_bytes)
    command = [sys.executable, os.path.abspath(__file__), "--worker", path] + (["--rule", rule] if rule else ["--plain"])
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"replaying {path} failed: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout.splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", help="RMM replay logs (CSV, plain, gzip or xz)")
    parser.add_argument("--rule", choices=RULES, default="state",
                        help="what is persistent in the second replay: the optimizer's state (state, the "
                        "default) or every request never freed made after the first free (kept)")
    parser.add_argument("--capacity", type=float, metavar="F",
                        help="replay on a simulated GPU F times each trace's peak in use")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)  # a worker: nothing persistent
    args = parser.parse_args(argv)
    if args.capacity is not None and not args.capacity > 0:
        parser.error("--capacity must be positive")
    if args.worker:
        worker(args.traces[0], None if args.plain else args.rule)
        return 0
    what = {"state": "the optimizer's state", "kept": "what is kept after the first free"}[args.rule]
    for path in args.traces:
        plain = uncapped = run_worker(path, None)
        peak_in_use = uncapped["peak_requested_bytes"]  # the trace's own, whatever fails under a cap
        capacity = None if args.capacity is None else int(args.capacity * peak_in_use)
        if capacity is not None:
            plain = run_worker(path, None, capacity)
        hinted = run_worker(path, args.rule, capacity)
        where = "" if capacity is None else f" (on a GPU {args.capacity:g}x its peak in use)"
        failures = "" if capacity is None else f"; failed allocations {plain['failed']}, {hinted['failed']}"

        def ratio(r):
            return r["peak_mapped_bytes"] / peak_in_use if peak_in_use else 0.0

        print(f"{os.path.basename(path)}: peak held / peak in use {ratio(plain):.4f}, with {what} "
              f"persistent {ratio(hinted):.4f} ({hinted['hinted_rows']} requests, "
              f"{hinted['hinted_bytes'] / MiB:.0f} MiB); driver calls {plain['driver_calls']}, "
              f"{hinted['driver_calls']}{failures}{where}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
