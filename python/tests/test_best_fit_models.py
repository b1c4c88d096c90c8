"""bench/analysis/best_fit_models.py: the two allocator models on hand-made traces."""

import os
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
