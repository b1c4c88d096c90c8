"""Allocating, freeing, stats and errors through the package and through raw ctypes calls."""

import ctypes

import pytest

from sim_support import MiB, GiB, run_script


def test_allocate_free_and_stats(tp):
    before = tp.stats(0)
    ptr = tp.allocate(3 * MiB)
    kept = tp.allocate(4096, persistent=True)
    assert ptr and kept and ptr != kept
    s = tp.stats(0)
    assert s.live_allocations == before.live_allocations + 2
    assert s.requested_bytes == before.requested_bytes + 3 * MiB + 4096
    assert s.mapped_bytes >= s.in_use_bytes >= s.requested_bytes
    assert s.driver_calls > 0
    assert (s.waits, s.wait_microseconds) == (0, 0.0)  # no work queued on sim: nothing to wait for
    tp.deallocate(ptr, 0)
    tp.deallocate(kept)  # the device is found
    s = tp.stats(0)
    assert s.live_allocations == before.live_allocations
    assert s.deallocations == before.deallocations + 2
    assert tp.has_context(0)


def test_raw_ctypes_round_trip(lib):
    out = ctypes.c_void_p()
    assert lib.tidepool_allocate(MiB, 0, None, 0, ctypes.byref(out)) == 0
    assert out.value
    assert lib.tidepool_deallocate(out, 0, None) == 0
    assert lib.tidepool_deallocate(None, 0, None) == 0  # like free(NULL)


@pytest.mark.parametrize("call, status_name, words", [
    (lambda tp: tp.allocate(0), "TIDEPOOL_INVALID_SIZE", []),
    (lambda tp: tp.allocate(MiB, device=3), "TIDEPOOL_INVALID_DEVICE", ["device 3"]),
    (lambda tp: tp.deallocate(0x1000, 0), "TIDEPOOL_INVALID_POINTER", []),
    (lambda tp: tp.deallocate(0x1000), "TIDEPOOL_INVALID_POINTER", ["any device"]),
    (lambda tp: tp.stats(-2), "TIDEPOOL_INVALID_DEVICE", ["device -2"]),
    (lambda tp: tp.available_bytes(5), "TIDEPOOL_INVALID_DEVICE", ["device 5"]),
    (lambda tp: tp.remove_reclaim_hook(987654), "TIDEPOOL_INVALID_ARGUMENT", []),
])
def test_errors_carry_status_and_message(tp, call, status_name, words):
    with pytest.raises(tp.TidepoolError) as raised:
        call(tp)
    assert raised.value.name == status_name
    for word in words:
        assert word in str(raised.value)


def test_double_free_is_refused_and_changes_nothing(tp, lib):
    ptr = tp.allocate(MiB)
    tp.deallocate(ptr)
    deallocations = tp.stats(0).deallocations
    with pytest.raises(tp.TidepoolError) as raised:
        tp.deallocate(ptr, 0)
    assert raised.value.name == "TIDEPOOL_DOUBLE_FREE"
    assert lib.tidepool_last_status() == raised.value.status
    assert tp.stats(0).deallocations == deallocations


def test_out_of_memory_raises_a_memory_error():
    out = run_script(f"""
        import tidepool
        kept = tidepool.allocate({600 * MiB})
        try:
            tidepool.allocate({600 * MiB})
        except tidepool.OutOfMemoryError as e:
            print("oom", isinstance(e, MemoryError), e.name)
        print("available", tidepool.available_bytes(0))
    """, TIDEPOOL_SIM_CAPACITY="1GiB")
    assert "oom True TIDEPOOL_OUT_OF_MEMORY" in out
    assert f"available {GiB - 600 * MiB}" in out


def test_stats_of_an_unused_device_are_zero_and_make_no_pool():
    out = run_script("""
        import tidepool
        s = tidepool.stats(1)
        print(s.mapped_bytes, s.allocations, tidepool.has_context(1))
    """, TIDEPOOL_SIM_DEVICES=2)
    assert out.split() == ["0", "0", "False"]
