"""bench/analysis/best_fit_models.py: the allocator models on hand-made traces."""

import os
import random
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO_ROOT, "bench", "analysis"))

import best_fit_models as models  # noqa: E402

MiB = 1 << 20


def test_one_space_joins_what_segments_keep_apart():
    # Two 12 MiB blocks, both freed, then one of 24 MiB: one space serves it from the joined
    # blocks; the caching model made a segment for each and must make a third.
    rows = [("allocate", "a", 12 * MiB), ("allocate", "b", 12 * MiB), ("free", "a", 0), ("free", "b", 0),
            ("allocate", "c", 24 * MiB)]
    assert models.held_over_live(rows, "single") == pytest.approx(1.0)
    assert models.held_over_live(rows, "caching") == pytest.approx(48 / 24)


def test_requests_below_10_mib_share_a_20_mib_segment():
    rows = [("allocate", "a", 4 * MiB), ("allocate", "b", 4 * MiB), ("free", "a", 0), ("free", "b", 0),
            ("allocate", "c", 8 * MiB)]
    assert models.held_over_live(rows, "caching") == pytest.approx(20 / 8)
    assert models.held_over_live(rows, "single") == pytest.approx(1.0)


def test_one_space_extends_the_free_block_at_its_top_by_whole_pages():
    # 3 MiB freed at the top, then 5 MiB: the space grows by one 2 MiB page, not by 6 MiB.
    rows = [("allocate", "a", 3 * MiB), ("free", "a", 0), ("allocate", "b", 5 * MiB)]
    space = models.Space()
    assert space.take(3 * MiB) == 0 and space.held == 4 * MiB
    space.release(0, 3 * MiB)
    assert space.take(5 * MiB) == 0 and space.held == 6 * MiB
    assert models.held_over_live(rows, "single") == pytest.approx(6 / 5)


def test_best_fit_takes_the_smallest_free_block_that_fits():
    space = models.Space()
    a, b, c = space.take(8 * MiB), space.take(MiB), space.take(4 * MiB)
    space.take(MiB)  # keeps c from joining the top
    space.release(a, 8 * MiB)
    space.release(c, 4 * MiB)
    assert space.take(3 * MiB) == c  # the 4 MiB hole, not the 8 MiB one
    assert b == 8 * MiB


def test_small_requests_have_a_pool_of_their_own_in_the_caching_model():
    rows = [("allocate", "s", 4096), ("allocate", "l", 12 * MiB)]
    live = 4096 + 12 * MiB
    assert models.held_over_live(rows, "caching") == pytest.approx((2 * MiB + 12 * MiB) / live)


def test_an_unknown_model_is_refused():
    with pytest.raises(ValueError, match="unknown model"):
        models.held_over_live([], "buddy")
    with pytest.raises(SystemExit):
        models.main(["--models", "single,buddy", "trace.csv"])


def test_first_fit_takes_the_lowest_address_that_fits():
    space = models.FirstFitSpace()
    a, _, c = space.take(8 * MiB), space.take(MiB), space.take(4 * MiB)
    space.take(MiB)
    space.release(a, 8 * MiB)
    space.release(c, 4 * MiB)
    assert space.take(3 * MiB) == a  # the lower hole, though the other fits better


def test_huge_requests_are_carved_from_the_top_of_their_fit_or_kept_apart():
    space = models.HugeHighSpace()
    assert space.take(300 * MiB) == 0  # the space grew by exactly 300 MiB: top and bottom agree
    space.release(0, 300 * MiB)
    assert space.take(256 * MiB) == 44 * MiB  # from the top of the 300 MiB hole
    assert space.take(MiB) == 0  # small requests still from the bottom
    # Kept apart, a huge block never reuses the small blocks' freed memory.
    rows = [("allocate", "s", 150 * MiB), ("allocate", "t", 150 * MiB), ("free", "s", 0), ("free", "t", 0),
            ("allocate", "h", 300 * MiB)]
    assert models.held_over_live(rows, "single") == pytest.approx(1.0)
    assert models.held_over_live(rows, "huge-apart") == pytest.approx(600 / 300)


def test_requests_below_1_mib_never_reuse_large_blocks_when_kept_apart():
    rows = [("allocate", "l", 4 * MiB), ("free", "l", 0)] + [("allocate", str(i), 512 * 1024) for i in range(8)]
    assert models.held_over_live(rows, "single") == pytest.approx(1.0)
    assert models.held_over_live(rows, "small-apart") == pytest.approx(8 / 4)
    # A request of exactly 1 MiB is large, as in the pool: it does not share the small block's page.
    rows = [("allocate", "s", 512 * 1024), ("allocate", "l", MiB)]
    assert models.held_over_live(rows, "small-apart") == pytest.approx(4 / 1.5)
    assert models.held_over_live(rows, "single") == pytest.approx(2 / 1.5)


def test_the_command_prints_each_model(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("Thread,Time,Action,Pointer,Size,Stream\n0,00:00:00.000000,allocate,0x1,1048576,0x0\n"
                     "0,00:00:00.000001,free,0x1,1048576,0x0\n")
    models.main(["--models", "single,caching,first-fit", str(trace)])
    out = capsys.readouterr().out
    assert out == f"{trace}: peak held / peak live: single 2.0000, caching 2.0000, first-fit 2.0000\n"


def test_beyond_the_budget_growth_maps_idle_handles_again_instead_of_making_more():
    # A (64 MiB) freed below B (32 MiB), then C (96 MiB): best fit in one space grows by 96 MiB
    # (192 MiB held for 128 live); the alias model, with no slack, makes one new handle up to the
    # budget (128 MiB) and maps A's two idle handles again at the top for the rest of C.
    rows = [("allocate", "a", 64 * MiB), ("allocate", "b", 32 * MiB), ("free", "a", 0), ("allocate", "c", 96 * MiB)]
    assert models.held_over_live(rows, "small-apart") == pytest.approx(192 / 128)
    space = models.AliasSpace(handle=32 * MiB, slack=0.0)
    a = space.take(64 * MiB, 64 * MiB)
    b = space.take(32 * MiB, 96 * MiB)
    space.release(a, 64 * MiB)
    c = space.take(96 * MiB, 128 * MiB)
    assert (a, b, c) == (0, 64 * MiB, 96 * MiB)
    assert space.held == 128 * MiB and space.handles_made == 4 and space.aliases_mapped == 2
    # A's old addresses are free, but their handles now back C: a new block must not land there.
    d = space.take(32 * MiB, 160 * MiB)
    assert d == 192 * MiB and space.held == 160 * MiB
    # Once C goes, A's addresses are usable again, with no new handle and no new mapping.
    space.release(c, 96 * MiB)
    assert space.take(64 * MiB, 160 * MiB) == 0
    assert space.handles_made == 5 and space.aliases_mapped == 2
    assert models.replay(rows, "alias", handle=32 * MiB, slack=0.0)[0].ratio == pytest.approx(1.0)


def test_a_block_may_share_its_handle_with_a_neighbour_at_the_same_address():
    # Two live blocks on one handle, at one mapping, do not block each other.
    space = models.AliasSpace(handle=32 * MiB, slack=0.0)
    space.release(space.take(16 * MiB, 16 * MiB), 16 * MiB)
    assert space.take(8 * MiB, 16 * MiB) == 0
    assert space.take(8 * MiB, 16 * MiB) == 8 * MiB
    assert space.held == 16 * MiB and space.handles_made == 1 and space.aliases_mapped == 0


def test_new_handles_are_as_large_as_the_growth_up_to_the_largest():
    space = models.AliasSpace(handle=32 * MiB, slack=0.0)
    space.take(70 * MiB, 70 * MiB)
    assert space.handle_size == [32 * MiB, 32 * MiB, 6 * MiB] and space.held == 70 * MiB


def loop(steps, seed):
    """A training-like loop: each step a few blocks of a size drawn for the step, freed at its end."""
    rng = random.Random(seed)
    rows = [("allocate", "weights", 300 * MiB)]
    for step in range(steps):
        length = rng.choice([1, 2, 3, 5, 8])
        names = [f"{step}.{i}" for i in range(4)]
        for i, name in enumerate(names):
            rows.append(("allocate", name, length * (i + 1) * 10 * MiB))
            if i == 2:
                rows.append(("free", names[0], 0))
        rows += [("free", name, 0) for name in names[1:]]
    return rows


def test_a_repeated_loop_stops_making_handles_and_mapping_aliases():
    passes = models.replay(loop(40, 1), "alias", passes=3, handle=8 * MiB, slack=0.0)
    assert passes[0].aliases_mapped > 0  # the budget bound in the first pass
    assert passes[2].handles_made == 0 and passes[2].aliases_mapped == 0
    assert passes[2].ratio <= passes[0].ratio
    single = models.replay(loop(40, 1), "small-apart")[0].ratio
    assert passes[0].ratio < single


@pytest.mark.parametrize("seed", range(6))
def test_no_block_holds_a_handle_twice_or_one_another_holds(seed):
    # Held memory never falls below live memory: a block spanning two mappings of one handle, or a
    # mapping of a handle that backs another live block, would make it.
    space = models.AliasSpace(handle=4 * MiB, slack=0.0)
    rng = random.Random(seed)
    live, live_bytes, peak = {}, 0, 0
    for i in range(400):
        if live and rng.random() < 0.45:
            name = rng.choice(sorted(live))
            space.release(live[name][0], live[name][1])
            live_bytes -= live.pop(name)[1]
        else:
            size = rng.choice([1, 3, 5, 9, 17]) * MiB
            peak = max(peak, live_bytes + size)
            live[i] = (space.take(size, peak), size)
            live_bytes += size
        assert space.held >= live_bytes
        in_use = {}  # handle -> the mappings where live blocks touch it
        for address, size in live.values():
            mappings = list(space.mappings_of(address, size))
            assert len({space.mapped[m][1] for m in mappings}) == len(mappings)  # no handle twice in a block
            for m in mappings:
                in_use.setdefault(space.mapped[m][1], set()).add(m)
        assert all(len(mappings) == 1 for mappings in in_use.values())  # one mapping in use per handle
    assert space.aliases_mapped > 0


def test_with_a_wide_budget_the_alias_model_is_best_fit():
    rows = loop(30, 2)
    assert models.held_over_live(rows, "alias", handle=2 * MiB, slack=10.0) == pytest.approx(
        models.held_over_live(rows, "small-apart"))


def test_the_command_prints_each_pass_and_refuses_bad_options(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("Thread,Time,Action,Pointer,Size,Stream\n0,00:00:00.000000,allocate,0x1,33554432,0x0\n"
                     "0,00:00:00.000001,free,0x1,33554432,0x0\n")
    models.main(["--models", "single,alias", "--passes", "2", str(trace)])
    out = capsys.readouterr().out
    assert out == (f"{trace}: peak held / peak live by pass: single 1.0000 / 1.0000, "
                   "alias 1.0000 / 1.0000 (handles made 1 / 0, aliases mapped 0 / 0)\n")
    for bad in (["--passes", "0"], ["--alias-slack", "-0.1"], ["--alias-handle-mib", "3"]):
        with pytest.raises(SystemExit):
            models.main(bad + [str(trace)])


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".csv.xz"])
def test_traces_are_read_plain_gzip_or_xz(tmp_path, suffix):
    import gzip
    import lzma

    text = ("Thread,Time,Action,Pointer,Size,Stream\n0,0.1,allocate,0x1000,4096,0x0\n"
            "0,0.2,free,0x1000,4096,0x0\n")
    path = tmp_path / f"t{suffix}"
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "wt") as f:
        f.write(text)
    assert models.read_rows(str(path)) == [("allocate", "0x1000", 4096), ("free", "0x1000", 4096)]
