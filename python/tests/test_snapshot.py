"""tidepool.snapshot: a PyTorch memory snapshot (built here in the structure of
torch.cuda.memory._snapshot(), no torch needed) converted to an RMM replay log, checked row by row
and, where the C++ tool is built, read back by `tidepool replay`."""

import gzip
import lzma
import os
import pickle
import subprocess
import sys

import pytest

PYTHON_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_ROOT not in sys.path:
    sys.path.insert(0, PYTHON_ROOT)


from tidepool import snapshot as snapshot_module  # noqa: E402  (after the path above)
STREAM = 0x55D0C0FFEE00


def _entry(action, addr, size, stream=0, time_us=1_700_000_000_000_000):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": time_us,
            "frames": [{"filename": "train.py", "line": 1, "name": "step"}]}


def _snapshot():
    trace = [
        _entry("free_completed", 0x7F0000000000, 512),          # allocated before the trace began
        _entry("segment_alloc", 0x7F1000000000, 20971520),
        _entry("alloc", 0x7F1000000000, 3145728),
        _entry("alloc", 0x7F1000300000, 1024, stream=STREAM),
        _entry("free_requested", 0x7F1000000000, 3145728),
        _entry("free_completed", 0x7F1000000000, 3145728, time_us=1_700_000_000_000_123),
        _entry("oom", 0, 1 << 40),
        _entry("segment_free", 0x7F1000000000, 20971520),
    ]
    return {"segments": [], "device_traces": [trace, []]}


def test_converts_allocs_and_completed_frees_with_streams(tmp_path):
    rows, dropped = snapshot_module.convert(_snapshot())
    assert dropped == 1
    assert [r.split(",")[2] for r in rows] == ["allocate", "allocate", "free", "allocate failure"]
    assert rows[0].endswith(",allocate,0x7f1000000000,3145728,0x0\n")
    assert rows[1].endswith(f",allocate,0x7f1000300000,1024,{STREAM:#x}\n")
    assert rows[2].split(",")[1] == "22:13:20.000123"  # time of day of time_us (UTC)


def test_command_line_writes_plain_gzip_and_xz_logs(tmp_path):
    pickle_path = tmp_path / "snap.pickle"
    pickle_path.write_bytes(pickle.dumps(_snapshot()))
    for name in ("out.csv", "out.csv.gz", "out.csv.xz"):
        out = tmp_path / name
        assert snapshot_module.main([str(pickle_path), str(out)]) == 0
        raw = out.read_bytes()
        decompress = {".gz": gzip.decompress, ".xz": lzma.decompress}.get(out.suffix, bytes)
        text = decompress(raw).decode()
        lines = text.splitlines()
        assert lines[0] == "Thread,Time,Action,Pointer,Size,Stream"
        assert len(lines) == 5


def test_runs_as_a_module(tmp_path):
    pickle_path = tmp_path / "snap.pickle"
    pickle_path.write_bytes(pickle.dumps(_snapshot()))
    out = tmp_path / "out.csv.gz"
    env = dict(os.environ, PYTHONPATH=PYTHON_ROOT)
    result = subprocess.run([sys.executable, "-m", "tidepool.snapshot", str(pickle_path), str(out)],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "4 rows" in result.stdout and "1 frees" in result.stdout


def test_rejects_what_is_not_a_snapshot(tmp_path):
    with pytest.raises(snapshot_module.SnapshotError):
        snapshot_module.convert({"segments": []})
    with pytest.raises(snapshot_module.SnapshotError, match="device 3"):
        snapshot_module.convert(_snapshot(), device=3)
    bad = {"device_traces": [[{"action": "alloc", "addr": 1}]]}
    with pytest.raises(snapshot_module.SnapshotError, match=r"device_traces\[0\]\[0\]"):
        snapshot_module.convert(bad)
    pickle_path = tmp_path / "not.pickle"
    pickle_path.write_bytes(b"not a pickle")
    assert snapshot_module.main([str(pickle_path), str(tmp_path / "o.csv")]) == 2


def _tool():
    root = os.path.dirname(PYTHON_ROOT)
    for build in (os.environ.get("TIDEPOOL_BUILD_DIR", ""), "build"):
        path = os.path.join(root, build, "tools", "tidepool") if build else ""
        if path and os.access(path, os.X_OK):
            return path
    library = os.environ.get("TIDEPOOL_LIBRARY", "")
    if library:  # $BUILD/src/libtidepool.so -> $BUILD/tools/tidepool
        path = os.path.join(os.path.dirname(os.path.dirname(library)), "tools", "tidepool")
        if os.access(path, os.X_OK):
            return path
    return None


def test_the_replay_tool_reads_the_converted_log(tmp_path):
    tool = _tool()
    if tool is None:
        pytest.skip("the tidepool command line is not built")
    out = tmp_path / "snap.csv.gz"
    rows, _ = snapshot_module.convert(_snapshot())
    snapshot_module.write_log(rows, out)
    result = subprocess.run([tool, "replay", "--json", "--allocators", "caching", str(out)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert '"peak_held_bytes": 23068672' in result.stdout  # a 20 MiB segment and a 2 MiB one
