"""tidepool.set_pool_options(): pools made afterwards get the options; bad ones are refused.
tidepool.set_byte_cap(): one device's cap, changed while its pool runs."""

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


def test_a_devices_byte_cap_changes_while_its_pool_runs_and_bad_values_are_refused():
    out = run_script(f"""
        import tidepool
        print(tidepool.byte_cap(0))
        held = tidepool.allocate({64 * MiB})
        tidepool.set_byte_cap({96 * MiB})
        try:
            tidepool.allocate({64 * MiB})
        except tidepool.OutOfMemoryError:
            print("capped", tidepool.byte_cap(0))
        for device, value in ((0, -1), (0, 2**63), (0, "1G"), (9, {MiB})):
            try:
                tidepool.set_byte_cap(value, device)
            except (tidepool.TidepoolError, TypeError) as error:
                print(type(error).__name__)
        tidepool.set_byte_cap(None)
        tidepool.deallocate(tidepool.allocate({64 * MiB}))
        print(tidepool.byte_cap(0), tidepool.byte_cap(1))
        tidepool.deallocate(held)
    """, TIDEPOOL_SIM_DEVICES=2)
    assert out.strip().splitlines() == [
        "None", f"capped {96 * MiB}", "InvalidArgumentError", "InvalidArgumentError", "TypeError",
        "TidepoolError", "None None"]


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
    assert out.strip().splitlines() == ["1.0", "0.25", "TIDEPOOL_INVALID_ARGUMENT", "0.25"]


def test_alias_options_round_trip_and_bad_values_are_refused():
    out = run_script("""
        import tidepool
        o = tidepool.get_pool_options()
        print(o["alias_free_handles"], o["alias_slack"])
        tidepool.set_pool_options(alias_free_handles=True, alias_slack=0.05)
        o = tidepool.get_pool_options()
        print(o["alias_free_handles"], o["alias_slack"])
        for bad in ({"alias_free_handles": 1}, {"alias_slack": "0.1"}, {"alias_slack": -1.0}):
            try:
                tidepool.set_pool_options(**bad)
            except (TypeError, tidepool.TidepoolError) as e:
                print(type(e).__name__, str(e).split(":", 1)[1].strip())
        o = tidepool.get_pool_options()
        print(o["alias_free_handles"], o["alias_slack"])
        tidepool.deallocate(tidepool.allocate(64 << 20))  # a pool made with them
    """)
    lines = out.strip().splitlines()
    assert lines[0] == "False 0.02"
    assert lines[1] == "True 0.05"
    assert lines[2] == "TypeError alias_free_handles must be True or False, not 1"
    assert lines[3] == "TypeError alias_slack must be a number, not str '0.1'"
    assert lines[4].startswith("InvalidArgumentError alias_slack is -1"), lines[4]
    assert lines[5] == "True 0.05"


def test_follow_graph_captures_round_trips_and_reaches_the_pool():
    out = run_script("""
        import tidepool
        print(tidepool.get_pool_options()["follow_graph_captures"])
        try:
            tidepool.set_pool_options(follow_graph_captures="no")
        except TypeError as e:
            print(str(e).split(":", 1)[1].strip())
        tidepool.set_pool_options(follow_graph_captures=False)
        print(tidepool.get_pool_options()["follow_graph_captures"])
        tidepool.deallocate(tidepool.allocate(4 << 20))  # a pool made with it
        s = tidepool.stats()
        print(s.graphs, s.graph_kept_bytes)
    """)
    assert out.strip().splitlines() == [
        "True", "follow_graph_captures must be True or False, not 'no'", "False", "0 0"]


def test_compact_on_out_of_memory_round_trips():
    out = run_script("""
        import tidepool
        print(tidepool.get_pool_options()["compact_on_out_of_memory"])
        try:
            tidepool.set_pool_options(compact_on_out_of_memory=1)
        except TypeError as e:
            print(str(e).split(":", 1)[1].strip())
        tidepool.set_pool_options(compact_on_out_of_memory=True)
        print(tidepool.get_pool_options()["compact_on_out_of_memory"])
        tidepool.deallocate(tidepool.allocate(4 << 20))  # a pool made with it
    """)
    assert out.strip().splitlines() == [
        "False", "compact_on_out_of_memory must be True or False, not 1", "True"]


def test_unknown_options_are_refused(tp):
    with pytest.raises(TypeError, match="bytecap"):
        tp.set_pool_options(bytecap=1)
