"""Converts a PyTorch memory snapshot into an RMM replay log that `tidepool replay` reads.

    python3 -m tidepool.snapshot SNAPSHOT.pickle OUT.csv[.gz|.xz] [--device N]

The snapshot is the pickle of ``torch.cuda.memory._snapshot()`` taken after
``torch.cuda.memory._record_memory_history()``. Its ``device_traces[N]`` lists what the caching
allocator did; an ``alloc`` becomes an ``allocate`` row and a ``free_completed`` (the moment
PyTorch made the block reusable) a ``free`` row, with the address, the size as requested and the
stream kept; an ``oom`` becomes an ``allocate failure`` row. Other actions (segment maps and
frees, ``free_requested``, snapshots) are not requests and are left out. The trace buffer may
have started after some blocks were allocated: frees of addresses the trace never allocated are
dropped (and counted), so the log stays consistent for the reader.

Pure Python (pickle, gzip and lzma): torch is not needed to convert. A pickle is code: convert only
snapshots you trust.
"""

import argparse
import gzip
import io
import lzma
import pickle
import sys

HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"
_MICROSECONDS_PER_DAY = 86_400 * 1_000_000


class SnapshotError(ValueError):
    """The snapshot does not have the structure of torch.cuda.memory._snapshot()."""


def _time_of_day(time_us):
    t = int(time_us) % _MICROSECONDS_PER_DAY
    seconds, micros = divmod(t, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micros:06d}"


def _count(value, name):
    """A field that must be a whole number from 0 to 2**64 - 1 (the trace reader's range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{name} is a {type(value).__name__}")
    number = int(value)
    if number != value and not isinstance(value, str):
        raise ValueError(f"{name} {value!r} is not a whole number")
    if not 0 <= number < 1 << 64:
        raise ValueError(f"{name} {number} is out of range")
    return number


def convert(snapshot, device=0):
    """Returns (rows, dropped): the log's rows as strings (header excluded) for `device`, and the
    number of frees dropped because the trace never allocated their address."""
    if not isinstance(snapshot, dict) or "device_traces" not in snapshot:
        raise SnapshotError("not a torch.cuda.memory._snapshot(): no 'device_traces'")
    traces = snapshot["device_traces"]
    if not isinstance(traces, (list, tuple)):
        raise SnapshotError(f"'device_traces' is a {type(traces).__name__}, not a list of traces")
    if not 0 <= device < len(traces):
        raise SnapshotError(f"device {device} has no trace (the snapshot has {len(traces)})")
    if not isinstance(traces[device], (list, tuple)):
        raise SnapshotError(f"device_traces[{device}] is a {type(traces[device]).__name__}, not a list of entries")
    rows = []
    live = set()
    dropped = 0
    for index, entry in enumerate(traces[device]):
        try:
            action = entry["action"]
            if action not in ("alloc", "free_completed", "oom"):
                continue
            address = _count(entry.get("addr", 0), "addr")
            size = _count(entry["size"], "size")
            stream = _count(entry.get("stream", 0), "stream")
            when = _time_of_day(_count(entry.get("time_us", 0), "time_us"))
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise SnapshotError(f"device_traces[{device}][{index}]: bad entry {entry!r}: {e}") from None
        if action == "alloc":
            if address in live:
                raise SnapshotError(f"device_traces[{device}][{index}]: address {address:#x} allocated twice")
            live.add(address)
            rows.append(f"0,{when},allocate,{address:#x},{size},{stream:#x}\n")
        elif action == "free_completed":
            if address not in live:
                dropped += 1
                continue
            live.remove(address)
            rows.append(f"0,{when},free,{address:#x},{size},{stream:#x}\n")
        else:
            rows.append(f"0,{when},allocate failure,0x0,{size},{stream:#x}\n")
    return rows, dropped


def write_log(rows, path):
    """Writes the header and `rows` to `path`, gzip-compressed when it ends in .gz, xz-compressed
    when it ends in .xz (smaller than gzip: the form of the larger bundled traces)."""
    text = HEADER + "".join(rows)
    if str(path).endswith(".gz"):
        # mtime=0: the same snapshot always gives the same bytes.
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
            out.write(text.encode())
    elif str(path).endswith(".xz"):
        with lzma.open(path, "wb", preset=9) as out:
            out.write(text.encode())
    else:
        with io.open(path, "w", newline="\n") as out:
            out.write(text)


def main(argv=None):
    """The command line: converts one snapshot; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python3 -m tidepool.snapshot",
                                     description="Convert a PyTorch memory snapshot to an RMM replay log.")
    parser.add_argument("snapshot", help="pickle of torch.cuda.memory._snapshot()")
    parser.add_argument("out", help="output log, .csv, .csv.gz or .csv.xz")
    parser.add_argument("--device", type=int, default=0, help="which device's trace (default 0)")
    args = parser.parse_args(argv)
    try:
        with open(args.snapshot, "rb") as f:
            snapshot = pickle.load(f)
        rows, dropped = convert(snapshot, args.device)
    except (OSError, pickle.UnpicklingError, EOFError, SnapshotError) as e:
        print(f"tidepool.snapshot: {args.snapshot}: {e}", file=sys.stderr)
        return 2
    write_log(rows, args.out)
    note = f", {dropped} frees of blocks allocated before the trace began dropped" if dropped else ""
    print(f"{args.out}: {len(rows)} rows{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
