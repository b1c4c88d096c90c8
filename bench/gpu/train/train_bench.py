"""End-to-end GPU training benchmark: real training (and generation) loops under PyTorch's caching
allocator (`default`), with expandable segments (`expandable`) and routed to tidepool (`tidepool`),
each workload and allocator in its own process.

    TIDEPOOL_LIBRARY=$PWD/build/src/libtidepool.so python3 bench/gpu/train/train_bench.py \\
        [--workloads gpt-vary,...] [--allocators default,expandable,tidepool] [--steps N] [--log-dir DIR]
        [--tidepool-option growth_slack=0.05 ...] [--record] [--repeats N] [--memory-cap-gib G]
        [--persistent-optimizer-state]

Per run, the child prints one JSON line: median and p90 step time after the warm-up (each step
timed to a torch.cuda.synchronize()), the time of the first 10 steps, peak in use and peak held by
the allocator's own count, NVML's peak for the process over its baseline, and driver calls; and, after
each step, the allocator's driver calls so far and what it held then, from which the table's notes
say whether the run settled once warmed up (no call, no more held). The
launcher prints a table per workload and all of them at the end, and writes every JSON line to
LOG_DIR/train-bench.jsonl (each child's output to LOG_DIR/train-bench/WORKLOAD.ALLOCATOR.log).
Exit status 1 if any run failed. `--memory-cap-gib G` runs every allocator as on a GPU of G GiB
(PyTorch's per-process memory fraction, which `tidepool.torch.use()` passes on to tidepool): how
each behaves near the device's capacity, where one that cannot find room fails the run.
`--persistent-optimizer-state` has the tidepool runs keep the optimizer's state apart from scratch
(tidepool.torch.persistent_optimizer_state; the JSON line says so). `--list` lists the workloads. The allocator `tidepool+record`
(named only on purpose, not in the default list) is tidepool recording every allocation and free
(TIDEPOOL_RECORD) to LOG_DIR/train-bench/WORKLOAD.tidepool+record.csv.gz: with
`--allocators tidepool,tidepool+record` each table ends with what the recording cost (median step
against median step). `--record` has every tidepool run record (to WORKLOAD.ALLOCATOR.csv.gz); an
inherited TIDEPOOL_RECORD reaches the tidepool runs too (use "%p" in it: each run is a process of
its own). `--repeats N` runs each pair N times, the allocators' order rotated each time, and adds a
table over the runs (each step the geometric mean of its N times): for loops bound by the host,
whose processes differ by 10-20% whatever the allocator. Before each workload's timed runs, one
untimed run of `--untimed-run-steps N` steps (10, the first-10-steps window; 0: none) under
PyTorch's default allocator is dropped: on a machine just started, the first process to run the
workload took up to 2.7 times as long over its first 10 steps as the processes after it, and that
would otherwise fall on whichever allocator runs first. A machine pays that once for each shape
it first runs, so the untimed run runs the shapes of the first 10 steps (docs/RESULTS.md, section
0, "The untimed run on an H100"). Two more
allocators, also named only, measure PyTorch's pluggable-allocator interface (the one tidepool's
package goes through) on its own: `async` is PyTorch's native cudaMallocAsync backend,
`pluggable-async` the same cudaMallocAsync behind the interface (TIDEPOOL_BENCH_PLUGGABLE_ASYNC
names bench/gpu's libtidepool_bench_pluggable_async.so); with both, each table ends with what the
interface cost.
"""

import argparse
import importlib
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PYTHON_ROOT = os.path.join(REPO_ROOT, "python")

import catalog  # noqa: E402  (after the path above)
import report  # noqa: E402

UNTIMED_ALLOCATOR = "default"  # PyTorch's own caching allocator runs the untimed run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="train_bench.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(catalog.WORKLOADS),
                        help="comma-separated (default: all): " + ", ".join(catalog.WORKLOADS))
    parser.add_argument("--allocators", default=",".join(catalog.ALLOCATORS),
                        help="comma-separated (default: " + ",".join(catalog.ALLOCATORS) + "): "
                        + ", ".join(catalog.KNOWN_ALLOCATORS))
    parser.add_argument("--steps", type=int, help="steps per run, warm-up included "
                        "(default: the workload's, 80 for training and 12 rounds for generation)")
    parser.add_argument("--warmup", type=int, help="leading steps left out of median and p90 "
                        "(default: the workload's, 10 for training and 2 for generation)")
    parser.add_argument("--seed", type=int, default=0, help="seed of shapes, weights and data (default 0)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each workload under each allocator, the order of the allocators "
                        "rotated each time; the table adds one row per allocator over all runs (each "
                        "step the geometric mean of its runs). For loops bound by the host, whose "
                        "processes differ by 10-20%% whatever the allocator (default 1)")
    parser.add_argument("--memory-cap-gib", type=float, metavar="GIB",
                        help="cap every allocator at this much device memory (torch.cuda."
                             "set_per_process_memory_fraction, which use() passes to tidepool): a GPU "
                             "that size; a run whose allocation fails reports the error")
    parser.add_argument("--untimed-run-steps", type=int, default=report.FIRST_STEPS, metavar="N",
                        help="before each workload's timed runs, one run of N steps under PyTorch's default "
                        "allocator whose result is dropped, so that no allocator's first run pays for a "
                        "machine's cold start; it meets the shapes of the timed runs' first N steps "
                        f"(default {report.FIRST_STEPS}, the first-steps window; 0: none)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run before it is killed (300)")
    parser.add_argument("--nvml-interval-ms", type=float, default=5, help="NVML sampling period (5 ms)")
    parser.add_argument("--tidepool-option", action="append", default=[], metavar="NAME=VALUE",
                        help="a tidepool pool option for the tidepool runs (tidepool.set_pool_options; "
                        "repeatable), e.g. growth_slack=0.05; VALUE: an integer, a number, true, false or none")
    parser.add_argument("--persistent-optimizer-state", action="store_true",
                        help="tidepool runs make the optimizer's state persistent "
                             "(tidepool.torch.persistent_optimizer_state): placed apart from scratch")
    parser.add_argument("--record", action="store_true",
                        help="tidepool runs record every allocation and free to LOG_DIR/train-bench/"
                             "WORKLOAD.tidepool.csv.gz (TIDEPOOL_RECORD)")
    parser.add_argument("--profile", action="store_true",
                        help="each run's steps under cProfile: LOG_DIR/train-bench/WORKLOAD.ALLOCATOR[.runN].prof "
                             "(pstats) and the 30 functions of most own time at the end of its log. The "
                             "profiler slows Python: compare the allocators' profiles with each other, "
                             "not their step times with unprofiled runs'")
    parser.add_argument("--log-dir", help="where the JSON lines and logs go (default: $LOG_DIR, $OUT, "
                        "else gpu-logs/ in the repository)")
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one run, in this process
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)  # the worker's profile file (--profile)
    args = parser.parse_args(argv)
    try:
        args.workloads = catalog.parse_names(args.workloads, catalog.WORKLOADS, "workload")
        args.allocators = catalog.parse_names(args.allocators, catalog.KNOWN_ALLOCATORS, "allocator")
    except ValueError as e:
        parser.error(str(e))
    try:
        args.tidepool_options = dict(parse_option(o) for o in args.tidepool_option)
    except ValueError as e:
        parser.error(str(e))
    for name in ("steps", "warmup"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "steps" else 0):
            parser.error(f"--{name} must be at least {1 if name == 'steps' else 0}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.untimed_run_steps < 0 or args.untimed_run_steps == 1:
        parser.error("--untimed-run-steps must be 0 (none) or at least 2 (a step timed after a warm-up step)")
    if args.memory_cap_gib is not None and args.memory_cap_gib <= 0:
        parser.error("--memory-cap-gib must be positive")
    if args.timeout <= 0 or args.nvml_interval_ms <= 0:
        parser.error("--timeout and --nvml-interval-ms must be positive")
    if args.worker and (len(args.workloads) != 1 or len(args.allocators) != 1):
        parser.error("--worker runs one workload under one allocator")
    return args


def parse_option(text):
    """("name", value) of a NAME=VALUE flag; VALUE an integer, a number, true, false or none."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name.isidentifier() or not raw:
        raise ValueError(f"--tidepool-option {text!r}: expected NAME=VALUE")
    words = {"true": True, "false": False, "none": None}
    if raw.lower() in words:
        return name, words[raw.lower()]
    for kind in (int, float):
        try:
            return name, kind(raw)
        except ValueError:
            pass
    raise ValueError(f"--tidepool-option {text!r}: VALUE must be an integer, a number, true, false or none")


def steps_of(spec, args):
    """(steps, warmup) of a run: the flags where given, else the workload's own."""
    steps = args.steps if args.steps is not None else spec.steps
    warmup = args.warmup if args.warmup is not None else min(spec.warmup, steps - 1)
    if warmup >= steps:
        raise ValueError(f"{spec.name}: a warm-up of {warmup} leaves none of {steps} steps to time")
    return steps, warmup


# ---- worker: one workload under one allocator, in this process ----

def _emit(result):
    sys.stdout.flush()
    sys.stdout.write(json.dumps(result) + "\n")  # one write: the launcher reads the last such line
    sys.stdout.flush()


def _torch_figures(torch):
    stats = torch.cuda.memory_stats()
    figures = {"peak_in_use_bytes": stats.get("allocated_bytes.all.peak"),
               "peak_held_bytes": stats.get("reserved_bytes.all.peak"),
               "peak_requested_bytes": stats.get("requested_bytes.all.peak"),
               "segments_allocated": stats.get("segment.all.allocated"),
               "num_device_alloc": stats.get("num_device_alloc"),
               "num_device_free": stats.get("num_device_free"),
               "num_alloc_retries": stats.get("num_alloc_retries"),
               "num_ooms": stats.get("num_ooms")}
    if figures["num_device_alloc"] is not None and figures["num_device_free"] is not None:
        # cudaMalloc / cuMemMap and cudaFree / cuMemUnmap (PyTorch counts no other driver call)
        figures["driver_calls"] = figures["num_device_alloc"] + figures["num_device_free"]
    try:
        snapshot = torch.cuda.memory._snapshot()
    except RuntimeError:  # the cudaMallocAsync backend keeps no snapshot
        return figures
    settings = snapshot.get("allocator_settings") or {}
    if "expandable_segments" in settings:
        figures["expandable_segments"] = bool(settings["expandable_segments"])
    elif snapshot.get("segments") and "is_expandable" in snapshot["segments"][0]:
        figures["expandable_segments"] = any(s.get("is_expandable") for s in snapshot["segments"])
    return figures


def _tidepool_figures(tidepool, device):
    s = tidepool.stats(device)
    if s.allocations == 0:
        raise RuntimeError("tidepool made no allocation: PyTorch's allocations did not reach it")
    return {"peak_in_use_bytes": s.peak_in_use_bytes, "peak_held_bytes": s.peak_mapped_bytes,
            "peak_requested_bytes": s.peak_requested_bytes, "mapped_end_bytes": s.mapped_bytes,
            "reserved_address_bytes": s.reserved_address_bytes, "allocations": s.allocations,
            "out_of_memory_recoveries": s.out_of_memory_recoveries, "released_bytes": s.released_bytes,
            "thread_caches_at_end": s.thread_caches,
            "driver_calls": s.driver_calls, "driver_ms": s.driver_microseconds / 1000.0,
            "waits": s.waits, "wait_ms": s.wait_microseconds / 1000.0,
            "tidepool_version": tidepool.version(), "tidepool_library": tidepool.library_path(),
            "tidepool_options": tidepool.get_pool_options(), "recording_path": tidepool.recording_path()}


class _StepSampler:
    """Called after each step (workloads.run_steps' after_step): the allocator's driver calls so far
    and what it holds at the step's end, so that the report can say whether a long run settles (no
    driver call and no growth of held memory once the warm-up is over) rather than only what its
    peaks were."""

    def __init__(self, read):
        self._read = read  # () -> (driver calls so far, bytes held now)
        self.figures = {"step_driver_calls": [], "step_held_bytes": []}

    def __call__(self, _step):
        calls, held = self._read()
        self.figures["step_driver_calls"].append(calls)
        self.figures["step_held_bytes"].append(held)


def _step_sampler(torch, tidepool, device, allocator):
    """A _StepSampler for the run's allocator; None for one PyTorch keeps no figures of (a pluggable
    allocator). PyTorch counts cudaMalloc / cuMemMap and cudaFree / cuMemUnmap, tidepool every
    driver call (as in the table's driver-calls column)."""
    if tidepool is not None:
        def read():
            s = tidepool.stats(device)
            return s.driver_calls, s.mapped_bytes
        return _StepSampler(read)
    if allocator == catalog.PLUGGABLE_ASYNC:
        return None

    def read():
        stats = torch.cuda.memory_stats(device)
        calls = stats.get("num_device_alloc", 0) + stats.get("num_device_free", 0)
        return calls, stats.get("reserved_bytes.all.current", 0)
    return _StepSampler(read)


def _versions(spec):
    versions = {"python": sys.version.split()[0]}
    for name in ("torch",) + tuple(spec.modules):
        module = sys.modules.get(name)
        versions[name] = getattr(module, "__version__", None) if module else None
    return versions


def run_profiled(run, profile_out):
    """run() under cProfile when `profile_out` names a file: the stats go there and the 30
    functions of most own time to stderr (the run's log). Returns what run() returns."""
    if not profile_out:
        return run()
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return run()
    finally:
        profiler.disable()
        profiler.dump_stats(profile_out)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)


def measure(spec, allocator, steps, warmup, seed, nvml_interval_s, tidepool_options, profile_out=None,
            memory_cap_gib=None, persistent_optimizer_state=False):
    """Runs the workload; returns its figures (raises on failure)."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if conf != catalog.alloc_conf(allocator):
        raise RuntimeError(f"PYTORCH_CUDA_ALLOC_CONF={conf!r} does not fit allocator {allocator!r}")
    import torch

    tidepool = None
    if allocator == catalog.RECORDING and not os.environ.get("TIDEPOOL_RECORD"):
        raise RuntimeError(f"allocator {allocator!r} ran without TIDEPOOL_RECORD")
    if catalog.uses_tidepool(allocator):
        import tidepool

        if tidepool_options:
            tidepool.set_pool_options(**tidepool_options)
        tidepool.torch.use()  # before the first CUDA allocation
    if allocator == catalog.PLUGGABLE_ASYNC:
        catalog.use_pluggable_async(torch)
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    for module in spec.modules:
        importlib.import_module(module)  # a missing library fails here, before any GPU work
    import nvml_peak
    import workloads

    torch.cuda.init()
    torch.cuda.synchronize()  # the context exists; nothing is allocated yet
    device = torch.cuda.current_device()
    result = {"device_name": torch.cuda.get_device_name(device), "versions": _versions(spec)}
    if memory_cap_gib is not None:
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = memory_cap_gib * 2**30 / total
        if fraction > 1:
            raise ValueError(f"--memory-cap-gib {memory_cap_gib}: the device has {total / 2**30:.1f} GiB")
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        result["memory_cap_bytes"] = int(memory_cap_gib * 2**30)
    monitor = None
    try:
        monitor = nvml_peak.NvmlPeak(nvml_peak.pci_bus_id_of_current_device(torch), nvml_interval_s)
        monitor.start()
    except Exception as e:  # no pynvml or no NVML: the allocator's own figures still count
        result["nvml_error"] = f"{type(e).__name__}: {e}"
        monitor = None
    shapes = spec.shapes(seed, steps)
    try:
        workload = workloads.build(spec, shapes, seed)
        if persistent_optimizer_state and tidepool is not None and getattr(workload, "optimizer", None) is not None:
            tidepool.torch.persistent_optimizer_state(workload.optimizer)
            result["persistent_optimizer_state"] = True
        cpu_seconds = []
        sampler = _step_sampler(torch, tidepool, device, allocator)
        seconds = run_profiled(lambda: workloads.run_steps(workload, steps, cpu_seconds, sampler), profile_out)
    finally:
        if monitor is not None:
            monitor.stop()
    result.update(report.step_statistics(seconds, warmup))
    result["step_ms"] = [round(s * 1e3, 3) for s in seconds]
    result["step_cpu_ms"] = [round(s * 1e3, 3) for s in cpu_seconds]
    result["median_step_cpu_ms"] = report.percentile(cpu_seconds[warmup:], 50) * 1e3
    result["shapes_digest"] = catalog.shapes_digest(shapes)
    result.update(workload.info())
    if monitor is not None:
        result.update({"nvml_baseline_bytes": monitor.baseline, "nvml_peak_bytes": monitor.peak,
                       "nvml_source": monitor.source, "nvml_samples": monitor.samples})
        if monitor.error:
            result["nvml_error"] = monitor.error
    if sampler is not None:
        result.update(sampler.figures)
    if profile_out:
        result["profile"] = profile_out
    if tidepool is not None:
        result.update(_tidepool_figures(tidepool, device))
        if allocator == catalog.RECORDING and not result["recording_path"]:
            raise RuntimeError("TIDEPOOL_RECORD was set but tidepool was not recording")
    elif allocator != catalog.PLUGGABLE_ASYNC:  # a pluggable allocator has no statistics in PyTorch
        result.update(_torch_figures(torch))
        seen = result.get("expandable_segments")
        if seen is not None and seen != (allocator == "expandable"):
            raise RuntimeError(f"allocator {allocator!r} ran with expandable_segments={seen}")
    if allocator != catalog.PLUGGABLE_ASYNC:
        try:
            result.update(_held_after_release(torch, tidepool, device))
        except RuntimeError as e:  # a backend without these figures: the run's own figures stand
            result["held_after_release_error"] = f"{type(e).__name__}: {e}"[:500]
    return result


def _held_after_release(torch, tidepool, device):
    """What the allocator still holds once its cache is handed back (torch.cuda.empty_cache, which
    under tidepool.torch.use() releases tidepool's pool), with the loop's model, optimizer state and
    whatever else the loop keeps still live: what a program gets back when it sleeps, switches phase
    or shares the GPU. Read after every other figure, so that no peak moves."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    held = tidepool.stats(device).mapped_bytes if tidepool is not None else torch.cuda.memory_reserved(device)
    figures = {"held_after_release_bytes": held, "live_at_release_bytes": torch.cuda.memory_allocated(device)}
    if tidepool is not None:
        # Then tidepool.compact(): the rest of what live tensors pin goes too (their bytes move).
        start = time.perf_counter()
        try:
            returned = tidepool.compact(device)
        except RuntimeError as e:  # refused (alias_free_handles): what release() left still stands
            figures["compact_error"] = f"{type(e).__name__}: {e}"[:500]
            return figures
        figures["compact_seconds"] = time.perf_counter() - start
        figures["compact_returned_bytes"] = returned
        figures["held_after_compact_bytes"] = tidepool.stats(device).mapped_bytes
    return figures


def worker(args):
    spec = catalog.WORKLOADS[args.workloads[0]]
    allocator = args.allocators[0]
    result = {"workload": spec.name, "allocator": allocator, "seed": args.seed}
    try:
        steps, warmup = steps_of(spec, args)
        result.update({"steps": steps, "warmup": warmup})
        result.update(measure(spec, allocator, steps, warmup, args.seed, args.nvml_interval_ms / 1000.0,
                              args.tidepool_options, args.profile_out, args.memory_cap_gib,
                              args.persistent_optimizer_state))
    except Exception as e:
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {e}"[:2000]
    _emit(result)
    return 1 if "error" in result else 0


# ---- launcher: each (workload, allocator) in its own child process ----

def log_dir_of(args):
    # As scripts/gpu.sh: LOG_DIR, else $OUT, else gpu-logs/ in the repository (ignored by git).
    return (args.log_dir or os.environ.get("LOG_DIR") or os.environ.get("OUT")
            or os.path.join(REPO_ROOT, "gpu-logs"))


def run_child(workload, allocator, args, log_path, tag=""):
    """Runs one worker; returns its result (or the record of its failure). `tag` ends the names of
    its recording file (as it ends `log_path`'s), so repeated runs keep theirs apart."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--workloads", workload,
               "--allocators", allocator, "--seed", str(args.seed),
               "--nvml-interval-ms", str(args.nvml_interval_ms)]
    for name in ("steps", "warmup"):
        if getattr(args, name) is not None:
            command += [f"--{name}", str(getattr(args, name))]
    for option in args.tidepool_option:
        command += ["--tidepool-option", option]
    if args.persistent_optimizer_state:
        command.append("--persistent-optimizer-state")
    if args.memory_cap_gib is not None:
        command += ["--memory-cap-gib", repr(args.memory_cap_gib)]
    if args.profile:
        command += ["--profile-out", os.path.join(os.path.dirname(log_path), f"{workload}.{allocator}{tag}.prof")]
    record = None
    if allocator == catalog.RECORDING or (args.record and catalog.uses_tidepool(allocator)):
        record = os.path.join(os.path.dirname(log_path), f"{workload}.{allocator}{tag}.csv.gz")
    env = catalog.child_environment(os.environ, allocator, PYTHON_ROOT, record=record)
    result = report.run_child(command, env, log_path, args.timeout, workload, allocator)
    if "TIDEPOOL_RECORD" in env:
        result["recording"] = env["TIDEPOOL_RECORD"]
        if os.path.exists(env["TIDEPOOL_RECORD"]):
            result["recording_file_bytes"] = os.path.getsize(env["TIDEPOOL_RECORD"])
    return result


def launch(args):
    logs = log_dir_of(args)
    run_logs = os.path.join(logs, "train-bench")
    os.makedirs(run_logs, exist_ok=True)
    jsonl_path = os.path.join(logs, "train-bench.jsonl")
    print(f"train_bench: {len(args.workloads)} workload(s) x {len(args.allocators)} allocator(s), "
          f"python {sys.executable}, TIDEPOOL_LIBRARY={os.environ.get('TIDEPOOL_LIBRARY', '(unset)')}, "
          f"results in {jsonl_path}", flush=True)
    results = []
    with open(jsonl_path, "w") as jsonl:
        for workload in args.workloads:
            if args.untimed_run_steps:
                untimed_run(workload, args, run_logs)
            rows = []
            for repeat in range(args.repeats):
                for allocator in report.run_order(args.allocators, repeat):
                    tag = f".run{repeat + 1}" if args.repeats > 1 else ""
                    start = time.monotonic()
                    log_path = os.path.join(run_logs, f"{workload}.{allocator}{tag}.log")
                    result = run_child(workload, allocator, args, log_path, tag)
                    if args.repeats > 1:
                        result["run"] = repeat + 1
                    jsonl.write(json.dumps(result) + "\n")
                    jsonl.flush()
                    rows.append(result)
                    print(f"  {workload} / {allocator}{tag}: {time.monotonic() - start:.1f} s, "
                          f"{report.outcome(result)}", flush=True)
            print(report.table(rows) + "\n", flush=True)
            if args.repeats > 1:
                rows = combined_rows(workload, rows, args.allocators)
                for row in rows:
                    jsonl.write(json.dumps(row) + "\n")
                print(f"=== {workload} over {args.repeats} runs (each step the geometric mean of its runs; "
                      "memory: the run that held most)", flush=True)
                print(report.table(rows) + "\n", flush=True)
            results.extend(rows)
    if len(args.workloads) > 1:
        print("=== every workload (vs best: median step / the lower of PyTorch default and expandable; "
              "paired: the median of step-by-step ratios to that run)")
        print(report.table(results), flush=True)
    return 1 if any("error" in r for r in results) else 0


def untimed_run(workload, args, run_logs):
    """One short run of `workload` under PyTorch's default allocator, its result dropped (its log kept
    as WORKLOAD.untimed.log): what a machine's first process pays for its cold start is paid here,
    by no allocator being measured."""
    start = time.monotonic()
    untimed = argparse.Namespace(**vars(args))
    untimed.steps, untimed.warmup = args.untimed_run_steps, args.untimed_run_steps - 1
    untimed.record = untimed.profile = False
    log_path = os.path.join(run_logs, f"{workload}.untimed.log")
    result = run_child(workload, UNTIMED_ALLOCATOR, untimed, log_path, ".untimed")
    print(f"  {workload} / untimed run ({untimed.steps} steps, {UNTIMED_ALLOCATOR}, dropped): "
          f"{time.monotonic() - start:.1f} s, {report.outcome(result)}", flush=True)


def combined_rows(workload, rows, allocators):
    """Per allocator, its runs of `workload` combined (report.combine_repeats); an allocator all of
    whose runs failed gets a failure naming the last run's error."""
    out = []
    for allocator in allocators:
        runs = [r for r in rows if r["allocator"] == allocator]
        try:
            combined = report.combine_repeats(runs)
        except ValueError as e:  # runs that took different shapes: nothing to pair step by step
            combined = {"workload": workload, "allocator": allocator, "error": str(e)}
        if combined is None:
            combined = {"workload": workload, "allocator": allocator,
                        "error": f"all {len(runs)} runs failed; the last: {runs[-1].get('error')}"}
        out.append(combined)
    return out


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for spec in catalog.WORKLOADS.values():
            print(f"{spec.name:<18} {spec.steps:>3} steps ({spec.warmup} warm-up)  {spec.description}")
        return 0
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
