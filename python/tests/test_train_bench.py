"""The GPU training benchmark's parts that need neither torch nor a GPU (bench/gpu/train/): the
seeded shape schedules, the flags, the child environment, the step statistics, the result line,
the tables, the recorded-history checks, and the launcher going on past a workload that fails."""

import gzip
import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO_ROOT, "bench", "gpu", "train")
if TRAIN not in sys.path:
    sys.path.insert(0, TRAIN)

import catalog  # noqa: E402  (after the path above)
import record_traces  # noqa: E402
import report  # noqa: E402
import train_bench  # noqa: E402

# For the tests that run the real launcher and workers and expect every worker to fail at its
# import of torch: where torch is installed the workloads would run for real, or fail otherwise
# (on the GPU machine scripts/gpu.sh runs them).
WITHOUT_TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                                   reason="torch is installed: the workers would not fail at its import")


def test_no_module_the_launchers_import_needs_torch():
    # The launchers run in a process that never touches the GPU: importing them loads no framework.
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import train_bench, record_traces; "
             "print(sorted(m for m in ('torch', 'transformers', 'timm', 'pynvml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe, TRAIN], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["gpt-vary", "gpt-small-vary", "hf-llama-train", "hf-mixtral-train",
                                  "gpt-compile", "hf-bert-mlm-fp16", "hf-wav2vec2-ctc", "peft-llama-lora"])
def test_token_budget_shapes_are_seeded_and_within_budget(name):
    spec = catalog.WORKLOADS[name]
    p = spec.params
    shapes = spec.shapes(0, 200)
    assert shapes == spec.shapes(0, 200)  # the same for every allocator
    assert shapes != spec.shapes(1, 200)
    assert shapes[:80] == spec.shapes(0, 80)  # more steps extend the same schedule
    lengths = {length for _, length in shapes}
    assert len(lengths) > 30  # a new length nearly every step
    for batch, length in shapes:
        assert length % p["multiple"] == 0 and p["min_len"] <= length <= p["max_len"]
        assert batch == max(1, p["token_budget"] // length)
        if "size" in p:  # positions a model can embed; wav2vec 2.0's convolutions take any length
            assert length <= (p["size"].max_len if name.startswith("gpt") else p["size"].max_position_embeddings)


def test_token_budget_shapes_reject_lengths_off_the_multiple():
    with pytest.raises(ValueError, match="multiples of 64"):
        catalog.token_budget_shapes(None, 3, 4096, 100, 1024, 64)


def test_fixed_batch_and_generate_schedules():
    assert set(catalog.WORKLOADS["gpt-fixed"].shapes(0, 80)) == {(16, 1024)}
    vit = catalog.WORKLOADS["timm-vit-train"].shapes(0, 80)
    assert all(len(s) == 1 and s[0] % 16 == 0 and 32 <= s[0] <= 256 for s in vit)
    assert len(set(vit)) > 5
    generate = catalog.WORKLOADS["hf-llama-generate"]
    rounds = generate.shapes(0, generate.steps)
    for batch, prompt, new in rounds:
        assert batch in generate.params["batches"] and prompt % 32 == 0 and 32 <= prompt <= 512 and new == 64
        assert prompt + new <= generate.params["size"].max_position_embeddings


def test_seq2seq_schedule_draws_source_and_target_lengths_apart():
    spec = catalog.WORKLOADS["hf-t5-train"]
    p = spec.params
    shapes = spec.shapes(0, 80)
    assert shapes == spec.shapes(0, 80) and shapes != spec.shapes(1, 80)
    for batch, source, target in shapes:
        assert source % 64 == 0 and p["min_len"] <= source <= p["max_len"] and batch == p["token_budget"] // source
        assert target % 64 == 0 and p["min_target"] <= target <= p["max_target"]
    assert len({source for _, source, _ in shapes}) > 15 and len({target for _, _, target in shapes}) > 10
    assert len({(s, t) for _, s, t in shapes}) > 60  # the two lengths are not tied to each other


@pytest.mark.parametrize("name", ["gpt-ckpt-accum", "hf-llama-ckpt-accum"])
def test_accumulate_schedule_gives_each_micro_batch_its_own_length(name):
    spec = catalog.WORKLOADS[name]
    p = spec.params
    longest = getattr(p["size"], "max_len", None) or p["size"].max_position_embeddings
    shapes = spec.shapes(0, 80)
    assert shapes[:10] == spec.shapes(0, 10)
    for step in shapes:
        assert len(step) == 2 * p["micro"]
        for batch, length in zip(step[0::2], step[1::2]):
            assert length % 64 == 0 and p["min_len"] <= length <= p["max_len"] <= longest
            assert batch == max(1, p["token_budget"] // length)
    assert sum(len(set(step[1::2])) for step in shapes) > 3 * len(shapes)  # lengths differ within a step


def test_rollout_schedule_fits_prompt_and_completion_to_the_token_budget():
    spec = catalog.WORKLOADS["hf-llama-rl"]
    p = spec.params
    shapes = spec.shapes(0, spec.steps)
    assert shapes == spec.shapes(0, spec.steps) and shapes != spec.shapes(1, spec.steps)
    for batch, prompt, completion in shapes:
        assert prompt % p["multiple"] == 0 and p["min_prompt"] <= prompt <= p["max_prompt"]
        assert completion % p["multiple"] == 0 and p["min_new"] <= completion <= p["max_new"]
        assert batch == p["token_budget"] // (prompt + completion) and batch >= 2  # advantages need a spread
        assert prompt + completion <= p["size"].max_position_embeddings
    assert len({prompt for _, prompt, _ in shapes}) > 10 and len({c for _, _, c in shapes}) >= 4


def test_serve_schedule_batches_continuously_within_the_step_budget():
    spec = catalog.WORKLOADS["hf-llama-serve"]
    p = spec.params
    shapes = spec.shapes(0, spec.steps)
    assert shapes == spec.shapes(0, spec.steps) and shapes != spec.shapes(1, spec.steps)
    assert shapes[:50] == spec.shapes(0, 50)  # more steps extend the same schedule
    assert p["max_tokens"] <= p["size"].max_position_embeddings  # positions are indices in the step
    running_after = 0
    for decodes, *prompts in shapes:
        # Only sequences prefilled earlier decode, each at most once a step; some may have finished.
        assert decodes <= running_after
        assert decodes + len(prompts) <= p["max_seqs"]
        assert decodes + sum(prompts) <= p["max_tokens"]
        for prompt in prompts:
            assert prompt % p["multiple"] == 0 and p["min_prompt"] <= prompt <= p["max_prompt"]
        running_after = decodes + len(prompts)
    assert len(shapes[0]) > 1 and shapes[0][0] == 0  # the first step prefills the waiting requests
    counts = [decodes + sum(prompts) for decodes, *prompts in shapes]
    assert len(set(counts)) > 50  # a new token count nearly every step
    decoding = [decodes for decodes, *_ in shapes[50:]]
    assert max(decoding) - min(decoding) > 10  # the batch grows and shrinks as requests come and go
    assert sum(len(prompts) for _, *prompts in shapes) > 100


def _seeded_shapes(name):
    """Workload `name`'s params and its shapes for seed 0, once they are checked to be seeded: the
    same for the same seed, others for another, and a shorter run a prefix of a longer one."""
    spec = catalog.WORKLOADS[name]
    shapes = spec.shapes(0, spec.steps)
    assert shapes == spec.shapes(0, spec.steps) and shapes != spec.shapes(1, spec.steps)
    assert shapes[:20] == spec.shapes(0, 20)
    return spec.params, shapes


def test_detection_schedule_gives_each_image_its_own_size_and_objects():
    p, shapes = _seeded_shapes("tv-maskrcnn-train")
    images = []
    for side, *rest in shapes:
        assert side in p["min_sides"] and side <= p["max_side"]
        assert len(rest) == 3 * p["batch"]
        for height, width, objects in zip(rest[0::3], rest[1::3], rest[2::3]):
            for extent in (height, width):
                assert extent % p["multiple"] == 0 and p["min_image"] <= extent <= p["max_image"]
            assert 1 <= objects <= p["max_objects"]
            images.append((height, width, objects))
    assert len({side for side, *_ in shapes}) > 5  # the resize side changes from step to step
    assert len(set(images)) > 0.9 * len(images)  # nearly every image has a shape of its own
    assert len({objects for *_, objects in images}) > 20


def test_bucket_schedule_gives_each_step_a_bucket_of_its_own_area_and_aspect_within_the_pixel_budget():
    p, shapes = _seeded_shapes("sd-unet-buckets")
    for batch, height, width in shapes:
        assert height % p["multiple"] == 0 and width % p["multiple"] == 0
        # The area is one of the sides' squares, within the rounding of each side to the multiple.
        assert any(abs(height * width - side * side) <= p["multiple"] * (height + width) for side in p["sides"])
        assert 1 <= batch and (batch * height * width <= p["pixel_budget"] or batch == 1)
        assert (batch + 1) * height * width > p["pixel_budget"]  # as many images as fit
    assert len({(height, width) for _, height, width in shapes}) > 20  # buckets change from step to step
    assert any(height > width for _, height, width in shapes) and any(width > height for _, height, width in shapes)
    one_huge = catalog.bucket_schedule(random.Random(0), 3, {**p, "sides": (4096,), "aspects": (1.0,)})
    assert one_huge == [(1, 4096, 4096)] * 3  # a bucket larger than the budget still makes a step of one image


def test_mesh_schedule_fills_each_step_with_meshes_of_their_own_resolution():
    p, shapes = _seeded_shapes("pyg-meshgraphnet")
    meshes, nodes_per_step = [], []
    for step in shapes:
        assert step and len(step) % 2 == 0
        grids = list(zip(step[0::2], step[1::2]))
        for rows, columns in grids:
            assert p["min_side"] <= rows <= p["max_side"] and p["min_side"] <= columns <= p["max_side"]
        nodes = sum(rows * columns for rows, columns in grids)
        # Within the budget, but for a step whose one mesh is larger than it.
        assert nodes <= p["node_budget"] or len(grids) == 1
        meshes += grids
        nodes_per_step.append(nodes)
    assert len(set(meshes)) > 0.9 * len(meshes)  # nearly every mesh has a resolution of its own
    assert len({len(step) for step in shapes}) > 2  # the number of meshes changes from step to step
    assert len(set(nodes_per_step)) > 0.9 * len(nodes_per_step)  # so does the step's node count
    with_one_large_mesh = catalog.mesh_schedule(random.Random(0), 5, {**p, "node_budget": 10, "min_side": 4,
                                                                      "max_side": 4})
    assert with_one_large_mesh == [(4, 4)] * 5  # a mesh larger than the budget still makes a step


def test_multiscale_schedule_fits_each_step_to_the_pixel_budget():
    spec = catalog.WORKLOADS["timm-resnet-multiscale"]
    p = spec.params
    shapes = spec.shapes(0, 80)
    assert shapes == spec.shapes(0, 80) and shapes != spec.shapes(1, 80)
    assert len({side for _, side in shapes}) > 5  # the image size changes from step to step
    for batch, side in shapes:
        assert side % p["multiple"] == 0 and p["min_side"] <= side <= p["max_side"]
        assert batch == max(1, p["pixel_budget"] // (side * side))
        assert batch * side * side <= p["pixel_budget"]


def test_shapes_digest_tells_schedules_apart():
    spec = catalog.WORKLOADS["gpt-vary"]
    assert catalog.shapes_digest(spec.shapes(0, 80)) == catalog.shapes_digest(spec.shapes(0, 80))
    assert catalog.shapes_digest(spec.shapes(0, 80)) != catalog.shapes_digest(spec.shapes(0, 81))


def test_recorded_workloads_are_in_the_catalog_with_80_steps_or_more():
    for name in catalog.RECORDED:
        assert catalog.WORKLOADS[name].steps >= 80


def test_parse_names():
    assert catalog.parse_names("gpt-vary, gpt-fixed,gpt-vary", catalog.WORKLOADS, "workload") == \
        ["gpt-vary", "gpt-fixed"]
    with pytest.raises(ValueError, match="unknown allocator 'cuda'.*default, expandable, tidepool"):
        catalog.parse_names("default,cuda", catalog.ALLOCATORS, "allocator")
    with pytest.raises(ValueError, match="no workload"):
        catalog.parse_names(" , ", catalog.WORKLOADS, "workload")


def test_flags():
    args = train_bench.parse_args([])
    assert args.workloads == list(catalog.WORKLOADS) and args.allocators == list(catalog.ALLOCATORS)
    assert args.steps is None and not args.worker
    args = train_bench.parse_args(["--workloads", "gpt-fixed", "--allocators", "tidepool", "--steps", "20"])
    assert train_bench.steps_of(catalog.WORKLOADS["gpt-fixed"], args) == (20, 10)
    args = train_bench.parse_args(["--steps", "3"])
    assert train_bench.steps_of(catalog.WORKLOADS["gpt-vary"], args) == (3, 2)  # warm-up shrinks to fit
    assert train_bench.steps_of(catalog.WORKLOADS["hf-llama-generate"], train_bench.parse_args([])) == (12, 2)
    args = train_bench.parse_args(["--steps", "5", "--warmup", "5"])
    with pytest.raises(ValueError, match="leaves none"):
        train_bench.steps_of(catalog.WORKLOADS["gpt-vary"], args)


def test_tidepool_options():
    assert train_bench.parse_option("growth_slack=0.05") == ("growth_slack", 0.05)
    assert train_bench.parse_option(" decay_ms = 0") == ("decay_ms", 0)
    assert train_bench.parse_option("immediate_release=True") == ("immediate_release", True)
    assert train_bench.parse_option("byte_cap=none") == ("byte_cap", None)
    for bad in ("growth_slack", "=1", "growth_slack=", "growth slack=1", "growth_slack=fast"):
        with pytest.raises(ValueError, match="--tidepool-option"):
            train_bench.parse_option(bad)
    args = train_bench.parse_args(["--tidepool-option", "growth_slack=0", "--tidepool-option", "decay_ms=5"])
    assert args.tidepool_options == {"growth_slack": 0, "decay_ms": 5}


@pytest.mark.parametrize("argv", [["--tidepool-option", "x"], ["--workloads", "bert"], ["--allocators", "cuda"],
                                  ["--steps", "0"], ["--timeout", "0"], ["--repeats", "0"], ["--worker"],
                                  ["--memory-cap-gib", "0"], ["--memory-cap-gib", "lots"],
                                  ["--untimed-run-steps", "1"], ["--untimed-run-steps", "-2"],
                                  ["--worker", "--workloads", "gpt-vary,gpt-fixed", "--allocators", "default"]])
def test_bad_flags_are_refused_clearly(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert "train_bench.py: error:" in capsys.readouterr().err


def test_child_environment():
    base = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "TIDEPOOL_LIBRARY": "/x/lib.so",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": "max_split_size_mb:64",
            "TIDEPOOL_DEVICE": "sim", "TIDEPOOL_SIM_MEMORY": "1", "PYTHONPATH": "/a:/repo/python"}
    default = catalog.child_environment(base, "default", "/repo/python")
    assert default["NCCL_NVLS_ENABLE"] == "0" and default["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert default["TIDEPOOL_LIBRARY"] == "/x/lib.so"
    for gone in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TIDEPOOL_DEVICE", "TIDEPOOL_SIM_MEMORY"):
        assert gone not in default
    assert default["PYTHONPATH"] == "/repo/python:/a"
    expandable = catalog.child_environment(base, "expandable", "/repo/python")
    assert expandable["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_ALLOC_CONF" not in expandable
    assert "PYTORCH_CUDA_ALLOC_CONF" not in catalog.child_environment(base, "tidepool", "/repo/python")
    assert base["TIDEPOOL_DEVICE"] == "sim"  # the launcher's own environment is left as it was
    with pytest.raises(ValueError):
        catalog.child_environment(base, "cuda", "/repo/python")


def test_child_environment_records_tidepool_runs_only():
    base = {"TIDEPOOL_RECORD": "/logs/run-%p.csv.gz", "PYTHONPATH": ""}
    assert "TIDEPOOL_RECORD" not in catalog.child_environment(base, "default", "/repo/python")
    assert "TIDEPOOL_RECORD" not in catalog.child_environment(base, "expandable", "/repo/python")
    assert catalog.child_environment(base, "tidepool", "/repo/python")["TIDEPOOL_RECORD"] == "/logs/run-%p.csv.gz"
    chosen = catalog.child_environment(base, "tidepool", "/repo/python", record="/logs/gpt.tidepool.csv.gz")
    assert chosen["TIDEPOOL_RECORD"] == "/logs/gpt.tidepool.csv.gz"
    assert "TIDEPOOL_RECORD" not in catalog.child_environment({}, "tidepool", "/repo/python")


def test_tidepool_plus_record_is_tidepool_recording():
    assert catalog.uses_tidepool("tidepool") and catalog.uses_tidepool("tidepool+record")
    assert not catalog.uses_tidepool("default") and not catalog.uses_tidepool("expandable")
    assert "tidepool+record" not in catalog.ALLOCATORS  # not run unless named
    env = catalog.child_environment({"PYTHONPATH": ""}, "tidepool+record", "/repo/python",
                                    record="/logs/gpt.tidepool+record.csv.gz")
    assert env["TIDEPOOL_RECORD"] == "/logs/gpt.tidepool+record.csv.gz"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env
    with pytest.raises(ValueError, match="needs a file"):
        catalog.child_environment({}, "tidepool+record", "/repo/python")
    args = train_bench.parse_args(["--allocators", "tidepool,tidepool+record"])
    assert args.allocators == ["tidepool", "tidepool+record"]
    assert train_bench.parse_args([]).allocators == list(catalog.ALLOCATORS)


@WITHOUT_TORCH
def test_launcher_gives_tidepool_plus_record_its_own_file(tmp_path):
    # The real launcher and workers (which fail here, without torch, after the environment check):
    # only the tidepool+record run records, to a file of its own in the run logs.
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "LOG_DIR", "TIDEPOOL_RECORD")}
    run = subprocess.run([sys.executable, os.path.join(TRAIN, "train_bench.py"), "--workloads", "gpt-small-vary",
                          "--allocators", "tidepool,tidepool+record", "--steps", "3", "--log-dir", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    plain, recorded = (json.loads(line) for line in (tmp_path / "train-bench.jsonl").read_text().splitlines())
    assert plain["allocator"] == "tidepool" and "recording" not in plain
    assert recorded["allocator"] == "tidepool+record"
    assert recorded["recording"] == str(tmp_path / "train-bench" / "gpt-small-vary.tidepool+record.csv.gz")
    for r in (plain, recorded):
        assert r["error"].startswith("ModuleNotFoundError") and "torch" in r["error"], r


def test_profile_flag_gives_each_run_a_file_of_its_own(tmp_path, monkeypatch):
    commands = []
    monkeypatch.setattr(train_bench.report, "run_child", lambda command, *rest: commands.append(command) or {})
    args = train_bench.parse_args(["--workloads", "gpt-vary", "--allocators", "tidepool", "--profile"])
    train_bench.run_child("gpt-vary", "tidepool", args, str(tmp_path / "gpt-vary.tidepool.run2.log"), ".run2")
    command = commands[-1]
    assert command[command.index("--profile-out") + 1] == str(tmp_path / "gpt-vary.tidepool.run2.prof")
    train_bench.run_child("gpt-vary", "tidepool", train_bench.parse_args(["--workloads", "gpt-vary"]),
                          str(tmp_path / "gpt-vary.tidepool.log"))
    assert "--profile-out" not in commands[-1]


def test_memory_cap_reaches_every_child(tmp_path, monkeypatch):
    commands = []
    monkeypatch.setattr(train_bench.report, "run_child", lambda command, *rest: commands.append(command) or {})
    args = train_bench.parse_args(["--workloads", "gpt-vary", "--memory-cap-gib", "13.5"])
    for allocator in ("default", "tidepool"):
        train_bench.run_child("gpt-vary", allocator, args, str(tmp_path / f"gpt-vary.{allocator}.log"))
        child = train_bench.parse_args(commands[-1][2:])  # the child's own flags, after the script
        assert child.worker and child.memory_cap_gib == 13.5
    train_bench.run_child("gpt-vary", "default", train_bench.parse_args(["--workloads", "gpt-vary"]),
                          str(tmp_path / "x.log"))
    assert "--memory-cap-gib" not in commands[-1]


def test_run_profiled_writes_the_stats_and_returns_the_result(tmp_path, capsys):
    import pstats

    def busy():
        return sum(i * i for i in range(10000))

    path = tmp_path / "run.prof"
    assert train_bench.run_profiled(busy, str(path)) == busy()
    assert any("busy" in name for (_, _, name) in pstats.Stats(str(path)).stats)
    assert "Ordered by: internal time" in capsys.readouterr().err
    assert train_bench.run_profiled(busy, None) == busy()


def test_recording_cost_line():
    plain = _result("tidepool", 100.0, 1100, 1000)
    recorded = _result("tidepool+record", 103.0, 1100, 1000, recording_file_bytes=3 * 2**20)
    assert report.recording_costs([plain, recorded]) == \
        ["  gpt-vary: recording costs +3.0% of the median step (100.0 -> 103.0 ms, 3.0 MiB written)"]
    assert report.table([plain, recorded]).splitlines()[-1] == report.recording_costs([plain, recorded])[0]
    assert report.recording_costs([plain]) == []
    assert report.recording_costs([plain, {"workload": "gpt-vary", "allocator": "tidepool+record",
                                           "error": "x"}]) == []


def test_outcome_names_a_runs_error():
    assert report.outcome({"workload": "gpt-vary", "median_step_ms": 1.0}) == "ok"
    assert report.outcome({"workload": "gpt-vary", "error": "RuntimeError: boom"}) == "error: RuntimeError: boom"


def test_percentile_and_step_statistics():
    assert report.percentile([3, 1, 2], 50) == 2
    assert report.percentile([1, 2, 3, 4], 50) == 2.5
    assert report.percentile(list(range(11)), 90) == pytest.approx(9.0)
    assert report.percentile([1, 2], 90) == pytest.approx(1.9)
    seconds = [1.0] * 2 + [0.1] * 8 + [0.2, 0.4]
    s = report.step_statistics(seconds, warmup=2)
    assert s["median_step_ms"] == pytest.approx(100.0)
    assert s["p90_step_ms"] == pytest.approx(220.0)  # a tenth of the way from 0.2 s to 0.4 s
    assert s["first_steps"] == 10 and s["first_steps_s"] == pytest.approx(2.8)
    assert s["total_s"] == pytest.approx(3.4)
    short = report.step_statistics([0.5, 0.25, 0.25], warmup=1)
    assert short["first_steps"] == 3 and short["first_steps_s"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        report.step_statistics([0.1, 0.1], warmup=2)


def test_parse_result_takes_the_last_result_line():
    out = "\n".join(["warning: {not json", json.dumps({"other": 1}),
                     json.dumps({"workload": "gpt-vary", "allocator": "default", "median_step_ms": 1.0}),
                     "trailing text"])
    assert report.parse_result(out)["median_step_ms"] == 1.0
    assert report.parse_result("Traceback...\nSegmentation fault\n") is None


def test_failed_run_says_why():
    assert "timed out after 300 s" in report.failed_run("w", "a", None, True, 300, "x.log")["error"]
    assert "killed by signal 9" in report.failed_run("w", "a", -9, False, 300, "x.log")["error"]
    assert "exited with status 1" in report.failed_run("w", "a", 1, False, 300, "x.log")["error"]


def _result(allocator, median, held, in_use, nvml=None, **extra):
    r = {"workload": "gpt-vary", "allocator": allocator, "median_step_ms": median, "p90_step_ms": median * 1.1,
         "first_steps_s": 1.5, "peak_held_bytes": held, "peak_in_use_bytes": in_use}
    if nvml is not None:
        r.update({"nvml_baseline_bytes": 500, "nvml_peak_bytes": 500 + nvml})
    r.update(extra)
    return r


def test_table_ratios_and_errors():
    results = [_result("default", 150.0, 1250, 1000, nvml=1300, driver_calls=201),
               _result("expandable", 120.0, 1120, 1000),
               _result("tidepool", 180.0, 1510, 1000, nvml=1600, driver_calls=40754, driver_ms=979.04,
                       median_step_cpu_ms=171.25),
               {"workload": "timm-vit-train", "allocator": "tidepool", "error": "ModuleNotFoundError: timm"}]
    assert report.best_torch_median(results) == 120.0
    assert report.held_ratios(results[0]) == (1.25, 1.3)
    assert report.held_ratios(results[1]) == (1.12, None)
    lines = report.table(results).splitlines()
    assert lines[0].split()[:2] == ["workload", "allocator"]
    default, expandable, tidepool, error = (line.split() for line in lines[1:5])
    assert default[-2] == "1.250" and expandable[-2] == "1.000" and tidepool[-2] == "1.500"  # vs best
    assert tidepool[-1] == "-"  # no step times: no paired ratio
    assert tidepool[4] == "171.2" and default[4] == "-"  # CPU time of a step, where measured
    assert tidepool[7:11] == ["1.510", "1.600", "40754", "979.0"]
    assert default[9:11] == ["201", "-"]
    assert expandable[8:10] == ["-", "-"]
    assert error[:3] == ["timm-vit-train", "tidepool", "error"]
    assert lines[-1] == "  timm-vit-train / tidepool: ModuleNotFoundError: timm"
    # Runs of one workload whose shapes differ are pointed out.
    mixed = [_result("default", 150.0, 1250, 1000, shapes_digest="aa"),
             _result("tidepool", 150.0, 1250, 1000, shapes_digest="bb")]
    assert report.table(mixed).splitlines()[-1] == \
        "  gpt-vary: the allocators ran different shape schedules (aa, bb)"
    assert "different shape" not in report.table(mixed[:1] + [dict(mixed[1], shapes_digest="aa")])
    # No torch run of a workload: nothing to compare with.
    assert report.table([_result("tidepool", 180.0, 1510, 1000)]).splitlines()[1].split()[-2:] == ["-", "-"]


def test_paired_ratio_compares_steps_of_the_same_index():
    # Two clusters of steps (short and long sequences): the medians land on either cluster's edge,
    # while step by step the run is 2% slower on every step.
    reference_steps = [500.0] * 2 + [100.0, 200.0, 100.0, 200.0, 100.0, 200.0]
    run_steps = [600.0] * 2 + [s * 1.02 for s in reference_steps[2:]]
    reference = _result("expandable", 150.0, 1120, 1000, step_ms=reference_steps, warmup=2, shapes_digest="aa")
    run = _result("tidepool", 150.0, 1120, 1000, step_ms=run_steps, warmup=2, shapes_digest="aa")
    assert report.paired_ratio(run, reference) == pytest.approx(1.02)
    assert report.table([reference, run]).splitlines()[2].split()[-1] == "1.020"
    # Not the same schedule, a different warm-up or length: no figure.
    assert report.paired_ratio(dict(run, shapes_digest="bb"), reference) is None
    assert report.paired_ratio(dict(run, warmup=3), reference) is None
    assert report.paired_ratio(dict(run, step_ms=run_steps[:-1]), reference) is None
    assert report.paired_ratio(dict(run, step_ms=None), reference) is None
    # The reference is the better PyTorch run by median step.
    slower = _result("default", 200.0, 1250, 1000, step_ms=[s * 2 for s in reference_steps], warmup=2,
                     shapes_digest="aa")
    assert report.best_torch_run([slower, reference, run]) is reference


def _snapshot(entries):
    return {"segments": [], "device_traces": [entries]}


def _entry(action, addr, size=512):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 1_700_000_000_000_000,
            "frames": []}


def test_history_summary_and_conversion(tmp_path):
    entries = [_entry("segment_alloc", 0x1000, 2 << 20), _entry("alloc", 0x1000), _entry("alloc", 0x1200),
               _entry("free_requested", 0x1000), _entry("free_completed", 0x1000)]
    summary = record_traces.history_summary(_snapshot(entries), max_entries=100)
    assert summary == {"entries": 5, "actions": {"segment_alloc": 1, "alloc": 2, "free_requested": 1,
                                                 "free_completed": 1},
                       "max_entries": 100, "wrapped": False, "first_action": "segment_alloc"}
    assert record_traces.history_summary(_snapshot(entries), max_entries=5)["wrapped"]
    out = tmp_path / "t.csv.gz"
    converted = record_traces.convert(_snapshot(entries), str(out))
    assert converted == {"rows": 3, "dropped_frees": 0, "live_at_end": 1}
    lines = gzip.decompress(out.read_bytes()).decode().splitlines()
    assert lines[0] == "Thread,Time,Action,Pointer,Size,Stream" and len(lines) == 4
    assert record_traces.complete({**summary, **converted})
    # A history that began late: the free of a block it never saw is dropped, and the trace is incomplete.
    late = record_traces.convert(_snapshot([_entry("free_completed", 0x9000)] + entries), str(out))
    assert late["dropped_frees"] == 1
    assert not record_traces.complete({**summary, **late})
    assert not record_traces.complete({**summary, "wrapped": True, **converted})
    assert record_traces.incomplete_reason({**summary, **converted}) is None
    wrapped = record_traces.incomplete_reason({**summary, "wrapped": True, "max_entries": 5_000_000, **converted})
    assert "bound of 5,000,000 entries" in wrapped and "--max-entries (e.g. 10,000,000)" in wrapped
    assert "frees without their allocation" in record_traces.incomplete_reason({**summary, **late})
    assert record_traces.trace_file_name("hf-llama-train") == "hf_llama_train.csv.gz"


def test_history_bound_is_the_flag_else_the_workloads_else_the_default():
    rl, vary = catalog.WORKLOADS["hf-llama-rl"], catalog.WORKLOADS["gpt-vary"]
    assert record_traces.history_bound(vary) == record_traces.DEFAULT_MAX_ENTRIES
    assert record_traces.history_bound(rl) == 12_000_000 > record_traces.DEFAULT_MAX_ENTRIES
    assert record_traces.history_bound(rl, 100) == 100 and record_traces.history_bound(vary, 100) == 100
    assert record_traces.parse_args(["--workloads", "hf-llama-rl"]).max_entries is None


@WITHOUT_TORCH
def test_launcher_reports_a_failed_workload_and_goes_on(tmp_path):
    # Without torch every worker fails: each must print its error line, and the launcher must go on
    # to the next run, write every line to the JSON lines file, and exit 1.
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "LOG_DIR")}
    run = subprocess.run([sys.executable, os.path.join(TRAIN, "train_bench.py"), "--workloads",
                          "gpt-small-vary,timm-vit-train", "--allocators", "default,tidepool", "--steps", "3",
                          "--log-dir", str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    results = [json.loads(line) for line in (tmp_path / "train-bench.jsonl").read_text().splitlines()]
    assert [(r["workload"], r["allocator"]) for r in results] == [
        ("gpt-small-vary", "default"), ("gpt-small-vary", "tidepool"),
        ("timm-vit-train", "default"), ("timm-vit-train", "tidepool")]
    for r in results:
        assert r["error"].startswith("ModuleNotFoundError") and "torch" in r["error"], r
        assert r["steps"] == 3
        log = (tmp_path / "train-bench" / f"{r['workload']}.{r['allocator']}.log").read_text()
        assert "Traceback" in log
    summary = run.stdout.split("=== every workload")[1].splitlines()[2:6]
    assert [line.split()[:3] for line in summary] == [
        [r["workload"], r["allocator"], "error"] for r in results]


def test_launcher_drops_an_untimed_run_before_each_workloads_timed_ones(tmp_path):
    # Without torch every run fails, the untimed one too: its log is kept, its result is in neither
    # the JSON lines nor the tables, and it comes before the workload's timed runs.
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "LOG_DIR", "TIDEPOOL_RECORD")}
    run = subprocess.run([sys.executable, os.path.join(TRAIN, "train_bench.py"), "--workloads",
                          "gpt-small-vary,timm-vit-train", "--allocators", "tidepool", "--steps", "4",
                          "--untimed-run-steps", "3", "--log-dir", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    results = [json.loads(line) for line in (tmp_path / "train-bench.jsonl").read_text().splitlines()]
    assert [(r["workload"], r["allocator"], r["steps"]) for r in results] == [
        ("gpt-small-vary", "tidepool", 4), ("timm-vit-train", "tidepool", 4)]
    lines = run.stdout.splitlines()
    for workload in ("gpt-small-vary", "timm-vit-train"):
        untimed = next(i for i, line in enumerate(lines)
                       if line.startswith(f"  {workload} / untimed run (3 steps, default, dropped): "))
        timed = next(i for i, line in enumerate(lines) if line.startswith(f"  {workload} / tidepool: "))
        assert untimed < timed
        assert "Traceback" in (tmp_path / "train-bench" / f"{workload}.untimed.log").read_text()
    # --untimed-run-steps 0: none.
    run = subprocess.run([sys.executable, os.path.join(TRAIN, "train_bench.py"), "--workloads", "gpt-small-vary",
                          "--allocators", "tidepool", "--steps", "3", "--untimed-run-steps", "0",
                          "--log-dir", str(tmp_path / "none")], env=env, capture_output=True, text=True, timeout=300)
    assert "untimed run" not in run.stdout
    assert not (tmp_path / "none" / "train-bench" / "gpt-small-vary.untimed.log").exists()


def test_run_order_puts_each_allocator_in_every_position_once():
    allocators = ["default", "expandable", "tidepool"]
    orders = [report.run_order(allocators, r) for r in range(3)]
    assert orders == [["default", "expandable", "tidepool"], ["expandable", "tidepool", "default"],
                      ["tidepool", "default", "expandable"]]
    for position in range(3):
        assert sorted(order[position] for order in orders) == sorted(allocators)
    assert report.run_order(allocators, 3) == allocators
    assert report.run_order(["tidepool"], 5) == ["tidepool"]


def _run(allocator, steps, held, in_use=1000, cpu=None, digest="d", warmup=1):
    r = {"workload": "hf-llama-generate", "allocator": allocator, "warmup": warmup, "step_ms": steps,
         "median_step_ms": report.percentile(steps[warmup:], 50), "shapes_digest": digest,
         "peak_held_bytes": held, "peak_in_use_bytes": in_use}
    if cpu is not None:
        r["step_cpu_ms"] = cpu
    return r


def test_combine_repeats_takes_each_steps_geometric_mean_and_the_worst_memory():
    runs = [_run("tidepool", [100.0, 400.0, 100.0, 900.0], 1100, cpu=[1.0, 4.0, 1.0, 9.0]),
            _run("tidepool", [100.0, 100.0, 400.0, 100.0], 1300, cpu=[1.0, 1.0, 4.0, 1.0]),
            {"workload": "hf-llama-generate", "allocator": "tidepool", "error": "killed by signal 9"}]
    c = report.combine_repeats(runs)
    assert c["step_ms"] == [100.0, 200.0, 200.0, 300.0]  # sqrt(400 * 100), sqrt(100 * 400), sqrt(900 * 100)
    assert c["median_step_ms"] == pytest.approx(200.0)  # of the steps after the warm-up step
    assert c["step_cpu_ms"] == [1.0, 2.0, 2.0, 3.0] and c["median_step_cpu_ms"] == pytest.approx(2.0)
    assert c["first_steps_s"] == pytest.approx(0.8)
    assert c["peak_held_bytes"] == 1300  # the run that held most over in use
    assert c["repeats"] == 2 and c["run_medians_ms"] == [400.0, 100.0]
    # A run without CPU times leaves the combination without them; no usable run gives None.
    runs[1].pop("step_cpu_ms")
    c = report.combine_repeats(runs)
    assert "step_cpu_ms" not in c and "median_step_cpu_ms" not in c
    assert report.combine_repeats(runs[2:]) is None
    # Runs over different shapes cannot be paired step by step.
    with pytest.raises(ValueError, match="different shapes"):
        report.combine_repeats([_run("tidepool", [1.0, 2.0], 1), _run("tidepool", [1.0, 2.0], 1, digest="e")])


@WITHOUT_TORCH
def test_launcher_repeats_rotate_the_order_and_keep_every_log(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "LOG_DIR", "TIDEPOOL_RECORD")}
    run = subprocess.run([sys.executable, os.path.join(TRAIN, "train_bench.py"), "--workloads", "gpt-small-vary",
                          "--allocators", "default,tidepool", "--steps", "3", "--repeats", "2",
                          "--log-dir", str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    results = [json.loads(line) for line in (tmp_path / "train-bench.jsonl").read_text().splitlines()]
    assert [(r["allocator"], r.get("run")) for r in results] == [
        ("default", 1), ("tidepool", 1), ("tidepool", 2), ("default", 2),
        ("default", None), ("tidepool", None)]  # the last two: over both runs, which both failed
    for r in results[:4]:
        assert r["error"].startswith("ModuleNotFoundError"), r
        assert (tmp_path / "train-bench" / f"gpt-small-vary.{r['allocator']}.run{r['run']}.log").exists()
    for r in results[4:]:
        assert r["error"].startswith("all 2 runs failed; the last: ModuleNotFoundError"), r
    assert "=== gpt-small-vary over 2 runs" in run.stdout


def test_async_runs_set_their_backend_and_the_pluggable_one_needs_its_library():
    assert catalog.ASYNC not in catalog.ALLOCATORS and catalog.PLUGGABLE_ASYNC not in catalog.ALLOCATORS
    native = catalog.child_environment({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "async", "/repo/python")
    assert native["PYTORCH_CUDA_ALLOC_CONF"] == "backend:cudaMallocAsync"
    with pytest.raises(ValueError, match=catalog.PLUGGABLE_ASYNC_VARIABLE):
        catalog.child_environment({}, "pluggable-async", "/repo/python")
    shim = catalog.child_environment({catalog.PLUGGABLE_ASYNC_VARIABLE: "/b/libshim.so",
                                      "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
                                     "pluggable-async", "/repo/python")
    assert "PYTORCH_CUDA_ALLOC_CONF" not in shim and shim[catalog.PLUGGABLE_ASYNC_VARIABLE] == "/b/libshim.so"
    assert train_bench.parse_args(["--allocators", "async,pluggable-async"]).allocators == ["async", "pluggable-async"]


def test_the_table_says_what_the_pluggable_interface_cost():
    common = {"workload": "hf-llama-rl", "warmup": 1, "shapes_digest": "d"}
    results = [dict(common, allocator="async", median_step_ms=100.0, step_ms=[500.0, 100.0, 100.0, 200.0]),
               dict(common, allocator="pluggable-async", median_step_ms=110.0, step_ms=[9.0, 110.0, 120.0, 200.0])]
    text = report.table(results)
    assert "hf-llama-rl: the pluggable interface costs +10.0% of the median step (100.0 -> 110.0 ms; paired 1.100)" in text
    assert report.interface_costs(results[:1]) == []


def test_the_table_says_how_often_tidepool_waited_for_the_gpu():
    common = {"workload": "hf-llama-ckpt-accum", "warmup": 1, "shapes_digest": "d", "step_ms": [9.0, 10.0, 10.0],
              "median_step_ms": 10.0}
    results = [dict(common, allocator="expandable"),
               dict(common, allocator="tidepool", waits=152, wait_ms=812.25),
               dict(common, allocator="tidepool+record", waits=0, wait_ms=0.0)]
    text = report.table(results)
    assert "hf-llama-ckpt-accum / tidepool: waited for the GPU 152 times (812.2 ms)" in text
    assert report.gpu_waits(results) == ["  hf-llama-ckpt-accum / tidepool: waited for the GPU 152 times (812.2 ms)"]


def test_the_table_says_whether_a_run_settled_after_its_warm_up():
    common = {"workload": "gpt-vary", "warmup": 2, "shapes_digest": "d", "step_ms": [9.0] * 6, "median_step_ms": 9.0}
    gib = 1 << 30
    settled = dict(common, allocator="expandable", step_driver_calls=[40, 52, 52, 52, 52, 52],
                   step_held_bytes=[3 * gib, 4 * gib, 4 * gib, 4 * gib, 4 * gib, 4 * gib])
    drifting = dict(common, allocator="tidepool", step_driver_calls=[30, 41, 45, 45, 60, 75],
                    step_held_bytes=[3 * gib, 4 * gib, 4 * gib, 5 * gib, 4 * gib, 6 * gib])
    lines = report.steady_state([settled, drifting, dict(common, allocator="default"),
                                 dict(settled, allocator="async", error="OOM")])
    assert lines == [
        "  gpt-vary / expandable: after the warm-up (steps 2-5) 0 driver calls, 0 in the last 3 steps; "
        "held at a step's end 4.00 GiB at the warm-up's end, at most 4.00 GiB after (x1.000)",
        "  gpt-vary / tidepool: after the warm-up (steps 2-5) 34 driver calls, 30 in the last 3 steps; "
        "held at a step's end 4.00 GiB at the warm-up's end, at most 6.00 GiB after (x1.500)"]
    assert lines[1] in report.table([settled, drifting])
    # No warm-up, or lists that do not match the run's steps: no line rather than a wrong one.
    assert report.steady_state([dict(drifting, warmup=0), dict(drifting, step_held_bytes=[1, 2])]) == []


def test_step_sampler_reads_the_runs_allocator_after_each_step():
    class Stats:
        driver_calls, mapped_bytes = 7, 1 << 20

    class FakeTidepool:
        @staticmethod
        def stats(device):
            assert device == 0
            return Stats

    class FakeCuda:
        @staticmethod
        def memory_stats(device):
            return {"num_device_alloc": 5, "num_device_free": 2, "reserved_bytes.all.current": 3 << 20}

    class FakeTorch:
        cuda = FakeCuda

    sampler = train_bench._step_sampler(FakeTorch, FakeTidepool, 0, "tidepool")
    sampler(0)
    sampler(1)
    assert sampler.figures == {"step_driver_calls": [7, 7], "step_held_bytes": [1 << 20, 1 << 20]}
    sampler = train_bench._step_sampler(FakeTorch, None, 0, "expandable")
    sampler(0)
    assert sampler.figures == {"step_driver_calls": [7], "step_held_bytes": [3 << 20]}
    assert train_bench._step_sampler(FakeTorch, None, 0, catalog.PLUGGABLE_ASYNC) is None


def test_report_gives_what_each_allocator_held_after_release():
    common = {"workload": "gpt-vary", "median_step_ms": 100.0, "step_ms": [100.0] * 12, "warmup": 2,
              "peak_in_use_bytes": 4 << 30, "peak_held_bytes": 5 << 30}
    results = [dict(common, allocator="default", held_after_release_bytes=3 << 30, live_at_release_bytes=2 << 30),
               dict(common, allocator="tidepool", held_after_release_bytes=(9 << 30) // 4,
                    live_at_release_bytes=2 << 30),
               dict(common, allocator="pluggable-async"),
               {"workload": "gpt-vary", "allocator": "expandable", "error": "OOM"}]
    expected = ["  gpt-vary: held after release default 3.00 GiB, tidepool 2.25 GiB (live 2.00 GiB)"]
    assert report.held_after_release(results) == expected
    assert expected[0] in report.table(results)
    assert report.held_after_release([dict(common, allocator="default")]) == []
    kept_apart = dict(common, allocator="tidepool", held_after_release_bytes=(17 << 30) // 8,
                      live_at_release_bytes=2 << 30, persistent_optimizer_state=True)
    assert report.held_after_release([kept_apart]) == [
        "  gpt-vary: held after release tidepool (optimizer state persistent) 2.12 GiB (live 2.00 GiB)"]
    compacted = dict(common, allocator="tidepool", held_after_release_bytes=(9 << 30) // 4,
                     live_at_release_bytes=2 << 30, held_after_compact_bytes=(33 << 30) // 16, compact_seconds=0.0125)
    assert report.held_after_release([compacted]) == [
        "  gpt-vary: held after release tidepool 2.25 GiB (2.06 GiB after compact(), 12.5 ms) (live 2.00 GiB)"]
    refused = dict(common, allocator="tidepool", held_after_release_bytes=(9 << 30) // 4,
                   live_at_release_bytes=2 << 30, compact_error="TidepoolError: not with alias_free_handles")
    assert report.held_after_release([refused]) == [
        "  gpt-vary: held after release tidepool 2.25 GiB (compact() refused) (live 2.00 GiB)"]


def test_held_after_release_empties_the_cache_first_and_reads_the_allocators_own_figure():
    calls = []

    class Cuda:
        @staticmethod
        def synchronize(device):
            calls.append(("synchronize", device))

        @staticmethod
        def empty_cache():
            calls.append("empty_cache")

        @staticmethod
        def memory_reserved(device):
            return 3 << 30 if "empty_cache" in calls else 9 << 30

        @staticmethod
        def memory_allocated(device):
            return 2 << 30

    fake_torch = type("torch", (), {"cuda": Cuda})
    assert train_bench._held_after_release(fake_torch, None, 0) == {"held_after_release_bytes": 3 << 30,
                                                                    "live_at_release_bytes": 2 << 30}
    assert calls == [("synchronize", 0), "empty_cache"]

    class Tidepool:  # under tidepool, its own pool's mapped bytes, then compact()'s
        mapped = 5 << 29

        @classmethod
        def stats(cls, device):
            return type("stats", (), {"mapped_bytes": cls.mapped})

        @classmethod
        def compact(cls, device):
            calls.append(("compact", device))
            cls.mapped = 2 << 30
            return (5 << 29) - (2 << 30)

    figures = train_bench._held_after_release(fake_torch, Tidepool, 0)
    assert figures["held_after_release_bytes"] == 5 << 29
    assert figures["held_after_compact_bytes"] == 2 << 30
    assert figures["compact_returned_bytes"] == (5 << 29) - (2 << 30)
    assert figures["compact_seconds"] >= 0
    assert calls[-1] == ("compact", 0)

    class AliasingTidepool(Tidepool):  # compact() refuses (alias_free_handles): release's figure stays
        mapped = 5 << 29

        @classmethod
        def compact(cls, device):
            raise RuntimeError("tidepool: compact does not support alias_free_handles (device 0)")

    figures = train_bench._held_after_release(fake_torch, AliasingTidepool, 0)
    assert figures["held_after_release_bytes"] == 5 << 29
    assert figures["live_at_release_bytes"] == 2 << 30
    assert "alias_free_handles" in figures["compact_error"]
    assert "held_after_compact_bytes" not in figures


def test_use_pluggable_async_routes_torch_to_the_named_library(monkeypatch):
    calls = []

    class Memory:
        @staticmethod
        def CUDAPluggableAllocator(path, alloc, free):
            calls.append(("made", path, alloc, free))
            return "shim"

        @staticmethod
        def change_current_allocator(allocator):
            calls.append(("routed", allocator))

    fake_torch = type("torch", (), {"cuda": type("cuda", (), {"memory": Memory})})
    monkeypatch.setenv(catalog.PLUGGABLE_ASYNC_VARIABLE, "/b/libshim.so")
    catalog.use_pluggable_async(fake_torch)
    assert calls == [("made", "/b/libshim.so", "tidepool_bench_async_alloc", "tidepool_bench_async_free"),
                     ("routed", "shim")]
