"""Reclaim hooks written in Python: called through the C API when an allocation would fail and
from release_cached_memory, their bytes counted, removable (removal waits for a call in progress
on another thread; a hook may remove itself)."""

import gc
import threading
import time

import pytest

from sim_support import GiB, MiB, run_script

SIZE_MAX = 2**64 - 1


def test_release_calls_the_hook_and_counts_its_bytes(tp):
    calls = []

    def hook(device, bytes_needed):
        calls.append((device, bytes_needed))
        return 4096

    tp.deallocate(tp.allocate(MiB))  # make sure device 0 is opened
    hook_id = tp.add_reclaim_hook(hook)
    try:
        got = tp.release_cached_memory()
    finally:
        tp.remove_reclaim_hook(hook_id)
    assert (0, SIZE_MAX) in calls
    assert got >= 4096
    calls.clear()
    tp.release_cached_memory()
    assert calls == []  # removed


def test_out_of_memory_calls_the_hook_first():
    out = run_script(f"""
        import tidepool
        calls = []
        tidepool.add_reclaim_hook(lambda device, needed: calls.append((device, needed)) or 0)
        kept = tidepool.allocate({600 * MiB})
        try:
            tidepool.allocate({600 * MiB})
        except tidepool.OutOfMemoryError:
            print("oom")
        print("calls", len(calls), calls[0][0] if calls else None,
              calls[0][1] >= {600 * MiB - (GiB - 600 * MiB)} if calls else None)
    """, TIDEPOOL_SIM_CAPACITY="1GiB")
    assert "oom" in out
    assert "calls" in out
    words = out.split("calls", 1)[1].split()
    assert int(words[0]) >= 1 and words[1] == "0" and words[2] == "True"


def test_a_failing_hook_does_not_break_the_caller(tp):
    def broken(device, bytes_needed):
        raise ValueError("broken hook")

    hook_id = tp.add_reclaim_hook(broken)
    try:
        with pytest.warns(UserWarning, match="broken hook"):
            tp.release_cached_memory()
    finally:
        tp.remove_reclaim_hook(hook_id)


def test_hook_must_be_callable(tp):
    with pytest.raises(TypeError):
        tp.add_reclaim_hook(42)


def test_removal_waits_for_a_call_in_progress(tp):
    entered = threading.Event()
    go = threading.Event()
    finished = []

    def slow(device, bytes_needed):
        entered.set()
        go.wait(30)
        finished.append(True)
        return 0

    tp.deallocate(tp.allocate(MiB))  # device 0 is opened: release_cached_memory calls the hooks
    hook_id = tp.add_reclaim_hook(slow)
    caller = threading.Thread(target=tp.release_cached_memory)
    caller.start()
    assert entered.wait(30)
    removed = []
    remover = threading.Thread(target=lambda: (tp.remove_reclaim_hook(hook_id), removed.append(bool(finished))))
    remover.start()
    time.sleep(0.05)  # a broken removal returns meanwhile
    assert removed == [], "remove_reclaim_hook returned while the hook was running"
    go.set()
    remover.join(30)
    caller.join(30)
    assert removed == [True], "the hook was still running when its removal returned"
    gc.collect()
    tp.release_cached_memory()  # the thunk is gone and nothing calls it


def test_a_hook_may_remove_itself(tp):
    calls = []
    own = []

    def once(device, bytes_needed):
        calls.append(device)
        tp.remove_reclaim_hook(own[0])  # inside its own call: must neither wait nor free the thunk
        gc.collect()
        return 0

    tp.deallocate(tp.allocate(MiB))
    own.append(tp.add_reclaim_hook(once))
    tp.release_cached_memory()
    gc.collect()
    tp.release_cached_memory()
    assert calls == [0]
    with pytest.raises(tp.TidepoolError):
        tp.remove_reclaim_hook(own[0])
