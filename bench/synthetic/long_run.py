"""A recorded loop as a long-running program runs it: its setup once, then its steps again and again.

`tidepool replay --passes N` replays the whole trace N times, setup included: between passes the
trace's leftovers (a model's weights, its optimizer's state) are freed and made again, in the
layout the last pass left. A training job makes them once. This script writes the trace a longer
run of the same program would make:

    long_run.py TRACE REPEATS OUT.csv.gz

The steps start at the trace's first step boundary after its setup: the earliest point where every
live block lives to the trace's end and they hold at least 95% of the bytes live at any such point
(the weights and the optimizer's state, nothing of a step). A loop that keeps a step's loss until
the next step makes its own has no such point once its optimizer's state is made; its steps then
start at the earliest point where the blocks that live to the end hold 95% of the most they hold
anywhere and the others (the kept loss) at most 5% of that. Everything after it is repeated
REPEATS - 1 more times, its times shifted so that they keep rising; blocks the steps leave live at
the end are freed before each repetition, and those live at the start that the steps free are made
again, so every repetition starts from that boundary. Peak in use is the original's, so
`replay --capacity Fx` gives the same device. It prints where the steps start and how many events
they hold (stderr). docs/RESULTS.md, section 0, "A long run: the setup once, the steps again".
"""

import csv
import gzip
import lzma
import sys

# A step boundary holding at least this share of the most live bytes any boundary holds ends the setup.
SETUP_SHARE = 0.95


def _open_text(path):
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.open(path, "rt", newline="")
    if magic.startswith(b"\xfd7zXZ"):
        return lzma.open(path, "rt", newline="")
    return open(path, "rt", newline="")


def _seconds(stamp):
    hours, minutes, seconds = stamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _stamp(seconds):
    # In whole microseconds, so that rounding never writes a 60th second.
    micros = round(seconds * 1_000_000)
    hours, micros = divmod(micros, 3_600_000_000)
    minutes, micros = divmod(micros, 60_000_000)
    whole, micros = divmod(micros, 1_000_000)
    return "%02d:%02d:%02d.%06d" % (hours, minutes, whole, micros)


def _points(events):
    """Every point before the trace's last allocation, in order: (index of the first event after it,
    bytes live in blocks that live to the trace's end, bytes and number of the other live blocks).
    One walk serves both kinds of step boundary below."""
    live_at_end = set()
    last_allocation = -1
    for i, event in enumerate(events):
        if event[2] == "allocate":
            live_at_end.add(event[3])
            last_allocation = i
        elif event[2] == "free":
            live_at_end.discard(event[3])
    sizes = {}
    setup_bytes = 0  # live bytes of blocks that live to the end
    outsider_bytes = 0
    outsiders = 0  # live blocks that do not live to the end
    points = []
    for i, event in enumerate(events[:last_allocation]):
        action, pointer = event[2], event[3]
        sign = 0
        if action == "allocate":
            sizes[pointer] = int(event[4])
            sign, size = 1, sizes[pointer]
        elif action == "free" and pointer in sizes:
            sign, size = -1, sizes.pop(pointer)
        if sign != 0 and pointer in live_at_end:
            setup_bytes += sign * size
        elif sign != 0:
            outsider_bytes += sign * size
            outsiders += sign
        points.append((i + 1, setup_bytes, outsider_bytes, outsiders))
    return points


def _near_boundary(points):
    """The fallback when every clean boundary comes before the setup is made (a loop that keeps a
    step's loss or gradients until the next step makes its own has no clean boundary after its first
    step): the earliest point at which the blocks that live to the end hold at least `SETUP_SHARE`
    of the most they hold anywhere, and the others at most 1 - `SETUP_SHARE` of that. Returns (index
    of the first event after it, the bytes that live to the end there) or None."""
    if not points:
        return None
    most = max(b for _, b, _, _ in points)
    return next(((i, b) for i, b, o, _ in points
                 if b > 0 and b >= SETUP_SHARE * most and o <= (1 - SETUP_SHARE) * b), None)


def steps_start(points):
    """Index of the first event of the steps, over `_points`: the earliest step boundary (a point
    where every live block lives to the trace's end, with an allocation after it) at which the live
    bytes are at least `SETUP_SHARE` of the most any boundary has (the weights and the optimizer's
    state made; a tensor a step keeps to the end does not move it), and the bytes live there (the
    setup's). Raises ValueError when the trace has none."""
    boundaries = [(i, b) for i, b, _, outsiders in points if outsiders == 0 and b > 0]
    if not boundaries:
        raise ValueError("no step boundary: no point before its last allocation where only blocks that "
                         "live to its end are live")
    most = max(b for _, b in boundaries)
    return next((i, b) for i, b in boundaries if b >= SETUP_SHARE * most)


def _leaves_little(kept_bytes, setup_bytes):
    """Whether steps leaving `kept_bytes` live repeat from a boundary with `setup_bytes` of setup:
    what they leave is at most 1 - `SETUP_SHARE` of it (a kept loss, not an optimizer's state)."""
    return kept_bytes <= (1 - SETUP_SHARE) * setup_bytes


def _repetition(events, start):
    """What a repetition from `start` needs: the allocations live there that the steps free (made
    again at each repetition's start, as the first run had them), the blocks the steps leave
    live (pointer -> its allocation; freed before each repetition), but for a pointer live at
    `start` too: the steps free it and make it again, so each repetition starts with it live; and
    those blocks' bytes."""
    live_before = {}
    for event in events[:start]:
        if event[2] == "allocate":
            live_before[event[3]] = event
        elif event[2] == "free":
            live_before.pop(event[3], None)
    freed_by_steps = set()
    left = {}
    for event in events[start:]:
        if event[2] == "allocate":
            left[event[3]] = event
        elif event[2] == "free":
            if event[3] not in left and event[3] in live_before:
                freed_by_steps.add(event[3])
            left.pop(event[3], None)
    remade = [live_before[p] for p in live_before if p in freed_by_steps and p not in left]
    for pointer in live_before:
        left.pop(pointer, None)
    return remade, left, sum(int(a[4]) for a in left.values())


def write_long_run(trace, repeats, out):
    """Writes `trace` with its steps run `repeats` times to `out` (gzip); returns the index where the
    steps start, their events, and the blocks and bytes they leave live (freed before each
    repetition)."""
    if repeats < 1:
        raise ValueError("REPEATS must be at least 1")
    with _open_text(trace) as f:
        rows = list(csv.reader(f))
    header, events = rows[0], rows[1:]
    points = _points(events)
    start, setup_bytes = steps_start(points)
    remade, left, kept_bytes = _repetition(events, start)
    if not _leaves_little(kept_bytes, setup_bytes):
        near = _near_boundary(points)
        if near is not None and near[0] > start:
            near_run = _repetition(events, near[0])
            if _leaves_little(near_run[2], near[1]):
                start, setup_bytes = near
                remade, left, kept_bytes = near_run
    if not _leaves_little(kept_bytes, setup_bytes):
        raise ValueError(f"the steps from event {start + 1} on leave {kept_bytes / (1 << 20):.1f} MiB live "
                         f"against the setup's {setup_bytes / (1 << 20):.1f} MiB: they make part of the setup "
                         "(an optimizer's state), and no later step boundary follows it")
    steps = events[start:]
    span = _seconds(steps[-1][1]) - _seconds(steps[0][1]) + 0.001
    with gzip.open(out, "wt", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(events)
        end = _seconds(events[-1][1])
        for k in range(1, repeats):
            for pointer, allocation in left.items():
                writer.writerow([allocation[0], _stamp(end), "free", pointer, allocation[4], allocation[5]])
            for allocation in remade:
                writer.writerow([allocation[0], _stamp(end), "allocate"] + allocation[3:])
            shift = k * span
            for event in steps:
                writer.writerow([event[0], _stamp(_seconds(event[1]) + shift)] + event[2:])
            end = _seconds(steps[-1][1]) + shift
    return start, len(steps), len(left), kept_bytes


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    try:
        repeats = int(argv[2])
        start, steps, kept, kept_bytes = write_long_run(argv[1], repeats, argv[3])
    except (OSError, ValueError) as e:
        sys.stderr.write(f"long_run.py: {argv[1]}: {e}\n")
        return 1
    sys.stderr.write(f"{argv[1]}: steps from event {start + 1} on ({steps} events), run {repeats} times; "
                     f"{kept} blocks ({kept_bytes / (1 << 20):.1f} MiB) they leave live freed before each repetition\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
