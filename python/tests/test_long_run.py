"""bench/synthetic/long_run.py: a recorded loop's setup once and its steps again and again. The steps
start at the first clean step boundary, or where a step keeps only a small tensor into the next
(made again at each repetition); the setup is written once, the steps REPEATS times with rising
times; every free names a live allocation of its size; peak in use is the original's; a trace with
no boundary is refused with a clear message."""

import csv
import gzip
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO_ROOT, "bench", "synthetic", "long_run.py")
HEADER = ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]
MiB = 1 << 20


def _write_trace(path, events):
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        for i, (action, pointer, size) in enumerate(events):
            w.writerow([0, "10:00:%09.6f" % (i * 0.001), action, pointer, size, "0x0"])


def _rows(path):
    with gzip.open(path, "rt", newline="") as f:
        return list(csv.DictReader(f))


def _assert_frees_name_live_allocations(rows):
    """No allocation of a live pointer; every free names a live allocation of its size."""
    live = {}
    for i, r in enumerate(rows, start=2):
        if r["Action"] == "allocate":
            assert r["Pointer"] not in live, f"line {i}: allocation of a live pointer"
            live[r["Pointer"]] = r["Size"]
        else:
            assert live.pop(r["Pointer"], None) == r["Size"], f"line {i}: free of a pointer that is not live"


def _loop_events():
    """Weights made, one step with no optimizer state yet, AdamW's state made in the first step's
    end, then two more steps; a step's activation a and temporary t, and a logging tensor kept from
    the last step to the end."""
    events = [("allocate", "0x1000", 8 * MiB), ("allocate", "0x2000", 8 * MiB)]
    for step in range(3):
        events += [("allocate", "0xa000", 4 * MiB), ("allocate", "0xb000", 2 * MiB), ("free", "0xb000", 2 * MiB),
                   ("free", "0xa000", 4 * MiB)]
        if step == 0:
            events += [("allocate", "0x3000", 16 * MiB)]  # the optimizer's state, made by the first step
    events += [("allocate", "0xc000", MiB)]  # kept to the end by the steps
    return events


def _peak(rows):
    live, peak, now = {}, 0, 0
    for r in rows:
        if r["Action"] == "allocate":
            live[r["Pointer"]] = int(r["Size"])
            now += int(r["Size"])
            peak = max(peak, now)
        else:
            now -= live.pop(r["Pointer"])
    return peak


def test_the_setup_once_and_the_steps_repeated(tmp_path):
    src, out = tmp_path / "loop.csv.gz", tmp_path / "long.csv.gz"
    events = _loop_events()
    _write_trace(src, events)
    result = subprocess.run([sys.executable, SCRIPT, str(src), "4", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # The boundary: after the first step, with the weights and the optimizer's state live.
    assert "steps from event 8 on (9 events), run 4 times; 1 blocks (1.0 MiB)" in result.stderr
    rows = _rows(out)
    assert list(rows[0]) == HEADER
    setup = [(r["Action"], r["Pointer"]) for r in rows[:7]]
    assert setup == [(a, p) for a, p, _ in events[:7]]
    assert sum(1 for r in rows if r["Pointer"] == "0x1000") == 1, "the weights are made once"
    assert sum(1 for r in rows if r["Pointer"] == "0x3000") == 1, "the optimizer's state is made once"
    assert sum(1 for r in rows if r["Pointer"] == "0xa000" and r["Action"] == "allocate") == 1 + 2 * 4
    # The logging tensor the steps leave live is freed before each repetition.
    assert [r["Action"] for r in rows if r["Pointer"] == "0xc000"] == ["allocate", "free"] * 3 + ["allocate"]
    times = [r["Time"] for r in rows]
    assert times == sorted(times), "times rise"
    _assert_frees_name_live_allocations(rows)
    original = _rows(src)
    assert _peak(rows) == _peak(original)


def test_a_trace_with_no_step_boundary_is_refused(tmp_path):
    src, out = tmp_path / "carried.csv.gz", tmp_path / "long.csv.gz"
    # A tensor made first and freed last: something that dies before the end is always live.
    events = [("allocate", "0xa000", MiB), ("allocate", "0x1000", 8 * MiB), ("allocate", "0xb000", MiB),
              ("free", "0xb000", MiB), ("free", "0xa000", MiB)]
    _write_trace(src, events)
    result = subprocess.run([sys.executable, SCRIPT, str(src), "3", str(out)], capture_output=True, text=True)
    assert result.returncode == 1
    assert "carried.csv.gz: no step boundary" in result.stderr
    assert not out.exists()


def _kept_into_the_next_step(kept_size):
    """The optimizer's state made in the first step, and each step keeping a tensor of `kept_size`
    (its loss) until the next one makes its own: no clean boundary follows the state."""
    events = [("allocate", "0x1000", 8 * MiB)]
    for step in range(3):
        events += [("allocate", "0xa000", 4 * MiB), ("free", "0xa000", 4 * MiB),
                   ("allocate", "0xc%03x" % (step + 1), kept_size)]
        if step == 0:
            events += [("allocate", "0x3000", 16 * MiB)]
        else:
            events += [("free", "0xc%03x" % step, kept_size)]
    return events


def test_steps_that_keep_a_small_tensor_into_the_next_start_after_the_state(tmp_path):
    src, out = tmp_path / "kept_loss.csv.gz", tmp_path / "long.csv.gz"
    _write_trace(src, _kept_into_the_next_step(MiB))
    result = subprocess.run([sys.executable, SCRIPT, str(src), "3", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # After the state is made, with the weights, the state and the first step's 1 MiB loss live.
    assert "steps from event 6 on (8 events), run 3 times; 1 blocks (1.0 MiB)" in result.stderr
    rows = _rows(out)
    assert sum(1 for r in rows if r["Pointer"] == "0x3000") == 1, "the optimizer's state is made once"
    # Each repetition frees the last step's loss and makes the kept one again, as the first run had.
    assert [r["Action"] for r in rows if r["Pointer"] == "0xc001"] == ["allocate", "free"] * 3
    assert [r["Action"] for r in rows if r["Pointer"] == "0xc003"] == ["allocate", "free"] * 2 + ["allocate"]
    _assert_frees_name_live_allocations(rows)
    assert _peak(rows) == _peak(_rows(src))


def test_steps_that_keep_a_large_tensor_into_the_next_are_refused(tmp_path):
    src, out = tmp_path / "late_state.csv.gz", tmp_path / "long.csv.gz"
    # The same loop keeping 8 MiB from step to step: a third of the setup is no step boundary, and
    # the only clean ones come before the state, so the steps would make it again.
    _write_trace(src, _kept_into_the_next_step(8 * MiB))
    result = subprocess.run([sys.executable, SCRIPT, str(src), "3", str(out)], capture_output=True, text=True)
    assert result.returncode == 1
    assert "late_state.csv.gz: the steps from event 2 on leave 24.0 MiB live against the setup's 8.0 MiB" \
        in result.stderr
    assert not out.exists()


def test_shifted_times_never_write_a_sixtieth_second():
    import importlib.util
    spec = importlib.util.spec_from_file_location("long_run", SCRIPT)
    long_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(long_run)
    assert long_run._stamp(7 * 3600 + 24 * 60 + 59.9999996) == "07:25:00.000000"
    assert long_run._stamp(25 * 3600 + 61.5) == "25:01:01.500000"
    assert long_run._seconds(long_run._stamp(1234.567891)) == 1234.567891


def test_a_block_the_steps_make_again_at_a_setup_address_is_not_freed_between_repetitions(tmp_path):
    src, out = tmp_path / "remade.csv.gz", tmp_path / "long.csv.gz"
    # Each step frees the block at 0x1000, made in the setup, and makes it again: every repetition
    # starts with it live, so nothing may free it between them.
    events = [("allocate", "0x1000", 8 * MiB), ("allocate", "0x3000", 16 * MiB)]
    for _ in range(3):
        events += [("allocate", "0xa000", 4 * MiB), ("free", "0xa000", 4 * MiB), ("free", "0x1000", 8 * MiB),
                   ("allocate", "0x1000", 8 * MiB)]
    _write_trace(src, events)
    result = subprocess.run([sys.executable, SCRIPT, str(src), "3", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "0 blocks (0.0 MiB) they leave live" in result.stderr
    _assert_frees_name_live_allocations(_rows(out))
