"""tidepool.compact(): after it a pool holds the 2 MiB granules its live allocations touch, the
bytes it returns are exact, the pool works on, and it refuses clearly where it cannot run."""

import pytest

from sim_support import MiB, run_script

GRANULE = 2 * MiB


def test_compact_holds_just_the_granules_live_allocations_touch():
    out = run_script(f"""
        import random, tidepool
        rng = random.Random(7)
        blocks = []
        for i in range(120):
            size = int(2 ** rng.uniform(10, 24.6))  # 1 KiB to about 24 MiB
            blocks.append((tidepool.allocate(size, device=0, persistent=(i % 8 == 0)), size))
        rng.shuffle(blocks)
        for ptr, _ in blocks[:60]:
            tidepool.deallocate(ptr, device=0)
        live = blocks[60:]
        granules = set()
        for ptr, size in live:
            end = ptr + (size + 511) // 512 * 512
            granules.update(range(ptr // {GRANULE}, (end - 1) // {GRANULE} + 1))
        released = tidepool.release(0)
        after_release = tidepool.stats(0).mapped_bytes
        compacted = tidepool.compact(0)
        after = tidepool.stats(0)
        print("touched", len(granules) * {GRANULE})
        print("after_release", after_release)
        print("compacted", compacted)
        print("mapped", after.mapped_bytes)
        print("live", after.live_allocations)
        print("again", tidepool.compact(0))
        more = tidepool.allocate({40 * MiB}, device=0)
        tidepool.deallocate(more, device=0)
        for ptr, _ in live:
            tidepool.deallocate(ptr, device=0)
        tidepool.release(0)
        print("end", tidepool.stats(0).mapped_bytes)
    """)
    r = {k: int(v) for k, v in (line.split() for line in out.strip().splitlines())}
    assert r["after_release"] > r["touched"], r  # something was pinned: the test proves something
    assert r["mapped"] == r["touched"], r
    assert r["compacted"] == r["after_release"] - r["touched"], r
    assert r["live"] == 60, r
    assert r["again"] == 0, r
    assert r["end"] == 0, r


def test_compact_refuses_clearly(tp):
    with pytest.raises(tp.InvalidArgumentError):
        tp.compact(-3)
    assert tp.compact(0) >= 0  # runs on the tests' shared pool (nothing of theirs moves address)
    out = run_script("""
        import tidepool
        tidepool.set_pool_options(alias_free_handles=True)
        tidepool.deallocate(tidepool.allocate(1 << 20, device=0), device=0)
        try:
            tidepool.compact(0)
        except tidepool.TidepoolError as e:
            print(e.name)
    """)
    assert out.strip() == "TIDEPOOL_UNAVAILABLE"
