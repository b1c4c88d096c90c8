"""bench/analysis/planner_models.py: the planned layouts on hand-made traces."""

import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO_ROOT, "bench", "analysis"))

import planner_models as models  # noqa: E402

MiB = 1 << 20


def held_over_live(rows):
    blocks, peak = models.blocks_of(rows)
    horizon = len(rows)
    return {
        "best-fit": models.best_fit_top(blocks) / peak,
        "planned": models.planned_top(blocks, horizon) / peak,
        "planned-steps": models.planned_steps_top(blocks, horizon) / peak,
        "learned": models.learned_top(blocks, horizon)[0] / peak,
    }


def test_a_plan_leaves_room_for_a_larger_block_where_best_fit_cannot():
    # A 4 MiB block freed under a long-lived 2 MiB one, then an 8 MiB block: best fit has a 4 MiB
    # hole below the long-lived block and grows by 8 MiB above it; the plan, knowing the 8 MiB
    # block comes, puts it at the bottom, over the 4 MiB block's time.
    rows = [("allocate", "a", 4 * MiB), ("allocate", "b", 2 * MiB), ("free", "a", 0),
            ("allocate", "c", 8 * MiB), ("free", "c", 0), ("free", "b", 0)]
    figures = held_over_live(rows)
    assert figures["best-fit"] == pytest.approx(14 / 10)
    assert figures["planned"] == pytest.approx(1.0)


def test_best_fits_excess_is_the_growth_that_met_a_hole_too_small():
    # As above: the 8 MiB block finds only the 4 MiB hole below the long-lived block, and grows.
    rows = [("allocate", "a", 4 * MiB), ("allocate", "b", 2 * MiB), ("free", "a", 0),
            ("allocate", "c", 8 * MiB), ("free", "c", 0), ("free", "b", 0)]
    blocks, _ = models.blocks_of(rows)
    assert models.best_fit_excess(blocks) == (10 * MiB, 14 * MiB, 8 * MiB, [4 * MiB])


def test_the_command_line_says_where_the_excess_lies(tmp_path, capsys):
    path = tmp_path / "hole.csv"
    path.write_text("Thread,Time,Action,Pointer,Size,Stream\n"
                    f"0,0,allocate,a,{4 * MiB},0x0\n0,0,allocate,b,{2 * MiB},0x0\n0,0,free,a,0,0x0\n"
                    f"0,0,allocate,c,{8 * MiB},0x0\n0,0,free,c,0,0x0\n0,0,free,b,0,0x0\n")
    models.main(["--layouts", "best-fit", "--excess", str(path)])
    out = capsys.readouterr().out
    assert "10 MiB in use at its peak, top 14 MiB; the last growth, for 8.0 MiB, found free below the top 4.0 MiB" in out


def test_blocks_that_never_live_together_share_addresses_in_a_plan():
    rows = []
    for k in range(5):
        rows += [("allocate", f"x{k}", (k + 1) * MiB), ("free", f"x{k}", 0)]
    blocks, peak = models.blocks_of(rows)
    assert peak == 5 * MiB
    assert models.planned_top(blocks, len(rows)) == 5 * MiB


def step(rows, k, sizes, keep):
    """One step of a loop: allocations of `sizes` (MiB), the last `keep` of them kept to the next
    step (freed at its end), the rest freed in reverse order."""
    names = [f"s{k}_{j}" for j in range(len(sizes))]
    rows += [("allocate", n, z * MiB) for n, z in zip(names, sizes)]
    rows += [("free", n, 0) for n in reversed(names[:len(names) - keep])]
    return names[len(names) - keep:]


def loop(steps, sizes_of):
    rows = [("allocate", "weights", 64 * MiB)]
    kept = []
    for k in range(steps):
        new_kept = step(rows, k, sizes_of(k), 1)
        rows += [("free", n, 0) for n in kept]
        kept = new_kept
    return rows


def test_steps_are_found_where_the_live_bytes_come_down_to_the_floor():
    rows = loop(12, lambda k: [8, 4, 16, 2])
    blocks, _ = models.blocks_of(rows)
    starts = models.step_starts(blocks, len(rows))
    allocations = [t for t, row in enumerate(rows) if row[0] == "allocate"]
    # The weights' allocation, then each step's first.
    assert starts == [0] + [allocations[1 + 4 * k] for k in range(12)]


STEP = [8, 4, 16, 2, 6, 3, 12, 1, 5, 10]  # MiB: more large allocations than a stray few


def test_a_loop_of_identical_steps_is_laid_out_by_the_plan_it_learned():
    rows = loop(12, lambda k: STEP)
    blocks, _ = models.blocks_of(rows)
    top, planned, by_best_fit = models.learned_top(blocks, len(rows))
    assert planned + by_best_fit == 1 + 12 * len(STEP)
    # The first steps teach it (the first one found starts late: no kept block yet); every
    # allocation of the last ten takes its planned place.
    assert planned >= 10 * len(STEP)
    # Once learned, the layout stays: six more steps take no address above what six steps took.
    shorter = loop(6, lambda k: STEP)
    assert models.learned_top(models.blocks_of(shorter)[0], len(shorter))[0] == top


def test_a_step_larger_than_the_one_it_learned_from_falls_back_to_best_fit():
    same = loop(12, lambda k: STEP)
    growing = loop(12, lambda k: STEP[:2] + [16 + 2 * k] + STEP[3:])
    _, _, same_by_best_fit = models.learned_top(models.blocks_of(same)[0], len(same))
    _, planned, by_best_fit = models.learned_top(models.blocks_of(growing)[0], len(growing))
    # The block that grows each step misses its entry in each of the last ten; the rest are planned.
    assert by_best_fit == same_by_best_fit + 10
    assert planned == 1 + 12 * len(STEP) - by_best_fit


def write_loop_trace(path):
    """Six identical steps of STEP as an RMM replay log at `path`."""
    with open(path, "w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for action, pointer, size in loop(6, lambda k: STEP):
            f.write(f"0,0,{action},{pointer},{size},0x0\n")


def test_the_command_line_prints_every_layout(tmp_path, capsys):
    path = tmp_path / "loop.csv"
    write_loop_trace(path)
    models.main([str(path)])
    out = capsys.readouterr().out
    for name in ("best-fit", "planned", "planned-steps", "learned"):
        assert f"{name} " in out


def test_a_trace_with_no_allocation_is_said_so(tmp_path, capsys):
    path = tmp_path / "empty.csv"
    path.write_text("Thread,Time,Action,Pointer,Size,Stream\n")
    models.main([str(path)])
    assert "empty.csv: no allocation" in capsys.readouterr().out


def test_the_layouts_asked_for_are_the_ones_printed_and_an_unknown_one_is_refused(tmp_path, capsys):
    path = tmp_path / "loop.csv"
    write_loop_trace(path)
    models.main(["--layouts", "best-fit,learned", str(path)])
    out = capsys.readouterr().out
    assert "best-fit " in out and "learned " in out and "planned" not in out.split("(")[0]
    with pytest.raises(SystemExit):
        models.main(["--layouts", "best-fit,oracle", str(path)])
    assert "unknown layout(s) oracle" in capsys.readouterr().err
