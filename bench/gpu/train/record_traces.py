"""Records the allocations of the benchmark's training loops as replay traces: each workload runs
in its own process under PyTorch's caching allocator with the memory history on (from before the
model is built, so the trace holds the whole program), its torch.cuda.memory._snapshot() is
pickled and converted by tidepool.snapshot (the converter of `python3 -m tidepool.snapshot`) into
OUT/<workload>.csv.gz, e.g. gpt_vary.csv.gz, for `tidepool replay`.

    python3 bench/gpu/train/record_traces.py [--workloads gpt-vary,...] [--steps N] [--out DIR]

A trace is complete when the history buffer never wrapped (fewer entries than --max-entries) and
no free lacks its allocation (the converter drops and counts those); each line printed says so,
and the exit status is 1 if a trace is incomplete or a run failed.
"""

import argparse
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PYTHON_ROOT = os.path.join(REPO_ROOT, "python")
if PYTHON_ROOT not in sys.path:
    sys.path.insert(0, PYTHON_ROOT)  # tidepool.snapshot (pure Python)

import catalog  # noqa: E402  (after the paths above)
import report  # noqa: E402

DEFAULT_MAX_ENTRIES = 5_000_000  # the buffer grows as entries come: a large bound costs nothing unused


def history_bound(spec, max_entries=None):
    """The history buffer's bound for recording `spec`: --max-entries where given, else the
    workload's own (`history_entries` in its params, for loops that make more entries), else
    DEFAULT_MAX_ENTRIES."""
    return max_entries if max_entries is not None else spec.params.get("history_entries", DEFAULT_MAX_ENTRIES)


def trace_file_name(workload):
    return workload.replace("-", "_") + ".csv.gz"


def history_summary(snapshot, max_entries, device=0):
    """What the recorded history holds: entries, entries per action, the first action, and whether
    the buffer wrapped (then the oldest entries are lost)."""
    entries = snapshot["device_traces"][device]
    actions = {}
    for entry in entries:
        actions[entry["action"]] = actions.get(entry["action"], 0) + 1
    return {"entries": len(entries), "actions": actions, "max_entries": max_entries,
            "wrapped": len(entries) >= max_entries,
            "first_action": entries[0]["action"] if entries else None}


def convert(snapshot, out_path, device=0):
    """Writes the replay log of `snapshot` to `out_path` with tidepool.snapshot; returns
    {"rows", "dropped_frees", "live_at_end"}."""
    from tidepool import snapshot as converter

    rows, dropped = converter.convert(snapshot, device)
    converter.write_log(rows, out_path)
    allocates = sum(1 for r in rows if ",allocate," in r)
    frees = sum(1 for r in rows if ",free," in r)
    return {"rows": len(rows), "dropped_frees": dropped, "live_at_end": allocates - frees}


def complete(result):
    """Whether a recorded trace holds every allocation and free of the run."""
    return "error" not in result and not result["wrapped"] and result["dropped_frees"] == 0


def incomplete_reason(result):
    """Why a recorded trace is not complete, and what to do about it (None if it is)."""
    if complete(result):
        return None
    if result["wrapped"]:
        return (f"the history filled its bound of {result['max_entries']:,} entries and lost the oldest; "
                f"record again with a larger --max-entries (e.g. {2 * result['max_entries']:,})")
    return f"{result['dropped_frees']:,} frees without their allocation in the history"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="record_traces.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(catalog.RECORDED),
                        help="comma-separated (default: " + ",".join(catalog.RECORDED) + ")")
    parser.add_argument("--steps", type=int, help="steps per workload (default: the workload's, 80)")
    parser.add_argument("--seed", type=int, default=0, help="seed of shapes, weights and data (default 0)")
    parser.add_argument("--max-entries", type=int,
                        help=f"history buffer bound (default: the workload's, else {DEFAULT_MAX_ENTRIES:,})")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per workload before it is killed")
    parser.add_argument("--out", help="where the traces go (default: $OUT, else $LOG_DIR/traces, else "
                        "gpu-logs/traces in the repository)")
    parser.add_argument("--keep-pickles", action="store_true", help="keep each snapshot pickle in --out too")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pickle", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.workloads = catalog.parse_names(args.workloads, catalog.WORKLOADS, "workload")
    except ValueError as e:
        parser.error(str(e))
    if args.steps is not None and args.steps < 1 or args.max_entries is not None and args.max_entries < 1 \
            or args.timeout <= 0:
        parser.error("--steps, --max-entries and --timeout must be positive")
    if args.worker and (len(args.workloads) != 1 or not args.pickle):
        parser.error("--worker records one workload into --pickle")
    return args


def out_dir_of(args):
    if args.out:
        return args.out
    if os.environ.get("OUT"):
        return os.environ["OUT"]
    return os.path.join(os.environ.get("LOG_DIR") or os.path.join(REPO_ROOT, "gpu-logs"), "traces")


# ---- worker: one workload, recorded, in this process ----

def record(spec, steps, seed, max_entries, pickle_path, out_path):
    import torch

    import workloads

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=max_entries)
    shapes = spec.shapes(seed, steps)
    workload = workloads.build(spec, shapes, seed)
    seconds = workloads.run_steps(workload, steps)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(pickle_path, "wb") as f:
        pickle.dump(snapshot, f, protocol=pickle.HIGHEST_PROTOCOL)
    result = {"steps": steps, "shapes_digest": catalog.shapes_digest(shapes),
              "peak_in_use_bytes": torch.cuda.max_memory_allocated(),
              "peak_held_bytes": torch.cuda.max_memory_reserved()}
    result.update(report.step_statistics(seconds, min(spec.warmup, steps - 1)))
    result.update(workload.info())
    result.update(history_summary(snapshot, max_entries))
    result.update(convert(snapshot, out_path))
    return result


def worker(args):
    spec = catalog.WORKLOADS[args.workloads[0]]
    out_path = os.path.join(out_dir_of(args), trace_file_name(spec.name))
    result = {"workload": spec.name, "trace": out_path}
    try:
        steps = args.steps if args.steps is not None else spec.steps
        result.update(record(spec, steps, args.seed, history_bound(spec, args.max_entries), args.pickle, out_path))
    except Exception as e:
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {e}"[:2000]
    sys.stdout.flush()
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 1 if "error" in result else 0


# ---- launcher ----

def describe(result):
    if "error" in result:
        return f"{result['workload']}: FAILED: {result['error']}"
    reason = incomplete_reason(result)
    state = "complete" if reason is None else f"INCOMPLETE: {reason}"
    size = os.path.getsize(result["trace"]) / 1e6 if os.path.exists(result["trace"]) else 0
    return (f"{result['workload']}: {result['trace']} ({size:.1f} MB): {result['rows']:,} rows from "
            f"{result['entries']:,} history entries (bound {result['max_entries']:,}), first "
            f"{result['first_action']}, {result['dropped_frees']} frees dropped, {result['live_at_end']} "
            f"live at the end, {result['steps']} steps, median step {result['median_step_ms']:.1f} ms: {state}")


def launch(args):
    out = out_dir_of(args)
    os.makedirs(out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="record-traces-")
    status = 0
    try:
        for name in args.workloads:
            start = time.monotonic()
            pickle_path = os.path.join(scratch, name + ".pickle")
            log_path = os.path.join(out, name.replace("-", "_") + ".record.log")
            command = [sys.executable, os.path.abspath(__file__), "--worker", "--workloads", name,
                       "--seed", str(args.seed), "--max-entries",
                       str(history_bound(catalog.WORKLOADS[name], args.max_entries)), "--out", out,
                       "--pickle", pickle_path]
            if args.steps is not None:
                command += ["--steps", str(args.steps)]
            env = catalog.child_environment(os.environ, "default", PYTHON_ROOT)
            result = report.run_child(command, env, log_path, args.timeout, name, "default")
            print(describe(result) + f" [{time.monotonic() - start:.0f} s]", flush=True)
            if not complete(result):
                status = 1
            if args.keep_pickles and os.path.exists(pickle_path):
                shutil.move(pickle_path, os.path.join(out, name.replace("-", "_") + ".pickle"))
            elif os.path.exists(pickle_path):
                os.remove(pickle_path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return status


def main(argv=None):
    args = parse_args(argv)
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
