"""The benchmark's figures and tables, without torch: step-time statistics, the result line a
worker prints, the record of a child that printed none, and the tables the launcher prints."""

import json
import math
import subprocess

FIRST_STEPS = 10  # "time of the first 10 steps": what a short job or a restart pays
GiB = 1 << 30


def percentile(values, q):
    """The q-th percentile (0..100) of `values`, interpolated linearly between order statistics."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def step_statistics(seconds, warmup):
    """Median and p90 of the step times after `warmup` steps (ms), and the time of the first
    FIRST_STEPS steps (s, or of all steps where there are fewer)."""
    if not 0 <= warmup < len(seconds):
        raise ValueError(f"{len(seconds)} steps leave none after a warm-up of {warmup}")
    timed = seconds[warmup:]
    first = seconds[:FIRST_STEPS]
    return {"median_step_ms": percentile(timed, 50) * 1e3, "p90_step_ms": percentile(timed, 90) * 1e3,
            "first_steps": len(first), "first_steps_s": sum(first), "total_s": sum(seconds)}


def run_order(allocators, repeat):
    """The allocators in the order of run `repeat` (0-based): rotated by one place each run, so each
    allocator runs in every position once in len(allocators) runs. The host's state drifts over a
    sequence of processes (the third of three ran 12-22% slower in both orders of a host-bound
    loop, docs/RESULTS.md section 0), so a fixed order would charge that drift to one allocator."""
    shift = repeat % len(allocators)
    return list(allocators[shift:]) + list(allocators[:shift])


def combine_repeats(runs):
    """One result from several runs of one workload under one allocator: each step's time is the
    geometric mean of that step over the runs (the same shapes in each), and the step statistics
    are recomputed from those; memory and driver figures are the run that held most over in use
    (the worst case a user meets). `run_medians_ms` lists each run's own median step. Runs that
    failed are left out; None if none is left."""
    ok = [r for r in runs if "error" not in r and r.get("step_ms")]
    if not ok:
        return None
    lengths = {len(r["step_ms"]) for r in ok}
    digests = {r.get("shapes_digest") for r in ok}
    if len(lengths) != 1 or len(digests) != 1:
        raise ValueError(f"{ok[0]['workload']} / {ok[0]['allocator']}: the runs took different shapes")
    worst = max(ok, key=lambda r: held_ratios(r)[0] or 0.0)
    combined = dict(worst)
    warmup = worst.get("warmup", 0)

    def geometric_means(key):
        series = [r[key] for r in ok if r.get(key) and len(r[key]) == len(ok[0]["step_ms"])]
        if len(series) != len(ok):
            return None
        return [math.exp(sum(math.log(max(v, 1e-9)) for v in column) / len(column)) for column in zip(*series)]

    steps = geometric_means("step_ms")
    combined["step_ms"] = [round(v, 3) for v in steps]
    combined.update(step_statistics([v / 1e3 for v in steps], warmup))
    cpu = geometric_means("step_cpu_ms")
    if cpu is not None:
        combined["step_cpu_ms"] = [round(v, 3) for v in cpu]
        combined["median_step_cpu_ms"] = percentile(cpu[warmup:], 50)
    else:
        combined.pop("step_cpu_ms", None)
        combined.pop("median_step_cpu_ms", None)
    combined["repeats"] = len(ok)
    combined["run_medians_ms"] = [r["median_step_ms"] for r in ok]
    return combined


def parse_result(stdout):
    """The result a worker printed: the last line of `stdout` that is a JSON object with a
    "workload" key (libraries may print other lines before it). None if there is none."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "workload" in value:
            return value
    return None


def failed_run(workload, allocator, returncode, timed_out, timeout_s, log_path):
    """The record of a child that printed no result (killed at the timeout, crashed, killed for memory)."""
    if timed_out:
        why = f"timed out after {timeout_s:g} s"
    elif returncode is not None and returncode < 0:
        why = f"killed by signal {-returncode}"
    else:
        why = f"exited with status {returncode}"
    return {"workload": workload, "allocator": allocator, "error": f"{why}, no result (log: {log_path})"}


def held_ratios(result):
    """(own, nvml): peak held / peak in use by the allocator's own count, and NVML's peak over
    the baseline / the same peak in use. None where a figure is missing."""
    in_use = result.get("peak_in_use_bytes")
    if not in_use:
        return None, None
    held = result.get("peak_held_bytes")
    own = held / in_use if held is not None else None
    nvml_peak, nvml_base = result.get("nvml_peak_bytes"), result.get("nvml_baseline_bytes")
    nvml = (nvml_peak - nvml_base) / in_use if nvml_peak is not None and nvml_base is not None else None
    return own, nvml


def best_torch_run(results):
    """The run of PyTorch's default or expandable segments with the lower median step (None if
    neither ran)."""
    runs = [r for r in results
            if r.get("allocator") in ("default", "expandable") and r.get("median_step_ms") is not None
            and "error" not in r]
    return min(runs, key=lambda r: r["median_step_ms"]) if runs else None


def best_torch_median(results):
    """The lower median step of PyTorch's default and expandable-segments runs (None if neither ran)."""
    best = best_torch_run(results)
    return best["median_step_ms"] if best else None


def paired_ratio(run, reference):
    """The median over the steps after the warm-up of run's step time over reference's step time of
    the same index. Every run of a workload draws the same shapes step by step (same seed, same
    shapes_digest), so this compares like with like; a loop whose steps fall into two clusters (short
    and long sequences) has a median step that lands between them and moves with either cluster's
    noise. None where the two did not run the same schedule or have no step times."""
    a, b = run.get("step_ms"), reference.get("step_ms")
    warmup = run.get("warmup", 0)
    if (not a or not b or len(a) != len(b) or warmup >= len(a) or warmup != reference.get("warmup", 0)
            or run.get("shapes_digest") != reference.get("shapes_digest")):
        return None
    ratios = [x / y for x, y in zip(a[warmup:], b[warmup:]) if y > 0]
    return percentile(ratios, 50) if ratios else None


COLUMNS = ("workload", "allocator", "median ms", "p90 ms", "cpu ms", "first10 s", "in use GiB",
           "held/use", "NVML/use", "driver calls", "driver ms", "vs best", "paired")


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def _run_pairs(results, first, second):
    """(workload, its run under `first`, its run under `second`) for each workload both ran without
    error, the first with a nonzero median step and the second with one."""
    for workload in sorted({r["workload"] for r in results}):
        runs = {r["allocator"]: r for r in results if r["workload"] == workload and "error" not in r}
        a, b = runs.get(first), runs.get(second)
        if a and b and a.get("median_step_ms") and b.get("median_step_ms") is not None:
            yield workload, a, b


def recording_costs(results):
    """A line per workload run both as `tidepool` and `tidepool+record`: what recording every
    allocation and free cost, median step against median step (issue 12's goal: under 5%)."""
    lines = []
    for workload, plain, recorded in _run_pairs(results, "tidepool", "tidepool+record"):
        a, b = plain["median_step_ms"], recorded["median_step_ms"]
        size = recorded.get("recording_file_bytes")
        written = f", {size / 2**20:.1f} MiB written" if size is not None else ""
        lines.append(f"  {workload}: recording costs {100.0 * (b - a) / a:+.1f}% of the median step "
                     f"({a:.1f} -> {b:.1f} ms{written})")
    return lines


def interface_costs(results):
    """A line per workload run both as `async` and `pluggable-async`: what PyTorch's pluggable-
    allocator interface costs the step (the same cudaMallocAsync both ways), median step against
    median step and step by step (paired_ratio)."""
    lines = []
    for workload, native, pluggable in _run_pairs(results, "async", "pluggable-async"):
        a, b = native["median_step_ms"], pluggable["median_step_ms"]
        paired = paired_ratio(pluggable, native)
        lines.append(f"  {workload}: the pluggable interface costs {100.0 * (b - a) / a:+.1f}% of the median step "
                     f"({a:.1f} -> {b:.1f} ms; paired {_fmt(paired, '.3f')})")
    return lines


def gpu_waits(results):
    """A line per tidepool run that waited for the GPU (an event, a stream or the whole device: its
    out-of-memory path, a handle split for a block from its stream's fresh frees, growth past its
    budget while the GPU ran behind, release): each wait lets the queued work drain before the
    program can queue more, time the driver-call column leaves out."""
    return [f"  {r['workload']} / {r['allocator']}: waited for the GPU {r['waits']} times "
            f"({r.get('wait_ms', 0.0):.1f} ms)"
            for r in results if "error" not in r and r.get("waits")]


def steady_state(results):
    """A line per run that sampled its allocator after each step (train_bench's step sampler): the
    driver calls after the warm-up and in the run's last half, and held memory at a step's end: at
    the warm-up's last step and the most after it. A loop that settles makes no call and holds no
    more once warmed up; one that drifts (a budget that widens, a layout that walks) shows here
    before it shows in a peak."""
    lines = []
    for r in results:
        calls, held = r.get("step_driver_calls"), r.get("step_held_bytes")
        warmup = r.get("warmup", 0)
        if "error" in r or not calls or not held or len(calls) != len(held) or not 0 < warmup < len(calls):
            continue
        half = len(calls) // 2
        after = calls[-1] - calls[warmup - 1]
        last_half = calls[-1] - calls[half - 1] if half > 0 else calls[-1]
        settled, most = held[warmup - 1], max(held[warmup:])
        drift = f" (x{most / settled:.3f})" if settled else ""
        lines.append(f"  {r['workload']} / {r['allocator']}: after the warm-up (steps {warmup}-{len(calls) - 1}) "
                     f"{after} driver calls, {last_half} in the last {len(calls) - half} steps; held at a step's "
                     f"end {settled / GiB:.2f} GiB at the warm-up's end, at most {most / GiB:.2f} GiB after{drift}")
    return lines


def held_after_release(results):
    """A line per workload: what each allocator held after torch.cuda.empty_cache() at the end of
    the run, over what was live then (the model, its optimizer state and what the loop kept); a
    tidepool run that kept the optimizer's state apart (--persistent-optimizer-state) says so."""
    lines = []
    for workload in sorted({r["workload"] for r in results}):
        runs = [r for r in results if r["workload"] == workload and "error" not in r
                and r.get("held_after_release_bytes") is not None]
        if not runs:
            continue
        cells = [f"{r['allocator']}{' (optimizer state persistent)' if r.get('persistent_optimizer_state') else ''} "
                 f"{r['held_after_release_bytes'] / GiB:.2f} GiB"
                 + (f" ({r['held_after_compact_bytes'] / GiB:.2f} GiB after compact(), "
                    f"{r['compact_seconds'] * 1000:.1f} ms)" if r.get("held_after_compact_bytes") is not None else "")
                 + (" (compact() refused)" if r.get("compact_error") else "")
                 for r in runs]
        live = [r["live_at_release_bytes"] for r in runs if r.get("live_at_release_bytes") is not None]
        live_text = f" (live {max(live) / GiB:.2f} GiB)" if live else ""
        lines.append(f"  {workload}: held after release {', '.join(cells)}{live_text}")
    return lines


def table(results):
    """One row per run: step times and the median CPU time of a step (every thread of the process),
    peak in use, held / in use by the allocator's own count and by NVML, driver calls and time
    (PyTorch: cudaMalloc/cuMemMap + cudaFree/cuMemUnmap calls, no time), the median step over the
    better of PyTorch default / expandable of the same workload ("vs best"), and the median of
    step-by-step ratios to that run ("paired", paired_ratio)."""
    best = {}
    for workload in {r["workload"] for r in results}:
        best[workload] = best_torch_run([r for r in results if r["workload"] == workload])
    rows = []
    notes = []
    for r in results:
        if "error" in r:
            rows.append((r["workload"], r["allocator"], "error") + ("",) * (len(COLUMNS) - 3))
            notes.append(f"  {r['workload']} / {r['allocator']}: {r['error']}")
            continue
        own, nvml = held_ratios(r)
        median = r.get("median_step_ms")
        reference = best.get(r["workload"])
        versus = median / reference["median_step_ms"] if median is not None and reference else None
        paired = paired_ratio(r, reference) if reference else None
        in_use = r.get("peak_in_use_bytes")
        rows.append((r["workload"], r["allocator"], _fmt(median, ".1f"), _fmt(r.get("p90_step_ms"), ".1f"),
                     _fmt(r.get("median_step_cpu_ms"), ".1f"), _fmt(r.get("first_steps_s"), ".2f"),
                     _fmt(in_use / GiB if in_use else None, ".2f"),
                     _fmt(own, ".3f"), _fmt(nvml, ".3f"), _fmt(r.get("driver_calls"), "d"),
                     _fmt(r.get("driver_ms"), ".1f"), _fmt(versus, ".3f"), _fmt(paired, ".3f")))
    notes.extend(recording_costs(results))
    notes.extend(interface_costs(results))
    notes.extend(gpu_waits(results))
    notes.extend(steady_state(results))
    notes.extend(held_after_release(results))
    for workload in sorted(best):
        digests = {r.get("shapes_digest") for r in results if r["workload"] == workload and "error" not in r}
        if len(digests) > 1:
            listed = ", ".join(sorted(map(str, digests)))
            notes.append(f"  {workload}: the allocators ran different shape schedules ({listed})")
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(COLUMNS, widths)))]
    for row in rows:
        lines.append("  ".join(v.ljust(w) if i < 2 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(row, widths))).rstrip())
    return "\n".join(lines + notes)


def outcome(result):
    """How a run ended, for the launchers' progress lines: "ok", or "error: " and its error."""
    return "error: " + result["error"] if "error" in result else "ok"


def run_child(command, env, log_path, timeout, workload, allocator):
    """Runs one child process with its output in `log_path` and returns its result line, or a
    failed_run record when it timed out, crashed or printed none."""
    timed_out, returncode = False, None
    with open(log_path, "w") as log:
        try:
            returncode = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            timed_out = True
    with open(log_path, errors="replace") as log:
        result = None if timed_out else parse_result(log.read())
    if result is None:
        result = failed_run(workload, allocator, returncode, timed_out, timeout, log_path)
    return result
