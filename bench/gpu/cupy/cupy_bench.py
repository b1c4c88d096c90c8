"""CuPy programs under CuPy's own pool, cudaMallocAsync (CuPy's MemoryAsyncPool) and tidepool, each
run in a process of its own: what a CuPy or RAPIDS user sees in a long-running program.

    python3 bench/gpu/cupy/cupy_bench.py [--programs spectral-regrid,...] [--allocators cupy,async,tidepool]
        [--steps N] [--repeats R] [--untimed-run-steps N] [--memory-cap-gib G] [--tidepool-option NAME=VALUE ...]
        [--log-dir DIR] [--list]

Per run: median and p90 step time after the warm-up, the first 10 steps, peak held by each
allocator's own count (CuPy's pool: its total bytes, which only grow within a step, read after every
step; the async pool: cudaMemPoolAttrReservedMemHigh; tidepool: peak_mapped_bytes), over the peak
in use of the same program as tidepool counts it (its peak requested bytes: the program's own
requests, the same under every allocator), NVML's peak for the process, and what each holds once
its cache is handed back with the program's state live (CuPy's free_all_blocks, the async pool's
trim, tidepool.release_cached_memory(), then tidepool.compact()). tidepool's run needs
TIDEPOOL_LIBRARY (or an installed package). Each child gets a CuPy kernel cache of its own, so every
allocator's first steps compile the same kernels. Before each program's timed runs, one untimed run
of `--untimed-run-steps N` steps (10, the first-steps window; 0: none) under CuPy's pool is
dropped, its log kept as PROGRAM.untimed.log: what a machine pays the first time it runs a
program's shapes falls on no allocator measured, as in bench/gpu/train/train_bench.py.

`--memory-cap-gib G` runs every allocator as on a GPU of G GiB: CuPy's pool under its
`set_limit(size=...)`, tidepool under `tidepool.set_byte_cap` (what `tidepool replay --capacity`
simulates), the async pool under its `set_limit` too, which bounds what it hands out, not what it
reserves (on an H100 it reserved 5.78 GiB under 5.32: its rows are not a smaller GPU's); a run that
fails there is reported with the step it failed in, a finding, not a fault of the benchmark. `--tidepool-option NAME=VALUE` sets a pool option for the tidepool
runs (tidepool.set_pool_options), e.g. compact_on_out_of_memory=true.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TRAIN = os.path.join(os.path.dirname(HERE), "train")
for path in (HERE, TRAIN, os.path.join(REPO_ROOT, "python")):
    if path not in sys.path:
        sys.path.insert(0, path)

import cupy_catalog as catalog  # noqa: E402  (after the paths above)
import report  # noqa: E402  (bench/gpu/train/report.py: step statistics, child runs)
from catalog import parse_names, shapes_digest  # noqa: E402  (bench/gpu/train/catalog.py)
from train_bench import parse_option  # noqa: E402  (its --tidepool-option's NAME=VALUE)

GiB = 1 << 30
UNTIMED_ALLOCATOR = "cupy"  # CuPy's own pool runs the untimed run


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default=",".join(catalog.PROGRAMS))
    parser.add_argument("--allocators", default=",".join(catalog.ALLOCATORS))
    parser.add_argument("--steps", type=int, help="steps per run (default: each program's own)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1, help="runs per program and allocator, rotated")
    parser.add_argument("--untimed-run-steps", type=int, default=report.FIRST_STEPS, metavar="N",
                        help="before each program's timed runs, one run of N steps under CuPy's pool whose "
                        f"result is dropped (default {report.FIRST_STEPS}, the first-steps window; 0: none)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per child")
    parser.add_argument("--memory-cap-gib", type=float, metavar="GIB",
                        help="every allocator as on a GPU of this many GiB (a run that fails there is reported)")
    parser.add_argument("--tidepool-option", action="append", default=[], metavar="NAME=VALUE",
                        help="a pool option for the tidepool runs (tidepool.set_pool_options; repeatable)")
    parser.add_argument("--log-dir", default="cupy-bench-logs")
    parser.add_argument("--list", action="store_true", help="list the programs and exit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.programs = parse_names(args.programs, catalog.PROGRAMS, "program")
    args.allocators = parse_names(args.allocators, catalog.ALLOCATORS, "allocator")
    if args.steps is not None and args.steps <= max(catalog.PROGRAMS[p].warmup for p in args.programs):
        parser.error("--steps must leave steps after the warm-up")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    warmup = max(catalog.PROGRAMS[p].warmup for p in args.programs)
    if args.untimed_run_steps != 0 and args.untimed_run_steps <= warmup:
        parser.error(f"--untimed-run-steps must be 0 (none) or more than the warm-up ({warmup})")
    if args.memory_cap_gib is not None and not args.memory_cap_gib > 0:
        parser.error("--memory-cap-gib must be positive")
    try:
        args.tidepool_options = dict(parse_option(o) for o in args.tidepool_option)
    except ValueError as e:
        parser.error(str(e))
    return args


def memory_cap_bytes(args):
    """--memory-cap-gib in bytes (None: no cap)."""
    return None if args.memory_cap_gib is None else int(args.memory_cap_gib * GiB)


# --- the child: one program under one allocator ---

class _Routed:
    """An installed allocator's readings: held bytes now, peak held (None: the largest reading after
    a step, for CuPy's pool, which only grows within a step), live bytes now, and how its cache is
    handed back (`release`); `tidepool` is the package where the allocator is tidepool."""

    def __init__(self, held, peak, live, release, tidepool=None):
        self.held, self.peak, self.live, self.release, self.tidepool = held, peak, live, release, tidepool


def _route(cupy, allocator, device_id, cap=None, tidepool_options=None):
    """Installs `allocator` for CuPy on `device_id`, under `cap` bytes where given, with
    `tidepool_options` for tidepool; returns its _Routed readings."""
    if allocator == "cupy":
        pool = cupy.get_default_memory_pool()
        if cap is not None:
            pool.set_limit(size=cap)
        return _Routed(pool.total_bytes, None, pool.used_bytes, pool.free_all_blocks)
    if allocator == "async":
        async_pool = cupy.cuda.MemoryAsyncPool()
        if cap is not None:
            async_pool.set_limit(size=cap)
        cupy.cuda.set_allocator(async_pool.malloc)
        runtime = cupy.cuda.runtime
        handle = runtime.deviceGetMemPool(device_id)

        def attribute(number):
            return lambda: int(runtime.memPoolGetAttribute(handle, number))
        # cudaMemPoolAttrReservedMemCurrent 5, ReservedMemHigh 6, UsedMemCurrent 7 (driver_types.h)
        return _Routed(attribute(5), attribute(6), attribute(7), lambda: runtime.memPoolTrimTo(handle, 0))
    import tidepool

    if tidepool_options:
        tidepool.set_pool_options(**tidepool_options)
    if cap is not None:
        tidepool.set_byte_cap(cap, device_id)
    tidepool.cupy.use()
    return _Routed(lambda: tidepool.stats(device_id).mapped_bytes, lambda: tidepool.stats(device_id).peak_mapped_bytes,
                   lambda: tidepool.stats(device_id).in_use_bytes, tidepool.release_cached_memory, tidepool)


def _pci_bus_id(cupy, device_id):
    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    return f"{props['pciDomainID']:08x}:{props['pciBusID']:02x}:{props['pciDeviceID']:02x}.0"


def run_program(program, allocator, steps, seed, cap=None, tidepool_options=None):
    import cupy

    import nvml_peak
    import programs

    device = cupy.cuda.Device()
    device.synchronize()  # the context exists; nothing is allocated yet
    routed = _route(cupy, allocator, device.id, cap, tidepool_options)
    tidepool = routed.tidepool
    name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"]
    result = {"device_name": name.decode() if isinstance(name, bytes) else str(name), "cupy": cupy.__version__}
    monitor = None
    try:
        monitor = nvml_peak.NvmlPeak(_pci_bus_id(cupy, device.id))
        monitor.start()
    except Exception as e:  # no pynvml or no NVML: the allocator's own figures still count
        result["nvml_error"] = f"{type(e).__name__}: {e}"
        monitor = None
    shapes = program.shapes(seed, steps)
    held_after_step = []
    try:
        work = programs.build(program, shapes, seed)
        seconds = []
        for i in range(steps):
            try:
                seconds.append(programs.timed_step(work, i, device))
            except Exception as e:  # under a cap, the step a run fails in is the finding
                # tidepool's own account of a refused request travels as the cause of CuPy's error
                cause = f" (from {type(e.__cause__).__name__}: {e.__cause__})" if e.__cause__ is not None else ""
                raise RuntimeError(f"step {i + 1} of {steps}: {type(e).__name__}: {e}{cause}") from e
            held_after_step.append(routed.held())
    finally:
        if monitor is not None:
            monitor.stop()
    result.update(report.step_statistics(seconds, program.warmup))
    result["step_ms"] = [round(s * 1e3, 3) for s in seconds]
    result["shapes_digest"] = shapes_digest(shapes)
    result["held_after_step_bytes"] = held_after_step
    result["peak_held_bytes"] = routed.peak() if routed.peak is not None else max(held_after_step)
    result.update(work.info())
    if monitor is not None:
        result.update({"nvml_baseline_bytes": monitor.baseline, "nvml_peak_bytes": monitor.peak,
                       "nvml_source": monitor.source, "nvml_samples": monitor.samples})
    if tidepool is not None:
        s = tidepool.stats(device.id)
        result.update({"peak_in_use_bytes": s.peak_in_use_bytes, "peak_requested_bytes": s.peak_requested_bytes,
                       "driver_calls": s.driver_calls, "driver_ms": s.driver_microseconds / 1e3})
    # The cache handed back with the program's state live (its fields, its last data set).
    device.synchronize()
    routed.release()
    result["live_at_release_bytes"] = routed.live()
    result["held_after_release_bytes"] = routed.held()
    if tidepool is not None:
        tidepool.compact(device.id)
        result["held_after_compact_bytes"] = routed.held()
    del work
    return result


def worker(args):
    program = catalog.PROGRAMS[args.programs[0]]
    allocator = args.allocators[0]
    steps = args.steps or program.steps
    cap = memory_cap_bytes(args)
    result = {"workload": program.name, "allocator": allocator, "seed": args.seed, "steps": steps,
              "warmup": program.warmup}
    if cap is not None:
        result["memory_cap_bytes"] = cap
    if allocator == "tidepool" and args.tidepool_options:
        result["tidepool_options"] = args.tidepool_options
    try:
        result.update(run_program(program, allocator, steps, args.seed, cap, args.tidepool_options))
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"[:2000]
    print(json.dumps(result), flush=True)
    return 0 if "error" not in result else 1


# --- the launcher ---

def child_env(cache_dir):
    env = dict(os.environ)
    env["CUPY_CACHE_DIR"] = cache_dir  # every allocator compiles the same kernels
    env["PYTHONUNBUFFERED"] = "1"
    return env


def worker_command(args, program, allocator, steps=None):
    """The child's command line: one program under one allocator, with the launcher's settings
    (`steps` instead of --steps where given)."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--programs", program,
               "--allocators", allocator, "--seed", str(args.seed)]
    if steps or args.steps:
        command += ["--steps", str(steps or args.steps)]
    if args.memory_cap_gib is not None:
        command += ["--memory-cap-gib", repr(args.memory_cap_gib)]
    if allocator == "tidepool":
        for option in args.tidepool_option:
            command += ["--tidepool-option", option]
    return command


def run_child(args, program, allocator, log_path, steps=None):
    """One child, with a CuPy kernel cache of its own that is removed after it; its result line."""
    cache_dir = tempfile.mkdtemp(prefix="tidepool-cupy-bench-kernels-")
    try:
        return report.run_child(worker_command(args, program, allocator, steps), child_env(cache_dir), log_path,
                                args.timeout, program, allocator)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def untimed_run(args, program):
    """One run of `program` under CuPy's pool for --untimed-run-steps steps, its result dropped (its log
    kept as PROGRAM.untimed.log)."""
    result = run_child(args, program, UNTIMED_ALLOCATOR, os.path.join(args.log_dir, f"{program}.untimed.log"),
                       args.untimed_run_steps)
    print(f"  {program} / untimed run ({args.untimed_run_steps} steps, {UNTIMED_ALLOCATOR}, dropped): "
          f"{report.outcome(result)}", flush=True)


def run_all(args):
    os.makedirs(args.log_dir, exist_ok=True)
    results = []
    for program in args.programs:
        if args.untimed_run_steps:
            untimed_run(args, program)
        for repeat in range(args.repeats):
            for allocator in report.run_order(args.allocators, repeat):
                result = run_child(args, program, allocator,
                                   os.path.join(args.log_dir, f"{program}.{allocator}.{repeat}.log"))
                result["repeat"] = repeat
                results.append(result)
                print(f"  {program} / {allocator} (run {repeat + 1}): {report.outcome(result)}", flush=True)
    return results


def _gib(value):
    return "-" if value is None else f"{value / GiB:.2f}"


def table(results):
    """One row per run: its step times against CuPy's pool in the same repeat, and its memory over
    the program's peak in use (tidepool's count of its requests in that repeat)."""
    lines = []
    header = ("program", "allocator", "run", "median ms", "p90 ms", "first10 s", "peak held GiB", "held/use",
              "NVML GiB", "after release GiB", "driver calls", "vs cupy", "paired")
    lines.append("  ".join(header))
    for r in results:
        if "error" in r:
            lines.append(f"{r['workload']}  {r['allocator']}  {r.get('repeat', 0) + 1}  FAILED: {r['error']}")
            continue
        same = [x for x in results if x["workload"] == r["workload"] and x.get("repeat") == r.get("repeat")
                and "error" not in x]
        cupy_run = next((x for x in same if x["allocator"] == "cupy"), None)
        tide_run = next((x for x in same if x["allocator"] == "tidepool"), None)
        in_use = tide_run["peak_requested_bytes"] if tide_run else None
        ratio = f"{r['peak_held_bytes'] / in_use:.3f}" if in_use else "-"
        nvml = r["nvml_peak_bytes"] - r["nvml_baseline_bytes"] if "nvml_peak_bytes" in r else None
        after = _gib(r["held_after_release_bytes"])
        if "held_after_compact_bytes" in r:
            after += f" ({_gib(r['held_after_compact_bytes'])})"
        vs = f"{r['median_step_ms'] / cupy_run['median_step_ms']:.3f}" if cupy_run else "-"
        paired = report.paired_ratio(r, cupy_run) if cupy_run else None
        lines.append("  ".join((r["workload"], r["allocator"], str(r.get("repeat", 0) + 1),
                                f"{r['median_step_ms']:.1f}", f"{r['p90_step_ms']:.1f}", f"{r['first_steps_s']:.2f}",
                                _gib(r["peak_held_bytes"]), ratio, _gib(nvml), after,
                                str(r.get("driver_calls", "-")), vs, "-" if paired is None else f"{paired:.3f}")))
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for p in catalog.PROGRAMS.values():
            print(f"{p.name}: {p.description} ({p.steps} steps, {p.warmup} warm-up)")
        return 0
    if args.worker:
        return worker(args)
    cap = "" if args.memory_cap_gib is None else f", as on a GPU of {args.memory_cap_gib:g} GiB"
    options = "" if not args.tidepool_options else f", tidepool options {args.tidepool_options}"
    print(f"cupy_bench: {len(args.programs)} program(s) x {len(args.allocators)} allocator(s) x "
          f"{args.repeats} run(s){cap}{options}", flush=True)
    results = run_all(args)
    with open(os.path.join(args.log_dir, "cupy-bench.jsonl"), "w") as out:
        for r in results:
            out.write(json.dumps(r) + "\n")
    print(table(results))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
