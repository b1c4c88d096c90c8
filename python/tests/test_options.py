"""tidepool.set_pool_options(): pools made afterwards get the options; bad ones are refused."""

import pytest

from sim_support import MiB, run_script


def test_byte_cap_applies_to_pools_made_afterwards():
    out = run_script(f"""
        import tidepool
        print(tidepool.get_pool_options()["byte_cap"])
        tidepool.set_pool_options(byte_cap={256 * MiB}, headroom={8 * MiB})
        print(tidepool.get_pool_options()["byte_cap"], tidepool.get_pool_options()["headroom"])
        try:
            tidepool.allocate({512 * MiB})
        except tidepool.OutOfMemoryError:
            print("capped")
        print(tidepool.available_bytes(0) <= {256 * MiB})
    """)
    lines = out.strip().splitlines()
    assert lines[0] == "None"
    assert lines[1] == f"{256 * MiB} {8 * MiB}"
    assert lines[2] == "capped"
    assert lines[3] == "True"


def test_growth_slack_round_trips_and_bad_values_are_refused():
    out = run_script("""
        import tidepool
        print(tidepool.get_pool_options()["growth_slack"])
        tidepool.set_pool_options(growth_slack=0.25)
        print(tidepool.get_pool_options()["growth_slack"])
        try:
            tidepool.set_pool_options(growth_slack=-1)
        except tidepool.TidepoolError as e:
            print(e.name)
        print(tidepool.get_pool_options()["growth_slack"])
    """)
    assert out.strip().splitlines() == ["0.5", "0.25", "TIDEPOOL_INVALID_ARGUMENT", "0.25"]


def test_unknown_options_are_refused(tp):
    with pytest.raises(TypeError, match="bytecap"):
        tp.set_pool_options(bytecap=1)
