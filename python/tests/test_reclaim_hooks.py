"""Reclaim hooks written in Python: called through the C API when an allocation would fail and
from release_cached_memory, their bytes counted, removable."""

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
