"""Tags, sleep and wake from Python (issue 13) on sim: tidepool.region tags allocations, a tag's
memory is its own, sleep returns the exact bytes handed back, allocating in a sleeping tag raises
AsleepError, bad use raises clearly, and a wake that finds no room leaves the tag asleep.
(Contents byte for byte: tests/core/pool_sleep_test.cpp on a host-backed sim; the GPU:
python/tests/gpu/test_sleep_wake_gpu.py.)"""

import threading

import pytest

from sim_support import MiB, run_script


def test_region_tags_allocations_and_tags_never_share(tp):
    with tp.region("py-weights"):
        assert tp.current_tag() == "py-weights"
        w = tp.allocate(3 * MiB)
        with tp.region("py-inner"):
            assert tp.current_tag() == "py-inner"
        assert tp.current_tag() == "py-weights"
    assert tp.current_tag() is None
    assert tp.tag_stats("py-weights").live_allocations == 1
    tp.deallocate(w)
    with tp.region("py-other"):
        other = tp.allocate(3 * MiB)
    plain = tp.allocate(3 * MiB)
    assert other != w and plain != w, "a tag's freed block went to another tag"
    with tp.region("py-weights"):
        again = tp.allocate(3 * MiB)
    assert again == w, "the tag's own cache serves it"
    for p in (other, plain, again):
        tp.deallocate(p)


def test_region_is_per_thread(tp):
    seen = []
    with tp.region("py-thread"):
        t = threading.Thread(target=lambda: seen.append(tp.current_tag()))
        t.start()
        t.join()
    assert seen == [None]


def test_region_for_all_threads_tags_threads_without_a_tag(tp):
    got = []
    with tp.region("py-all", all_threads=True):
        t = threading.Thread(target=lambda: got.append(tp.allocate(MiB)))
        t.start()
        t.join()
    assert tp.tag_stats("py-all").live_allocations == 1
    t = threading.Thread(target=lambda: got.append(tp.allocate(MiB)))
    t.start()
    t.join()
    assert tp.tag_stats("py-all").live_allocations == 1, "the default tag ended with the region"
    for p in got:
        tp.deallocate(p)


def test_sleep_returns_the_bytes_and_wake_restores(tp):
    with tp.region("py-sleepy"):
        a = tp.allocate(10 * MiB)
        b = tp.allocate(4096)
    held = tp.tag_stats("py-sleepy").mapped_bytes
    assert held > 0
    assert not tp.is_asleep("py-sleepy")
    back = tp.sleep("py-sleepy")
    assert back == held
    s = tp.tag_stats("py-sleepy")
    assert s.mapped_bytes == 0 and s.asleep_bytes == held and s.live_allocations == 2
    assert tp.is_asleep("py-sleepy")
    with tp.region("py-sleepy"):
        with pytest.raises(tp.AsleepError, match="asleep"):
            tp.allocate(MiB)
    with pytest.raises(tp.AsleepError, match="asleep already"):
        tp.sleep("py-sleepy")
    tp.deallocate(b)  # freeing while asleep works
    tp.wake("py-sleepy")
    assert not tp.is_asleep("py-sleepy")
    assert tp.tag_stats("py-sleepy").mapped_bytes == held
    with pytest.raises(tp.AsleepError, match="not asleep"):
        tp.wake("py-sleepy")
    assert tp.sleep("py-sleepy", keep="nothing") == held
    tp.wake("py-sleepy")
    tp.deallocate(a)


def test_bad_use_is_refused_clearly(tp):
    with pytest.raises(tp.InvalidArgumentError, match="no tag named 'py-never'"):
        tp.sleep("py-never")
    with pytest.raises(tp.InvalidArgumentError, match="py-never"):
        tp.wake("py-never")
    with pytest.raises(ValueError, match="keep"):
        tp.sleep("py-never", keep="half")
    with pytest.raises(TypeError):
        tp.sleep(3)
    with pytest.raises(tp.InvalidArgumentError):
        with tp.region(""):
            pass
    assert tp.current_tag() is None


def test_wake_without_room_leaves_the_tag_asleep():
    out = run_script("""
        import tidepool as tp
        MiB = 1 << 20
        with tp.region("w"):
            w = tp.allocate(300 * MiB)
        back = tp.sleep("w")
        live = tp.allocate(800 * MiB)       # another engine fills the device
        try:
            tp.wake("w")
            raise SystemExit("woke without room")
        except tp.OutOfMemoryError as error:
            assert "stays asleep" in str(error), error
        assert tp.is_asleep("w")
        assert tp.tag_stats("w").mapped_bytes == 0
        tp.deallocate(live)
        tp.wake("w")                         # the untagged cache goes back for it
        assert tp.tag_stats("w").mapped_bytes == back
        print("ok", back)
    """, TIDEPOOL_SIM_CAPACITY="1GiB")
    assert out.split()[0] == "ok"
    assert int(out.split()[1]) >= 300 * MiB
