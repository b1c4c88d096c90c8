"""tidepool.GraphPool: entering one makes it this thread's current graph pool and leaving restores
the one before (nested, on several threads, after an exception); with all_threads=True it is also
every other thread's while entered; ids are distinct; a pool is given only to a stream being
captured. That captures under one share their memory is tested in C++ on sim
(tests/core/pool_graph_pool_test.cpp, tests/capi/capi_graph_pools_test.cpp) and through PyTorch
on the GPU (gpu/test_graph_capture_gpu.py)."""

import threading

import pytest


def test_entering_sets_and_leaving_restores(tp):
    a, b = tp.GraphPool(), tp.GraphPool()
    assert a.id != 0 and b.id != 0 and a.id != b.id
    assert tp.current_graph_pool() == 0
    with a:
        assert tp.current_graph_pool() == a.id
        with b:
            assert tp.current_graph_pool() == b.id
            with a:
                assert tp.current_graph_pool() == a.id
            assert tp.current_graph_pool() == b.id
        assert tp.current_graph_pool() == a.id
    assert tp.current_graph_pool() == 0


def test_restored_after_an_exception(tp):
    shared = tp.GraphPool()
    with pytest.raises(RuntimeError):
        with shared:
            raise RuntimeError("capture failed")
    assert tp.current_graph_pool() == 0


def test_each_thread_has_its_own_current_one(tp):
    shared, other = tp.GraphPool(), tp.GraphPool()
    seen = {}
    entered, leave = threading.Event(), threading.Event()

    def worker():
        with other:
            seen["inside"] = tp.current_graph_pool()
            entered.set()
            leave.wait(5)
        seen["after"] = tp.current_graph_pool()

    with shared:
        t = threading.Thread(target=worker)
        t.start()
        assert entered.wait(5)
        assert tp.current_graph_pool() == shared.id
        leave.set()
        t.join()
        assert tp.current_graph_pool() == shared.id
    assert seen == {"inside": other.id, "after": 0}


def test_an_id_never_made_is_refused(tp, lib):
    made = tp.GraphPool()
    status = lib.tidepool_set_graph_pool(made.id + 10**6, None)
    assert status != 0
    assert b"never made" in lib.tidepool_last_error()
    assert tp.current_graph_pool() == 0
    assert lib.tidepool_current_graph_pool(None) != 0  # a null out-pointer: refused, no crash


def test_all_threads_makes_it_every_threads_while_entered(tp, lib):
    import ctypes

    shared = tp.GraphPool(all_threads=True)
    mine = tp.GraphPool()
    seen = []

    def look():
        t = threading.Thread(target=lambda: seen.append(tp.current_graph_pool()))
        t.start()
        t.join()

    look()
    with shared:
        look()
        with mine:  # this thread's own wins here; the others keep the default
            assert tp.current_graph_pool() == mine.id
            look()
        assert tp.current_graph_pool() == shared.id
    look()
    assert seen == [0, shared.id, shared.id, 0]
    default = ctypes.c_uint64(7)
    assert lib.tidepool_default_graph_pool(ctypes.byref(default)) == 0
    assert default.value == 0


def test_giving_a_pool_to_a_stream_not_being_captured_is_refused(tp):
    from tidepool import _graph_pools

    pool = tp.GraphPool()
    with pytest.raises(tp.TidepoolError) as refused:
        _graph_pools.give_capture(0, 0, pool.id)
    assert refused.value.name == "TIDEPOOL_INVALID_STREAM"
    assert "not being captured" in str(refused.value)
    _graph_pools.forget_capture(12345)  # a capture never given a pool: nothing to forget


def test_all_threads_entries_overlapping_on_two_threads_leave_in_any_order(tp):
    # Two captures on two threads (torch.cuda.graph after use() enters one each): the first to
    # leave must not take the other's default away, and the last leaves the one from before.
    from tidepool import _graph_pools

    outer, first, second = (tp.GraphPool(all_threads=True) for _ in range(3))
    entered, leave_first, left = threading.Event(), threading.Event(), threading.Event()

    def other():
        with first:
            entered.set()
            leave_first.wait()
        left.set()

    with outer:
        t = threading.Thread(target=other)
        t.start()
        entered.wait()
        assert _graph_pools.default_graph_pool() == first.id
        with second:
            assert _graph_pools.default_graph_pool() == second.id
            leave_first.set()
            left.wait()
            assert _graph_pools.default_graph_pool() == second.id  # not outer's: second still runs
        assert _graph_pools.default_graph_pool() == outer.id  # first left before: not first's
        t.join()
    assert _graph_pools.default_graph_pool() == 0
