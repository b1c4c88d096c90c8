"""bench/synthetic/make_traces.py: the traces it writes are well-formed replay logs (every free names
a live allocation of the same size, sizes are multiples of 512, times rise) and the same seed
gives the same traces."""

import csv
import gzip
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO_ROOT, "bench", "synthetic", "make_traces.py")
NAMES = ("moe", "server", "mixed", "ckpt", "rl", "ddp", "fsdp", "pair", "gnn", "unet", "amr", "eval", "curriculum",
         "pipe", "krylov", "infer", "offload", "adapters")


def _write(out, seed):
    subprocess.run([sys.executable, SCRIPT, str(out), str(seed)], check=True, capture_output=True, text=True)
    return {name: os.path.join(out, f"{name}.csv.gz") for name in NAMES}


def _rows(path):
    with gzip.open(path, "rt") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("seed1"), 1)


@pytest.mark.parametrize("name", NAMES)
def test_every_free_names_a_live_allocation(traces, name):
    rows = _rows(traces[name])
    assert rows and set(rows[0]) == {"Thread", "Time", "Action", "Pointer", "Size", "Stream"}
    live = {}
    last_time = ""
    for i, row in enumerate(rows, start=2):
        size = int(row["Size"])
        assert size > 0 and size % 512 == 0, f"line {i}"
        assert row["Time"] > last_time, f"line {i}: times must rise"
        last_time = row["Time"]
        if row["Action"] == "allocate":
            assert row["Pointer"] not in live, f"line {i}: pointer reused while live"
            live[row["Pointer"]] = size
        else:
            assert row["Action"] == "free", f"line {i}"
            assert live.pop(row["Pointer"]) == size, f"line {i}"


def test_the_same_seed_gives_the_same_traces(traces, tmp_path):
    again = _write(tmp_path / "again", 1)
    other = _write(tmp_path / "other", 2)
    for name in NAMES:
        assert _rows(again[name]) == _rows(traces[name])
        assert _rows(other[name]) != _rows(traces[name])


def test_the_data_parallel_trace_frees_its_buckets_on_a_second_stream(traces):
    allocated_on = {}
    freed_elsewhere = 0
    for row in _rows(traces["ddp"]):
        if row["Action"] == "allocate":
            allocated_on[row["Pointer"]] = row["Stream"]
            assert row["Stream"] == "0x0"
        elif row["Stream"] != allocated_on[row["Pointer"]]:
            assert row["Stream"] == "0x1001" and int(row["Size"]) == 25 << 20
            freed_elsewhere += 1
    assert freed_elsewhere > 100


def test_the_sharded_trace_allocates_and_frees_on_three_streams(traces):
    allocated_on = {}
    rows_by_stream = {}
    for row in _rows(traces["fsdp"]):
        rows_by_stream[row["Stream"]] = rows_by_stream.get(row["Stream"], 0) + 1
        if row["Action"] == "allocate":
            allocated_on[row["Pointer"]] = row["Stream"]
        else:
            assert row["Stream"] == allocated_on[row["Pointer"]], "each buffer is freed on its own stream"
    assert set(rows_by_stream) == {"0x0", "0x1001", "0x1002"}
    assert min(rows_by_stream.values()) > 100


def test_the_pair_trace_runs_two_loops_on_two_streams(traces):
    streams = {}
    for row in _rows(traces["pair"]):
        streams.setdefault(row["Stream"], set()).add(row["Action"])
    assert streams == {"0x0": {"allocate", "free"}, "0x1001": {"allocate", "free"}}


def test_bad_arguments_are_refused():
    result = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
    assert result.returncode != 0 and "usage" in result.stderr
