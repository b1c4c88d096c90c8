"""The CuPy program benchmark's launcher side (bench/gpu/cupy), which runs without CuPy or a GPU:
seeded schedules, name parsing, and the table built from result lines."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

CUPY_BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu", "cupy")
sys.path.insert(0, os.path.abspath(CUPY_BENCH))

import cupy_catalog as catalog  # noqa: E402


@pytest.mark.parametrize("name", sorted(catalog.PROGRAMS))
def test_schedules_are_seeded_and_change_shape(name):
    program = catalog.PROGRAMS[name]
    shapes = program.shapes(0, program.steps)
    assert len(shapes) == program.steps
    assert shapes == program.shapes(0, program.steps)  # the same program under every allocator
    assert shapes != program.shapes(1, program.steps)
    assert shapes[:10] == program.shapes(0, 10)  # more steps extend the same schedule
    assert len(set(shapes)) >= 6  # the point: shapes that change while the program runs
    assert all(all(isinstance(x, int) and x > 0 for x in s) for s in shapes)


def test_regrid_keeps_a_grid_for_its_period_and_fits_the_budget():
    program = catalog.PROGRAMS["spectral-regrid"]
    p = program.params
    shapes = program.shapes(3, 40)
    for start in range(0, 40, p["every"]):
        assert len(set(shapes[start:start + p["every"]])) == 1
    for members, n in shapes:
        assert n % p["multiple"] == 0 and p["min_n"] <= n <= p["max_n"]
        assert members == max(1, p["point_budget"] // (n * n))


def test_kmeans_and_linalg_fit_their_budgets():
    kmeans = catalog.PROGRAMS["kmeans-vary"]
    for points, dims, clusters in kmeans.shapes(0, 60):
        assert points * clusters <= kmeans.params["distance_budget"] and points <= kmeans.params["max_points"]
        assert dims in kmeans.params["dims"] and clusters in kmeans.params["clusters"]
    linalg = catalog.PROGRAMS["linalg-batch"]
    for batch, n in linalg.shapes(0, 60):
        assert n % 64 == 0 and batch * n * n <= linalg.params["element_budget"]


def test_names_are_checked():
    import cupy_bench

    args = cupy_bench.parse_args(["--programs", "kmeans-vary, linalg-batch,kmeans-vary", "--allocators", "tidepool"])
    assert args.programs == ["kmeans-vary", "linalg-batch"] and args.allocators == ["tidepool"]
    with pytest.raises(ValueError, match="unknown program"):
        cupy_bench.parse_args(["--programs", "kmeans"])
    with pytest.raises(SystemExit):
        cupy_bench.parse_args(["--steps", "3"])  # no step left after the warm-up


def test_the_launcher_lists_programs_without_cupy():
    out = subprocess.run([sys.executable, os.path.join(CUPY_BENCH, "cupy_bench.py"), "--list"],
                         capture_output=True, text=True, check=True)
    assert [line.split(":")[0] for line in out.stdout.splitlines()] == list(catalog.PROGRAMS)
    probe = ("import sys; sys.argv=['x']; sys.path.insert(0, sys.argv[0]); "
             f"sys.path.insert(0, {os.path.abspath(CUPY_BENCH)!r}); import cupy_bench; "
             "print('cupy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_table_compares_each_run_with_cupys_pool_of_the_same_repeat():
    import cupy_bench

    base = {"workload": "kmeans-vary", "repeat": 0, "warmup": 1, "shapes_digest": "d", "p90_step_ms": 1.0,
            "first_steps_s": 0.1, "held_after_release_bytes": 1 << 30}
    runs = [dict(base, allocator="cupy", median_step_ms=10.0, step_ms=[5, 10, 10, 10], peak_held_bytes=3 << 30),
            dict(base, allocator="tidepool", median_step_ms=12.0, step_ms=[5, 12, 12, 12], peak_held_bytes=2 << 30,
                 peak_requested_bytes=2 << 30, driver_calls=7, held_after_compact_bytes=1 << 29),
            {"workload": "kmeans-vary", "allocator": "async", "repeat": 0, "error": "boom"}]
    text = cupy_bench.table(runs)
    rows = {line.split()[1]: line.split() for line in text.splitlines()[1:]}
    assert rows["cupy"][7] == "1.500" and rows["tidepool"][7] == "1.000"  # held over tidepool's peak requested
    assert rows["tidepool"][-2:] == ["1.200", "1.200"]  # median and paired against CuPy's pool
    assert "FAILED: boom" in text


def test_a_memory_cap_and_tidepool_options_reach_the_children():
    import cupy_bench

    args = cupy_bench.parse_args(["--programs", "spectral-regrid", "--memory-cap-gib", "5.32",
                                  "--tidepool-option", "compact_on_out_of_memory=true"])
    assert cupy_bench.memory_cap_bytes(args) == int(5.32 * (1 << 30))
    assert args.tidepool_options == {"compact_on_out_of_memory": True}
    tide = cupy_bench.worker_command(args, "spectral-regrid", "tidepool")
    cupy = cupy_bench.worker_command(args, "spectral-regrid", "cupy")
    assert tide[tide.index("--memory-cap-gib") + 1] == "5.32" and "--memory-cap-gib" in cupy
    assert tide[tide.index("--tidepool-option") + 1] == "compact_on_out_of_memory=true"
    assert "--tidepool-option" not in cupy  # the options are tidepool's alone
    worker_args = cupy_bench.parse_args(tide[tide.index("--worker"):])
    assert worker_args.worker and worker_args.tidepool_options == args.tidepool_options
    assert cupy_bench.memory_cap_bytes(cupy_bench.parse_args([])) is None


@pytest.mark.parametrize("bad", [["--memory-cap-gib", "0"], ["--memory-cap-gib", "-1"],
                                 ["--tidepool-option", "compact_on_out_of_memory"],
                                 ["--tidepool-option", "growth_slack=fast"]])
def test_a_bad_cap_or_option_is_refused(bad):
    import cupy_bench

    with pytest.raises(SystemExit):
        cupy_bench.parse_args(bad)


def test_untimed_run_steps_must_leave_steps_after_the_warm_up():
    import cupy_bench

    assert cupy_bench.parse_args([]).untimed_run_steps == 10  # the first-steps window
    assert cupy_bench.parse_args(["--untimed-run-steps", "0"]).untimed_run_steps == 0
    assert cupy_bench.parse_args(["--untimed-run-steps", "6"]).untimed_run_steps == 6
    for bad in ("5", "1", "-1"):  # every program's warm-up is 5 steps
        with pytest.raises(SystemExit):
            cupy_bench.parse_args(["--untimed-run-steps", bad])
    args = cupy_bench.parse_args(["--steps", "20"])
    untimed = cupy_bench.worker_command(args, "kmeans-vary", "cupy", steps=10)
    timed = cupy_bench.worker_command(args, "kmeans-vary", "cupy")
    assert untimed[untimed.index("--steps") + 1] == "10" and timed[timed.index("--steps") + 1] == "20"


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None,
                    reason="CuPy is installed: the workers would not fail at its import")
def test_the_launcher_drops_an_untimed_run_before_each_programs_timed_ones(tmp_path):
    # Without CuPy every worker fails at its import, the untimed one too: its log is kept, its result
    # is in neither the table nor the JSON lines.
    run = subprocess.run([sys.executable, os.path.join(CUPY_BENCH, "cupy_bench.py"), "--programs",
                          "kmeans-vary,linalg-batch", "--allocators", "tidepool", "--untimed-run-steps", "6",
                          "--log-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    for program in ("kmeans-vary", "linalg-batch"):
        untimed = next(i for i, line in enumerate(lines)
                       if line.startswith(f"  {program} / untimed run (6 steps, cupy, dropped): "))
        timed = next(i for i, line in enumerate(lines) if line.startswith(f"  {program} / tidepool (run 1): "))
        assert untimed < timed
        untimed_result = json.loads((tmp_path / f"{program}.untimed.log").read_text().splitlines()[-1])
        assert untimed_result["steps"] == 6 and untimed_result["allocator"] == "cupy"
        assert untimed_result["error"].startswith("ModuleNotFoundError")
    results = [json.loads(line) for line in (tmp_path / "cupy-bench.jsonl").read_text().splitlines()]
    assert [(r["workload"], r["allocator"]) for r in results] == [("kmeans-vary", "tidepool"),
                                                                  ("linalg-batch", "tidepool")]
    # --untimed-run-steps 0: none.
    none = subprocess.run([sys.executable, os.path.join(CUPY_BENCH, "cupy_bench.py"), "--programs", "kmeans-vary",
                           "--allocators", "tidepool", "--untimed-run-steps", "0", "--log-dir",
                           str(tmp_path / "none")], capture_output=True, text=True, timeout=300)
    assert "untimed run" not in none.stdout and not (tmp_path / "none" / "kmeans-vary.untimed.log").exists()
