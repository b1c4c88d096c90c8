"""What a new user gets wrong, and the error that tells them: a pointer freed twice, negative or
non-integer byte counts, options set after the first allocation, no GPU and no TIDEPOOL_DEVICE."""

import os
import subprocess
import sys

import pytest

from sim_support import MiB, PYTHON_ROOT, run_script


def test_freeing_twice_says_double_free_whichever_device_is_named(tp):
    ptr = tp.allocate(MiB)
    tp.deallocate(ptr)
    deallocations = tp.stats(0).deallocations
    for device in (tp.ANY_DEVICE, 0):  # tidepool.deallocate(p) finds the device itself
        with pytest.raises(tp.TidepoolError) as raised:
            tp.deallocate(ptr, device)
        assert raised.value.name == "TIDEPOOL_DOUBLE_FREE"
        assert "double free" in str(raised.value)
        assert "device 0" in str(raised.value)
    assert tp.stats(0).deallocations == deallocations


@pytest.mark.parametrize("call, message", [
    (lambda tp: tp.allocate(1.5e6), "size must be a number of bytes, not float 1500000.0; write int(1500000.0)"),
    (lambda tp: tp.allocate(2.0 ** 20), "not float 1048576.0"),
    (lambda tp: tp.allocate("1MiB"), "size must be a number of bytes, not str '1MiB'"),
    (lambda tp: tp.allocate(True), "size must be a number of bytes, not a bool"),
    (lambda tp: tp.allocate(MiB, device=0.0), "device must be a device number, not float"),
    (lambda tp: tp.deallocate(12.5), "ptr must be a device pointer (an int), not float"),
    (lambda tp: tp.allocate(MiB, stream=1.0), "stream must be a stream (an int or None), not float"),
])
def test_values_of_the_wrong_type_are_a_type_error_naming_the_argument(tp, call, message):
    with pytest.raises(TypeError) as raised:
        call(tp)
    assert message in str(raised.value)
    assert str(raised.value).startswith("tidepool.")


@pytest.mark.parametrize("call, message", [
    (lambda tp: tp.allocate(-1), "tidepool.allocate: size is -1: expected a number of bytes from 0 to"),
    (lambda tp: tp.allocate(2**64), "size is 18446744073709551616"),
    (lambda tp: tp.allocate(MiB, device=-1), "device is -1: expected a device number from 0"),
    (lambda tp: tp.deallocate(-8), "ptr is -8"),
])
def test_values_out_of_range_are_a_value_error_naming_the_argument(tp, call, message):
    with pytest.raises(ValueError) as raised:
        call(tp)
    assert isinstance(raised.value, tp.InvalidArgumentError)
    assert raised.value.name == "TIDEPOOL_INVALID_ARGUMENT"
    assert message in str(raised.value)


def test_a_numpy_style_integer_is_taken(tp):
    class Index:  # what numpy integers offer: __index__
        def __index__(self):
            return MiB

    ptr = tp.allocate(Index())
    tp.deallocate(ptr)


def test_negative_or_non_integer_options_are_refused_and_set_nothing():
    out = run_script("""
        import tidepool
        before = tidepool.get_pool_options()
        for options in ({"headroom": -5}, {"byte_cap": -1}, {"max_cached_bytes": -(2**20)},
                        {"byte_cap": 2**64}, {"decay_ms": -1}):
            try:
                tidepool.set_pool_options(**options)
            except ValueError as e:
                print(type(e).__name__, e.name, str(e).split(": ", 1)[1])
        for options in ({"byte_cap": 8e9}, {"headroom": "8MiB"}, {"immediate_release": 1},
                        {"growth_slack": "0.5"}):
            try:
                tidepool.set_pool_options(**options)
            except TypeError as e:
                print("TypeError", e)
        print(tidepool.get_pool_options() == before)
        tidepool.set_pool_options(byte_cap=None, headroom=0, growth_slack=2)  # limits still accepted
        print(tidepool.get_pool_options()["growth_slack"])
    """)
    lines = out.strip().splitlines()
    assert lines[0].startswith("InvalidArgumentError TIDEPOOL_INVALID_ARGUMENT tidepool.set_pool_options: "
                               "headroom is -5: expected a number of bytes from 0 to 9223372036854775807")
    assert "byte_cap is -1: expected a number of bytes or None" in lines[1]
    assert "max_cached_bytes is -1048576" in lines[2]
    assert "byte_cap is 18446744073709551616" in lines[3]
    assert "decay_ms is -1" in lines[4]
    assert lines[5] == ("TypeError tidepool.set_pool_options: byte_cap must be a number of bytes or None, "
                        "not float 8000000000.0; write int(8000000000.0) to pass 8000000000")
    assert "headroom must be a number of bytes, not str '8MiB'" in lines[6]
    assert "immediate_release must be True or False, not 1" in lines[7]
    assert "growth_slack must be a number, not str '0.5'" in lines[8]
    assert lines[9] == "True"
    assert lines[10] == "2.0"


def test_options_set_after_the_first_allocation_are_refused_naming_the_pool():
    out = run_script("""
        import tidepool
        tidepool.set_pool_options(headroom=1 << 20)  # before the first allocation: taken
        p = tidepool.allocate(1 << 20, device=1)
        try:
            tidepool.set_pool_options(byte_cap=1 << 30)
        except ValueError as e:
            print(e.name, e)
        print(tidepool.get_pool_options()["byte_cap"], tidepool.get_pool_options()["headroom"])
        tidepool.deallocate(p)
    """, TIDEPOOL_SIM_DEVICES=2)
    lines = out.strip().splitlines()
    assert lines[0].startswith("TIDEPOOL_INVALID_ARGUMENT ")
    assert "pool options must be set before the first allocation: the pool of device(s) 1 exists" in lines[0]
    assert lines[1] == f"None {MiB}"


def test_without_a_gpu_and_without_tidepool_device_the_error_suggests_sim(tp):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEPOOL_SIM")}
    env.pop("TIDEPOOL_DEVICE", None)
    env["PYTHONPATH"] = PYTHON_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    probe = ("import tidepool\n"
             "try:\n"
             "    p = tidepool.allocate(1 << 20)\n"
             "except tidepool.TidepoolError as e:\n"
             "    print(e.name, e)\n"
             "else:\n"
             "    print('allocated on a GPU')\n"
             "    tidepool.deallocate(p)\n")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    if out.startswith("allocated on a GPU"):
        pytest.skip("this machine has a GPU")
    assert out.startswith("TIDEPOOL_UNAVAILABLE ")
    assert "to run without a GPU, set TIDEPOOL_DEVICE=sim" in out
