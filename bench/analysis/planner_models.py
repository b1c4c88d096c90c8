"""What a layout planned with knowledge of the future could hold, against best fit, on an RMM replay
log (a `traces/` file): the bound on the "learn the repeating pattern of a training step" idea of
issue 15 (offline planners such as STAlloc), measured before anything of it is built.

Requests of 1 MiB and more (tidepool's large arena) are laid out in one address space; requests
below that go to a space of their own placed by best fit (best_fit_models.Space), as in tidepool.
Four layouts of the large requests:

  best-fit:  best_fit_models' `small-apart` model: best fit, the small requests in a space of their
             own (what tidepool and expandable segments reach).
  planned:   every large block's size and lifetime known in advance (an oracle): blocks placed
             largest first, each at the smallest gap between the blocks already placed that live
             at the same time, or above them all (greedy by size, the TensorFlow Lite planner's
             rule). The address space's top is the memory held; nothing moves once placed, so a
             pool that followed the plan would make no driver call after reaching it.
  planned-steps: the same oracle, but planned one step at a time: blocks that outlive a step
             (weights, optimizer state, anything alive at a step's end) are placed first and keep
             the address they were given, and each step's own blocks are laid out around them and
             around what earlier steps left live. A step starts where the large bytes live come
             down to the loop's floor. A planner that learns one step and lays out the next knows
             less than this (not the next step's sizes, nor which blocks will outlive it).
  learned:   a planner that learns each step from the one before it (learned_top): what the oracle
             figures are worth once the next step's sizes and lifetimes must be predicted.

Prints peak held / peak live (held: the small space's top plus the large layout's top, in 2 MiB
pages; live: the trace's own peak of bytes in use, requests rounded up to 512 bytes).

With --excess, also where best fit's excess lies: the large space's last growth, the request that
made it and the free blocks below the top when it came (best_fit_excess).

    python3 bench/analysis/planner_models.py [--layouts best-fit,learned,...] [--excess] TRACE...
"""

import argparse
import bisect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from best_fit_models import MiB, PAGE, Space, names_from, read_rows, round_up  # noqa: E402

LARGE = MiB
BUCKET = 4096  # events per bucket of the time index
SMALLEST_STEP = 8  # large allocations: fewer between two floors are not a step to learn
LAYOUTS = ("best-fit", "planned", "planned-steps", "learned")


def blocks_of(rows):
    """(start, end, size, is_large) of each allocation, times as event indexes; blocks never freed
    end after the last event. Also the peak of bytes live."""
    live = {}
    blocks = []
    live_bytes = peak = 0
    for t, (action, pointer, size) in enumerate(rows):
        if action == "allocate":
            size = round_up(max(size, 1), 512)
            live[pointer] = (t, size)
            live_bytes += size
            peak = max(peak, live_bytes)
        elif action == "free" and pointer in live:
            start, size = live.pop(pointer)
            blocks.append((start, t, size, size >= LARGE))
            live_bytes -= size
    end = len(rows)
    for start, size in live.values():
        blocks.append((start, end, size, size >= LARGE))
    return blocks, peak


def replay_into(space, blocks, large):
    """Replays the large blocks, or the small ones, in time order through `space` (a
    best_fit_models.Space); returns the peak of their bytes in use."""
    events = []
    for i, (start, end, _, is_large) in enumerate(blocks):
        if is_large == large:
            events.append((start, 1, i))
            events.append((end, 0, i))
    events.sort()
    address = {}
    live = peak = 0
    for _, is_alloc, i in events:
        size = blocks[i][2]
        if is_alloc:
            address[i] = space.take(size)
            live += size
            peak = max(peak, live)
        else:
            space.release(address.pop(i), size)
            live -= size
    return peak


def best_fit_space_top(blocks, large):
    """The top of a best-fit space (best_fit_models.Space) holding the large blocks, or the small
    ones, replayed in time order."""
    space = Space()
    replay_into(space, blocks, large)
    return space.held


def small_space_top(blocks):
    return best_fit_space_top(blocks, False)


def best_fit_top(blocks):
    return best_fit_space_top(blocks, True)


class TimeIndex:
    """Placed blocks by the time buckets their lifetimes cross."""

    def __init__(self, horizon):
        self.buckets = [[] for _ in range(horizon // BUCKET + 2)]

    def add(self, start, end, offset, size):
        for b in range(start // BUCKET, (max(end, start + 1) - 1) // BUCKET + 1):
            self.buckets[b].append((start, end, offset, size))

    def overlapping(self, start, end):
        seen = set()
        out = []
        for b in range(start // BUCKET, (max(end, start + 1) - 1) // BUCKET + 1):
            for entry in self.buckets[b]:
                s, e, _, _ = entry
                if s < end and start < e and entry not in seen:
                    seen.add(entry)
                    out.append(entry)
        return out


def place(index, start, end, size):
    """Places a block of `size` living over [start, end) in the smallest gap that holds it among the
    blocks placed that live at the same time, or above them all; returns the block's end."""
    taken = sorted((o, o + s) for _, _, o, s in index.overlapping(start, end))
    best = None
    cursor = 0
    for lo, hi in taken:
        if lo - cursor >= size and (best is None or lo - cursor < best[0]):
            best = (lo - cursor, cursor)
        cursor = max(cursor, hi)
    offset = best[1] if best else cursor
    index.add(start, end, offset, size)
    return offset + size


def planned_top(blocks, horizon):
    """The top of the oracle's layout: every large block placed, largest first."""
    index = TimeIndex(horizon)
    top = 0
    for start, end, size, _ in sorted((b for b in blocks if b[3]), key=lambda b: (-b[2], b[0])):
        top = max(top, place(index, start, end, size))
    return top


def step_starts(blocks, horizon):
    """Where steps start: each time the large bytes live come down to the loop's floor (their least
    after the trace's first quarter, plus 2% of their peak) and a large allocation follows."""
    change = [0] * (horizon + 2)
    for start, end, size, large in blocks:
        if large:
            change[start] += size
            change[end] -= size
    live = [0] * (horizon + 1)
    running = 0
    for t in range(horizon + 1):
        running += change[t]
        live[t] = running
    floor = min(live[horizon // 4:horizon]) + 0.02 * max(live)
    starts = [0]
    low = False
    allocates = set(b[0] for b in blocks if b[3])
    for t in range(horizon):
        if live[t] <= floor:
            low = True
        elif low and t in allocates:
            starts.append(t)
            low = False
    return starts


def planned_steps_top(blocks, horizon, starts=None):
    """Each step planned with its own sizes known, the blocks alive at its start fixed where the
    plans before it put them. `starts`: step_starts' answer, where the caller has it already."""
    starts = (step_starts(blocks, horizon) if starts is None else starts) + [horizon + 1]
    large = sorted((b for b in blocks if b[3]), key=lambda b: b[0])
    index = TimeIndex(horizon)
    top = 0
    i = 0
    for k in range(len(starts) - 1):
        step = []
        while i < len(large) and large[i][0] < starts[k + 1]:
            step.append(large[i])
            i += 1
        # The blocks that outlive the step first (they stay where they go), then the step's own.
        for start, end, size, _ in sorted(step, key=lambda b: (b[1] < starts[k + 1], -b[2], b[0])):
            top = max(top, place(index, start, end, size))
    return top


class Occupancy:
    """The large blocks live now, by address: whether a range is free, and best fit's gap."""

    def __init__(self):
        self.starts = []  # sorted offsets of live blocks
        self.size_at = {}
        self.top = 0

    def is_free(self, offset, size):
        i = bisect.bisect_left(self.starts, offset + size)
        if i == 0:
            return True
        before = self.starts[i - 1]
        return before + self.size_at[before] <= offset

    def best_fit(self, size):
        best = None
        cursor = 0
        for o in self.starts:
            gap = o - cursor
            if gap >= size and (best is None or gap < best[0]):
                best = (gap, cursor)
            cursor = max(cursor, o + self.size_at[o])
        return best[1] if best else cursor

    def add(self, offset, size):
        bisect.insort(self.starts, offset)
        self.size_at[offset] = size
        self.top = max(self.top, offset + size)

    def remove(self, offset):
        self.starts.pop(bisect.bisect_left(self.starts, offset))
        del self.size_at[offset]


def learned_top(blocks, horizon, window=4, starts=None):
    """A planner that learns a step from the ones before it. The last step's large allocations, in
    order, are the plan's entries: each expected to be as large as the largest allocation matched
    to it (and to the entries it came from) over the steps so far, and to live as long, in the
    step's own events, as it did in the last step. The plan lays the entries out around the blocks
    live at the step's start (what outlived the last step first, then largest first). An
    allocation is matched to the next entry the last step gave its exact size, looking `window`
    entries ahead (a step may make an allocation more or fewer than the last), else to the next
    entry if that is large enough; it takes the entry's place if that is free. Anything else is
    placed by best fit among the blocks live and the places of the entries not yet taken. The
    first step is best fit. `starts`: step_starts' answer, where the caller has it already."""
    starts = set((step_starts(blocks, horizon) if starts is None else starts)[1:])
    large = [(b[0], b[1], b[2]) for b in blocks if b[3]]
    events = sorted([(s, 1, i) for i, (s, _, _) in enumerate(large)] + [(e, 0, i) for i, (_, e, _) in enumerate(large)])
    occupancy = Occupancy()
    offset_of = {}
    last = None  # the last step's entries: (relative start, relative end or None, size, largest size)
    plan = []  # (offset, size) of each entry of the plan
    taken = []
    step_start = 0
    pointer = 0
    current = []  # this step's allocations: (block index, the entry matched or None)
    planned = fallback = 0

    def horizon_of(entries):
        return max((e[1] if e[1] is not None else e[0] + 1) for e in entries) + 1

    def make_plan():
        if last is None:
            return []
        step_horizon = horizon_of(last)
        index = TimeIndex(step_horizon + BUCKET)
        for o in occupancy.starts:  # live at the step's start: in the way for the whole step
            index.add(0, step_horizon, o, occupancy.size_at[o])
        placed = [None] * len(last)
        order = sorted(range(len(last)), key=lambda j: (last[j][1] is not None, -last[j][3], last[j][0]))
        for j in order:
            rs, re_, _, size = last[j]
            end = re_ if re_ is not None else step_horizon
            placed[j] = (place(index, rs, max(end, rs + 1), size) - size, size)
        return placed

    def match(size):
        nonlocal pointer
        for q in range(pointer, min(pointer + window, len(plan))):
            if not taken[q] and last[q][2] == size:
                pointer = q + 1
                return q
        if pointer < len(plan) and not taken[pointer] and plan[pointer][1] >= size:
            pointer += 1
            return pointer - 1
        return None

    def fallback_offset(size):
        # Best fit among the blocks live and the places the rest of the plan will take.
        saved = list(occupancy.starts), dict(occupancy.size_at), occupancy.top
        for q, (o, z) in enumerate(plan):
            if not taken[q] and q >= pointer and o not in occupancy.size_at and occupancy.is_free(o, z):
                occupancy.add(o, z)
        offset = occupancy.best_fit(size)
        occupancy.starts, occupancy.size_at, occupancy.top = saved
        return offset

    for t, is_alloc, i in events:
        if is_alloc and t in starts:
            if len(current) >= SMALLEST_STEP:  # a stray allocation at the floor is not a step
                entries = []
                for j, q in current:
                    s0, e0, size = large[j]
                    largest = max(size, last[q][3]) if q is not None else size
                    entries.append((s0 - step_start, e0 - step_start if e0 < t else None, size, largest))
                last = entries
            step_start, pointer, current = t, 0, []
            plan = make_plan()
            taken = [False] * len(plan)
        if is_alloc:
            size = large[i][2]
            q = match(size) if plan else None
            offset = None
            if q is not None and plan[q][1] >= size and occupancy.is_free(plan[q][0], size):
                offset = plan[q][0]
                taken[q] = True
                planned += 1
            if offset is None:
                offset = fallback_offset(size) if plan else occupancy.best_fit(size)
                fallback += 1
            occupancy.add(offset, size)
            offset_of[i] = offset
            current.append((i, q))
        else:
            occupancy.remove(offset_of.pop(i))
    return occupancy.top, planned, fallback


class GrowthWatch(Space):
    """A best-fit space that remembers its last growth: the request that made it and the free
    blocks below the top at that moment (largest first)."""

    def __init__(self):
        super().__init__()
        self.last_growth = None

    def _grow(self, size):
        pieces = sorted((free for free, _ in self.free), reverse=True)
        super()._grow(size)
        self.last_growth = (size, pieces)


def best_fit_excess(blocks):
    """Where best fit's excess over peak in use lies in the large space: (peak of large bytes in
    use, the space's top, the request of the growth that last raised the top, the free blocks below
    the top when it came, largest first). On the LLM loops that growth is the loss's full-size
    logits meeting a hole of half their size (docs/RESULTS.md, section 0, "The LLM loops' excess")."""
    space = GrowthWatch()
    peak = replay_into(space, blocks, True)
    request, pieces = space.last_growth if space.last_growth else (0, [])
    return peak, space.held, request, pieces


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", help="RMM replay logs (CSV, plain, gzip or xz)")
    parser.add_argument("--layouts", default=",".join(LAYOUTS),
                        help="comma-separated, from " + ",".join(LAYOUTS) + " (the oracles take minutes on the "
                        "longest traces)")
    parser.add_argument("--excess", action="store_true",
                        help="also print where best fit's excess lies: the large space's last growth, its "
                        "request and the free blocks below the top when it came")
    args = parser.parse_args(argv)
    layouts = names_from(parser, args.layouts, LAYOUTS, "layout")
    for path in args.traces:
        rows = read_rows(path)
        blocks, peak = blocks_of(rows)
        if peak == 0:
            print(f"{os.path.basename(path)}: no allocation", flush=True)
            continue
        small = small_space_top(blocks)
        horizon = len(rows)
        figures = {}
        starts = step_starts(blocks, horizon)
        notes = [f"{len(starts)} steps found"]
        # --excess replays best fit itself; its top is the best-fit layout's, so that replay serves both.
        excess = best_fit_excess(blocks) if args.excess else None
        for name in layouts:
            if name == "best-fit":
                top = excess[1] if excess else best_fit_top(blocks)
            elif name == "planned":
                top = planned_top(blocks, horizon)
            elif name == "planned-steps":
                top = planned_steps_top(blocks, horizon, starts)
            else:
                top, planned, fallback = learned_top(blocks, horizon, starts=starts)
                notes.append(f"learned: {planned} allocations where planned, {fallback} by best fit")
            figures[name] = round_up(top, PAGE)
        text = ", ".join(f"{name} {(small + top) / peak:.4f}" for name, top in figures.items())
        notes.append(f"small space {small / MiB:.0f} MiB, peak live {peak / MiB:.0f} MiB")
        print(f"{os.path.basename(path)}: peak held / peak live: {text} ({'; '.join(notes)})", flush=True)
        if excess:
            large_peak, top, request, pieces = excess
            largest = ", ".join(f"{piece / MiB:.1f}" for piece in pieces[:3]) or "none"
            print(f"  best fit's large space: {large_peak / MiB:.0f} MiB in use at its peak, top {top / MiB:.0f} MiB; "
                  f"the last growth, for {request / MiB:.1f} MiB, found free below the top {largest} MiB "
                  f"(of {sum(pieces) / MiB:.1f} MiB free in {len(pieces)} pieces)", flush=True)


if __name__ == "__main__":
    main()
