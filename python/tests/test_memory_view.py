"""Seeing memory from Python: tidepool.record() / stop_recording() and TIDEPOOL_RECORD (files the
replay reads, a killed process's too), describe() and memory_summary() (what release() could
return), summary()'s columns, and dump_snapshot() in the schema of torch.cuda.memory._snapshot(),
fed to torch.cuda._memory_viz when torch is importable, every tag's memory in it."""

import gzip
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from sim_support import MiB, run_script, sim_environment, tool_path


def _rows(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    assert lines[0] == "Thread,Time,Action,Pointer,Size,Stream"
    return [line.split(",") for line in lines[1:]]


def test_record_writes_every_allocation_and_free(tmp_path):
    path = tmp_path / "run.csv.gz"
    run_script(f"""
        import tidepool
        kept = tidepool.allocate({3 * MiB})
        tidepool.record({str(path)!r})
        assert tidepool.recording_path() == {str(path)!r}
        for i in range(100):
            tidepool.deallocate(tidepool.allocate(4096 * (1 + i % 5)))
        tidepool.deallocate(kept)
        tidepool.stop_recording()
        assert tidepool.recording_path() is None
        tidepool.allocate(512)  # not recorded
    """)
    rows = _rows(path)
    assert len(rows) == 1 + 200 + 1
    assert rows[0][0] == "0" and rows[0][2] == "allocate" and int(rows[0][4]) == 3 * MiB
    assert rows[-1][2] == "free" and rows[-1][3] == rows[0][3]
    assert sum(1 for r in rows if r[2] == "allocate") == 101
    tool = tool_path()
    if tool is not None:  # and the replay reads it
        result = subprocess.run([tool, "replay", "--json", "--allocators", "tidepool", str(path)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert '"operations": 202' in result.stdout  # every row


def test_the_environment_records_a_whole_run(tmp_path):
    path = tmp_path / "env-%p.csv"
    out = run_script("""
        import os, tidepool
        for i in range(10):
            tidepool.deallocate(tidepool.allocate(1 << 20))
        print(os.getpid(), tidepool.recording_path())
    """, TIDEPOOL_RECORD=str(path))
    pid, recorded = out.split()
    assert recorded == str(tmp_path / f"env-{pid}.csv")
    assert len(_rows(recorded)) == 20  # written at exit


def test_a_killed_process_leaves_a_readable_recording(tmp_path):
    path = tmp_path / "killed.csv.gz"
    source = textwrap.dedent(f"""
        import sys, tidepool
        tidepool.record({str(path)!r})
        print("recording", flush=True)
        while True:
            p = [tidepool.allocate(4096 * (1 + i)) for i in range(16)]
            for q in p:
                tidepool.deallocate(q)
    """)
    child = subprocess.Popen([sys.executable, "-c", source], env=sim_environment(), stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "recording"
        deadline = time.time() + 60
        while (not path.exists() or path.stat().st_size < 100_000) and time.time() < deadline:
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert path.stat().st_size >= 100_000
    tool = tool_path()
    if tool is None:
        pytest.skip("the tidepool command line is not built")
    result = subprocess.run([tool, "info", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    result = subprocess.run([tool, "replay", "--allocators", "tidepool", str(path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr


def test_record_refuses_bad_input(tp, tmp_path):
    with pytest.raises(TypeError):
        tp.record(5)
    with pytest.raises(tp.TidepoolError, match="cannot create the recording"):
        tp.record(tmp_path / "no-such-dir" / "x.csv")
    tp.stop_recording()  # none running: fine


def test_describe_and_memory_summary_say_what_release_would_return():
    out = run_script(f"""
        import tidepool
        ptrs = [tidepool.allocate({8 * MiB}) for _ in range(8)]
        small = [tidepool.allocate(1000) for _ in range(10)]
        for p in ptrs[::2]:
            tidepool.deallocate(p)
        d = tidepool.describe(0)
        m = tidepool.memory_summary(0)
        assert m.held_bytes == m.in_use_bytes + m.cached_bytes, m
        assert d["held_bytes"] == m.held_bytes and d["releasable_bytes"] == m.releasable_bytes
        live = [b for b in d["blocks"] if b["state"] == "live"]
        assert sorted(b["address"] for b in live) == sorted(ptrs[1::2] + small)
        assert {{b["requested"] for b in live}} == {{{8 * MiB}, 1000}}
        assert sum(size for _, size in d["handles"]) == m.held_bytes
        free = [b["size"] for b in d["blocks"] if b["state"] == "free"]
        assert m.largest_free_block == max(free)
        print(m.releasable_bytes, tidepool.release(0))
    """)
    releasable, released = map(int, out.split())
    assert releasable == released >= 4 * 8 * MiB


def test_summary_shows_held_in_use_cached_largest_free_and_releasable():
    out = run_script(f"""
        import tidepool
        a = tidepool.allocate({64 * MiB}); b = tidepool.allocate({64 * MiB})
        tidepool.deallocate(a)
        print(tidepool.summary())
    """)
    header = out.splitlines()[1]
    for column in ("held", "in use", "cached", "largest free", "releasable"):
        assert column in header
    assert out.count("64.0 MiB") >= 3  # in use, cached, largest free, releasable


SNAPSHOT_SCRIPT = f"""
    import pickle, sys, tidepool
    tidepool.record(sys.argv[1] + ".csv")
    keep = [tidepool.allocate(size) for size in (1000, 5000, {3 * MiB}, {40 * MiB})]
    for i in range(20):
        tidepool.deallocate(tidepool.allocate({MiB} * (1 + i % 4)))
    tidepool.deallocate(keep.pop(2))
    try:
        tidepool.allocate({4096 * MiB - 16 * MiB})
    except tidepool.OutOfMemoryError:
        pass
    tidepool.release(0)
    tidepool.dump_snapshot(sys.argv[1])
"""


def _snapshot(tmp_path):
    path = tmp_path / "snapshot.pickle"
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SNAPSHOT_SCRIPT), str(path)],
                            env=sim_environment(TIDEPOOL_SIM_CAPACITY="4GiB"), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    with open(path, "rb") as f:
        return pickle.load(f)


def test_the_snapshot_and_describe_cover_every_tags_memory():
    out = run_script(f"""
        import json
        import tidepool
        plain = tidepool.allocate({2 * MiB})
        with tidepool.region("weights"):
            weights = tidepool.allocate({3 * MiB})
        with tidepool.region("kv-cache"):
            cache = tidepool.allocate({5 * MiB})
        def live(segments):
            return sorted(b["address"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
        snap = tidepool.memory_snapshot()
        by_pool = {{}}
        for s in snap["segments"]:
            by_pool.setdefault(str(s["segment_pool_id"]), []).extend(
                b["address"] for b in s["blocks"] if b["state"] == "active_allocated")
        tagged = tidepool.describe(0, tag="kv-cache")
        def refusals():
            for call in (lambda: tidepool.memory_snapshot("kv-cache"), lambda: tidepool.memory_snapshot((0,)),
                         lambda: tidepool.memory_snapshot((0, 1.0)), lambda: tidepool.describe(0, tag=3)):
                try:
                    call()
                except Exception as e:
                    yield e
        print(json.dumps({{
            "tags": tidepool.tags(),
            "all": live(snap["segments"]), "expected_all": sorted([plain, weights, cache]),
            "by_pool": by_pool, "plain": plain, "weights": weights, "cache": cache,
            "weights_id": tidepool.tag_pool_id("weights"),
            "only_weights": live(tidepool.memory_snapshot(tidepool.tag_pool_id("weights"))["segments"]),
            "only_untagged": live(tidepool.memory_snapshot((0, 0))["segments"]),
            "tagged_live": [b["address"] for b in tagged["blocks"] if b["state"] == "live"],
            "tagged_in_use": tagged["in_use_bytes"], "tag_stats_in_use": tidepool.tag_stats("kv-cache").in_use_bytes,
            "never": tidepool.describe(0, tag="never-used")["held_bytes"], "tags_after": tidepool.tags(),
            "refused": [type(e).__name__ for e in refusals()],
        }}))
    """)
    import json
    r = json.loads(out.strip().splitlines()[-1])
    assert r["tags"] == ["weights", "kv-cache"] == r["tags_after"], r
    assert r["all"] == r["expected_all"], r
    assert r["by_pool"] == {"(0, 0)": [r["plain"]], "(0, 1)": [r["weights"]], "(0, 2)": [r["cache"]]}, r
    assert r["weights_id"] == [0, 1], r
    assert r["only_weights"] == [r["weights"]] and r["only_untagged"] == [r["plain"]], r
    assert r["tagged_live"] == [r["cache"]] and r["tagged_in_use"] == r["tag_stats_in_use"] == 5 * MiB, r
    assert r["never"] == 0, r
    assert r["refused"] == ["TypeError"] * 4, r


def test_dump_snapshot_has_pytorchs_schema(tmp_path):
    snap = _snapshot(tmp_path)
    assert set(snap) >= {"segments", "device_traces"}
    assert len(snap["device_traces"]) == 1
    total_allocated = 0
    for seg in snap["segments"]:
        for key, kind in (("device", int), ("address", int), ("total_size", int), ("allocated_size", int),
                          ("active_size", int), ("requested_size", int), ("stream", int), ("segment_type", str),
                          ("segment_pool_id", tuple), ("is_expandable", bool), ("frames", list),
                          ("blocks", list)):
            assert isinstance(seg[key], kind), (key, seg)
        assert seg["segment_type"] in ("small", "large")
        address = seg["address"]
        for b in seg["blocks"]:  # blocks tile the segment in address order
            assert b["address"] == address
            assert b["state"] in ("active_allocated", "active_pending_free", "inactive")
            assert isinstance(b["frames"], list) and 0 <= b["requested_size"] <= b["size"]
            address += b["size"]
        assert address == seg["address"] + seg["total_size"]
        allocated = sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        assert seg["allocated_size"] == allocated <= seg["active_size"] <= seg["total_size"]
        total_allocated += allocated
    live = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert sorted(b["requested_size"] for b in live) == [1000, 5000, 40 * MiB]
    assert total_allocated >= 1000 + 5000 + 40 * MiB
    trace = snap["device_traces"][0]
    actions = [e["action"] for e in trace]
    for action in ("alloc", "free_requested", "free_completed", "segment_map", "segment_unmap", "oom"):
        assert action in actions, action
    for e in trace:
        assert {"action", "size", "stream", "time_us", "frames"} <= set(e)
        assert ("device_free" if e["action"] == "oom" else "addr") in e
    times = [e["time_us"] for e in trace]
    assert times == sorted(times) and times[0] > 1_500_000_000 * 10**6  # microseconds since the epoch
    allocs = {e["addr"] for e in trace if e["action"] == "alloc"}
    assert all(e["addr"] in allocs for e in trace if e["action"] == "free_completed")


def test_torch_memory_viz_reads_the_snapshot(tmp_path):
    memory_viz = pytest.importorskip("torch.cuda._memory_viz")
    snap = _snapshot(tmp_path)
    assert "total_reserved" in memory_viz.segsum(snap)  # asserts that blocks account for every byte
    assert "cudaMalloc" in memory_viz.trace(snap) or "free completed" in memory_viz.trace(snap)
    assert "active_allocated" in memory_viz.segments(snap, format_flamegraph=lambda text: text)
    assert memory_viz.memory(snap, format_flamegraph=lambda text: text)
    for plot in ("trace_plot", "segment_plot"):  # PyTorch 2.1 and later
        if hasattr(memory_viz, plot):
            assert "<!DOCTYPE html>" in getattr(memory_viz, plot)(snap)
