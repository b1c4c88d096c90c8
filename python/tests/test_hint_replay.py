"""bench/analysis/hint_replay.py: the optimizer's state found in a trace as the hint would mark it,
and the replay through the Python package that keeps it apart."""

import os
import random
import subprocess
import sys

ANALYSIS = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "analysis")
sys.path.insert(0, os.path.abspath(ANALYSIS))

import hint_replay  # noqa: E402

MiB = 1 << 20


def diffusion_like_rows(seed, steps=6, weights=256, state=512, base=400):
    """A frozen encoder's huge activations (three alive at once, a new size each step) before a
    trained model's activations and gradients, the optimizer's state made in the first step after
    them: the latent diffusion loop's pattern (docs/RESULTS.md, section 0, "A latent diffusion
    U-Net"). Rows as best_fit_models.read_rows gives them."""
    rng = random.Random(seed)
    rows, sizes = [], {}

    def alloc(name, mib):
        sizes[name] = int(mib * MiB)
        rows.append(("allocate", name, sizes[name]))

    def free(name):
        rows.append(("free", name, sizes[name]))

    for i in range(8):
        alloc(f"w{i}", weights / 8)
    for step in range(steps):
        big = base * rng.uniform(0.9, 1.1)
        for j in range(6):
            alloc(f"e{step}_{j}", big)
            if j >= 2:
                free(f"e{step}_{j - 2}")
        free(f"e{step}_4")
        free(f"e{step}_5")
        for j in range(20):
            alloc(f"x{step}_{j}", 24)
        for j in range(8):
            alloc(f"g{step}_{j}", weights / 8)
        for j in reversed(range(20)):
            free(f"x{step}_{j}")
        if step == 0:
            for j in range(16):
                alloc(f"s{j}", state / 16)
        for j in range(8):
            free(f"g{step}_{j}")
    return rows


def write_trace(path, rows):
    with open(path, "w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for i, (action, pointer, size) in enumerate(rows):
            f.write(f"0,{i},{action},{pointer},{size},0\n")


def test_the_optimizers_state_is_the_largest_burst_of_never_freed_requests_after_the_first_free():
    rows = diffusion_like_rows(0)
    state = hint_replay.optimizer_state_rows(rows)
    assert sorted(rows[t][1] for t in state) == sorted(f"s{j}" for j in range(16))
    # The weights, never freed too, come before the first free: not the state.
    assert all(rows[t][1].startswith("w") for t in hint_replay.never_freed(rows) if t not in state)
    # Two bursts after the first free: the one with more bytes.
    two = [("allocate", "w", MiB), ("free", "w", MiB), ("allocate", "a", 4 * MiB), ("allocate", "b", 4 * MiB)]
    for i in range(hint_replay.BURST_GAP // 2):  # requests that are freed: a gap between the bursts
        two += [("allocate", f"t{i}", MiB), ("free", f"t{i}", MiB)]
    two += [("allocate", "c", 16 * MiB)]
    assert {two[t][1] for t in hint_replay.optimizer_state_rows(two)} == {"c"}
    assert hint_replay.optimizer_state_rows([("allocate", "w", MiB)]) == set()  # no free: no state
    # --rule kept: every never-freed request after the first free, both bursts.
    assert {two[t][1] for t in hint_replay.persistent_rows(two, "kept")} == {"a", "b", "c"}
    assert hint_replay.persistent_rows(two, None) == set()


def test_keeping_the_state_apart_takes_the_diffusion_pattern_near_its_peak_in_use(tmp_path):
    for seed in range(3):
        path = tmp_path / f"diffusion_{seed}.csv"
        write_trace(path, diffusion_like_rows(seed))
        plain, hinted = hint_replay.run_worker(str(path), None), hint_replay.run_worker(str(path), "state")
        assert plain["peak_requested_bytes"] == hinted["peak_requested_bytes"]
        assert (plain["hinted_rows"], hinted["hinted_rows"]) == (0, 16)
        assert hinted["hinted_bytes"] == 512 * MiB
        plain_ratio = plain["peak_mapped_bytes"] / plain["peak_requested_bytes"]
        hinted_ratio = hinted["peak_mapped_bytes"] / hinted["peak_requested_bytes"]
        # The state made in the encoder's holes leaves the next steps' activations too little room.
        assert plain_ratio > 1.05 and hinted_ratio < plain_ratio - 0.05, (seed, plain_ratio, hinted_ratio)


def test_the_command_prints_both_figures(tmp_path):
    path = tmp_path / "diffusion.csv"
    write_trace(path, diffusion_like_rows(0))
    out = subprocess.run([sys.executable, os.path.join(ANALYSIS, "hint_replay.py"), str(path)],
                         capture_output=True, text=True, check=True)
    assert out.stdout.startswith("diffusion.csv: peak held / peak in use 1.")
    assert "with the optimizer's state persistent 1." in out.stdout and "(16 requests, 512 MiB)" in out.stdout
    kept = subprocess.run([sys.executable, os.path.join(ANALYSIS, "hint_replay.py"), "--rule", "kept", str(path)],
                          capture_output=True, text=True, check=True)
    assert "with what is kept after the first free persistent 1." in kept.stdout
    assert "(16 requests, 512 MiB)" in kept.stdout  # the weights come before the first free


def test_near_its_capacity_the_state_kept_apart_needs_no_remapping(tmp_path):
    path = tmp_path / "diffusion.csv"
    write_trace(path, diffusion_like_rows(0))
    out = subprocess.run([sys.executable, os.path.join(ANALYSIS, "hint_replay.py"), "--capacity", "1.02", str(path)],
                         capture_output=True, text=True, check=True)
    assert out.stdout.rstrip().endswith("(on a GPU 1.02x its peak in use)")
    plain_calls, hinted_calls = (int(x) for x in out.stdout.split("driver calls ")[1].split(";")[0].split(", "))
    plain_failed, hinted_failed = (int(x) for x in out.stdout.split("failed allocations ")[1].split(" (")[0].split(", "))
    # As recorded, the encoder's activations find less room at a fiftieth above the peak: handles
    # are made again (and allocations failed before the pool split handles under small blocks
    # while the device fills: 783 calls against 407 since); with the state apart the layout fits.
    assert plain_failed > 0 or plain_calls > hinted_calls
    assert hinted_failed == 0
    held = [float(x.split()[0].rstrip(",")) for x in (out.stdout.split("peak in use ")[1],
                                                      out.stdout.split("persistent ")[1])]
    assert all(1.0 <= h <= 1.02 + 1e-9 for h in held), held  # held within the simulated GPU
    bad = subprocess.run([sys.executable, os.path.join(ANALYSIS, "hint_replay.py"), "--capacity", "0", str(path)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--capacity must be positive" in bad.stderr
