"""The snapshot converter under random input (issue 10). tidepool.snapshot is pure Python, so bad
input cannot crash the process; what can go wrong is an exception other than SnapshotError (a
traceback from the command line instead of its message) or a log the trace reader refuses. A
bounded random search (seeded, a few thousand snapshots shaped like torch's with random damage)
checks both: convert() either raises SnapshotError or returns rows in the reader's format."""

import random
import re

import pytest

from sim_support import PYTHON_ROOT  # noqa: F401  (puts the package on sys.path)
from tidepool import snapshot

ROW = re.compile(r"^0,\d\d:\d\d:\d\d\.\d{6},(allocate|free|allocate failure),0x[0-9a-f]+,\d+,0x[0-9a-f]+\n$")

ODD_VALUES = [None, -1, -(1 << 70), 0, 1, 1 << 64, 1.5, float("nan"), "7", "x", b"\x00", [], {}, (1,), True]


def random_value(rng):
    return rng.choice(ODD_VALUES + [rng.randrange(0, 1 << 48), rng.randrange(0, 1 << 20)])


def random_entry(rng):
    entry = {"action": rng.choice(["alloc", "free_completed", "oom", "segment_map", "free_requested", 3, None]),
             "addr": rng.choice([rng.randrange(0, 64) * 512, rng.randrange(0, 1 << 40)]),
             "size": rng.randrange(1, 1 << 30), "stream": rng.choice([0, 7, 1 << 40]),
             "time_us": rng.randrange(0, 1 << 45)}
    for _ in range(rng.randrange(0, 3)):  # damage
        key = rng.choice(list(entry) + ["other"])
        if rng.random() < 0.3:
            entry.pop(key, None)
        else:
            entry[key] = random_value(rng)
    if rng.random() < 0.03:
        return random_value(rng)
    return entry


def random_snapshot(rng):
    traces = [[random_entry(rng) for _ in range(rng.randrange(0, 12))] for _ in range(rng.randrange(0, 3))]
    snap = {"device_traces": traces, "segments": []}
    roll = rng.random()
    if roll < 0.05:
        snap["device_traces"] = random_value(rng)
    elif roll < 0.08:
        return random_value(rng)
    elif roll < 0.1 and traces:
        traces[0] = random_value(rng)
    return snap


@pytest.mark.parametrize("seed", range(4))
def test_random_snapshots_give_rows_or_snapshot_error(seed):
    rng = random.Random(seed)
    converted = refused = 0
    for _ in range(1500):
        snap = random_snapshot(rng)
        device = rng.choice([0, 0, 0, 1, -1])
        try:
            rows, dropped = snapshot.convert(snap, device)
        except snapshot.SnapshotError:
            refused += 1
            continue
        converted += 1
        assert dropped >= 0
        for row in rows:
            assert ROW.match(row), (row, snap)
    assert converted > 0 and refused > 0
