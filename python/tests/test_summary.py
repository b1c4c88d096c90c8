"""tidepool.summary() and tidepool.available_bytes() on a machine of known size."""

from sim_support import GiB, MiB, run_script


def test_summary_lists_used_devices_only():
    out = run_script(f"""
        import tidepool
        ptr = tidepool.allocate({256 * MiB}, device=1)
        print(tidepool.summary())
        tidepool.deallocate(ptr)
    """, TIDEPOOL_SIM_DEVICES=3)
    lines = out.strip().splitlines()
    assert "3 device(s), 1 opened by this process" in lines[0]
    header = lines[1].split()
    assert header[0] == "device"
    rows = [line.split()[0] for line in lines[2:] if line.strip()[:1].isdigit()]
    assert rows == ["1"]
    assert "256.0 MiB" in out


def test_available_bytes_per_device():
    out = run_script(f"""
        import tidepool
        ptr = tidepool.allocate({512 * MiB}, device=0)
        print(tidepool.available_bytes(0), tidepool.available_bytes(1), tidepool.has_context(1))
    """, TIDEPOOL_SIM_DEVICES=2, TIDEPOOL_SIM_CAPACITY="2GiB")
    first, second, context = out.split()
    assert int(first) <= 2 * GiB - 512 * MiB
    assert int(first) >= 2 * GiB - 512 * MiB - 2 * MiB
    assert int(second) == 2 * GiB
    assert context == "False"
