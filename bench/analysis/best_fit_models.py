"""Textbook models of a caching allocator, replayed on an RMM replay log (a `traces/` file), to
tell which property of an allocator a held / live figure comes from:

  single: one address space per device; best fit (the smallest free block that fits, the lowest
          address among equals); freed blocks coalesce with free neighbours; a miss grows the
          space at its top by whole 2 MiB pages, extending a free block that touches the top.
          (What tidepool and PyTorch's expandable segments do, without handles or stealing.)
  caching: PyTorch's default allocator's segments: a miss makes a new segment (2 MiB for requests
          of 1 MiB or less, in a pool of their own; 20 MiB for requests below 10 MiB; the request
          rounded up to 2 MiB above that); best fit over every free block; free blocks coalesce
          only within their segment.

And variants of `single`, placement rules that are not best fit:
  first-fit:  the free block of lowest address that fits.
  huge-high:  requests of 256 MiB or more carved from the top of their best fit, not its bottom.
  huge-apart: requests of 256 MiB or more in a space of their own.
  small-apart: requests below 1 MiB in a space of their own (tidepool's small arenas).

And one that is not a placement rule but a different use of the driver:
  alias:      small-apart, with the large space's memory in physical handles that may be mapped
              at several addresses at once, as the CUDA virtual memory API allows; an address is
              usable only while no other mapping of its handle has a live byte. A miss grows the
              space at its top: new handles (as large as what is still to map, up to
              --alias-handle-mib, as the pool makes them) while held memory stays within
              (1 + --alias-slack) x peak live; beyond that, handles idle at every mapping are
              mapped again there (an alias: one cuMemMap + cuMemSetAccess, no unmap, no new
              memory), the largest that fits first, the longest idle among equals. Mappings are
              never undone, so a loop that has seen its shapes stops mapping. Prints the handles
              made and the aliases mapped per pass.

Requests are rounded up to 512 bytes; nothing is ever given back. Prints peak held / peak live
for each model, for each of --passes passes of the trace through one allocator (what is live at
a pass's end is freed before the next).

    python3 bench/analysis/best_fit_models.py [--models single,caching,...] [--passes N] TRACE...
"""

import argparse
import bisect
import csv
import gzip
import lzma
import os

MiB = 1 << 20
PAGE = 2 * MiB
HUGE = 256 * MiB
MODELS = ("single", "caching", "first-fit", "huge-high", "huge-apart", "small-apart", "alias")
ALIAS_SLACK = 0.02
ALIAS_HANDLE = 64 * MiB


def round_up(n, to):
    return -(-n // to) * to


def caching_segment(size):
    """The size of the segment PyTorch's caching allocator makes for a request it cannot serve."""
    if size <= MiB:
        return PAGE
    if size < 10 * MiB:
        return 20 * MiB
    return round_up(size, PAGE)


class Space:
    """Blocks in one address space. `segment_of(size)` given: a miss makes a segment of that size,
    and free blocks never join across a segment's edge; else a miss grows the top of the space."""

    def __init__(self, segment_of=None):
        self.segment_of = segment_of
        self.free = []  # (size, address), sorted: best fit is a bisection
        self.size_at = {}  # free block's address -> size
        self.start_before = {}  # free block's end -> its address
        self.edges = set()  # segment edges (segments only)
        self.top = 0
        self.held = 0

    def _insert(self, address, size):
        self.size_at[address] = size
        self.start_before[address + size] = address
        bisect.insort(self.free, (size, address))

    def _remove(self, address):
        size = self.size_at.pop(address)
        del self.start_before[address + size]
        self.free.pop(bisect.bisect_left(self.free, (size, address)))
        return size

    def release(self, address, size):
        """Frees [address, address + size), joining free neighbours in the same segment."""
        if address not in self.edges and address in self.start_before:
            below = self.start_before[address]
            size += self._remove(below)
            address = below
        end = address + size
        if end not in self.edges and end in self.size_at:
            size += self._remove(end)
        self._insert(address, size)

    def _grow(self, size):
        if self.segment_of is not None:
            grown = self.segment_of(size)
            self.edges.update((self.top, self.top + grown))
        else:
            below = self.start_before.get(self.top)  # a free block touching the top is extended
            grown = round_up(size - (self.size_at[below] if below is not None else 0), PAGE)
        start, self.top, self.held = self.top, self.top + grown, self.held + grown
        self.release(start, grown)

    def _take_best_fit(self, size):
        """Removes the best fit for `size` (growing on a miss) and returns (its size, its address)."""
        i = bisect.bisect_left(self.free, (size, -1))
        if i == len(self.free):
            self._grow(size)
            i = bisect.bisect_left(self.free, (size, -1))
        found, address = self.free[i]
        self._remove(address)
        return found, address

    def take(self, size):
        """The address of a new block of `size` bytes (best fit, growing on a miss)."""
        found, address = self._take_best_fit(size)
        if found > size:
            self._insert(address + size, found - size)
        return address


class FirstFitSpace(Space):
    """`single` with address-ordered first fit."""

    def __init__(self):
        super().__init__()
        self.addresses = []  # free blocks' addresses, sorted

    def _insert(self, address, size):
        super()._insert(address, size)
        bisect.insort(self.addresses, address)

    def _remove(self, address):
        self.addresses.pop(bisect.bisect_left(self.addresses, address))
        return super()._remove(address)

    def take(self, size):
        address = next((a for a in self.addresses if self.size_at[a] >= size), None)
        if address is None:
            self._grow(size)
            return self.take(size)
        found = self._remove(address)
        if found > size:
            self._insert(address + size, found - size)
        return address


class HugeHighSpace(Space):
    """`single` with requests of HUGE or more carved from the top of their best fit."""

    def take(self, size):
        if size < HUGE:
            return super().take(size)
        found, address = self._take_best_fit(size)
        if found > size:
            self._insert(address, found - size)
        return address + found - size


class AliasSpace(Space):
    """One address space whose memory is in physical handles, each mapped at one or more places
    (see the module docstring: the `alias` model). Growth maps handles at the top as the pool
    does: each as large as what is still to map, up to `handle` bytes. Free blocks are address
    ranges; a mapping is blocked while another mapping of its handle has a live byte, and best fit
    takes the smallest free block with room for the request clear of blocked mappings (and of a
    second mapping of a handle it already spans)."""

    def __init__(self, handle=ALIAS_HANDLE, slack=ALIAS_SLACK):
        super().__init__()
        self.handle = handle
        self.slack = slack
        self.starts = []  # mappings' addresses, ascending (growth only appends)
        self.mapped = []  # mapping -> (its size, its handle)
        self.live_at = []  # mapping -> live blocks touching it
        self.handle_size = []  # handle -> bytes
        self.live_on = []  # handle -> live blocks touching any of its mappings
        self.idle_since = []  # handle -> when its last live block went
        self.clock = 0
        self.handles_made = 0
        self.aliases_mapped = 0

    def _insert(self, address, size):
        if size > 0:  # a block placed at its free block's start or end leaves no piece there
            super()._insert(address, size)

    def mappings_of(self, address, size):
        """The mappings that [address, address + size) touches, in address order."""
        return range(bisect.bisect_right(self.starts, address) - 1, bisect.bisect_left(self.starts, address + size))

    def _mark(self, address, size, change):
        for m in self.mappings_of(address, size):
            self.live_at[m] += change
            h = self.mapped[m][1]
            self.live_on[h] += change
            if self.live_on[h] == 0:
                self.idle_since[h] = self.clock

    def _conflict(self, start, need):
        """The highest mapping of [start, start + need) that is blocked or whose handle a lower
        mapping of the span also maps (a block cannot hold one handle twice), or None."""
        conflict, seen = None, set()
        for m in self.mappings_of(start, need):
            h = self.mapped[m][1]
            if self.live_on[h] > self.live_at[m] or h in seen:
                conflict = m
            seen.add(h)
        return conflict

    def _end_of(self, m):
        return self.starts[m] + self.mapped[m][0]

    def _clear_start(self, address, size, need):
        """The lowest start in free block [address, address + size) whose `need` bytes have no
        conflicting mapping, or None."""
        start = address
        while start + need <= address + size:
            conflict = self._conflict(start, need)
            if conflict is None:
                return start
            start = self._end_of(conflict)
        return None

    def _clear_tail(self):
        """Where the clear part of the free block touching the top starts (above its highest
        conflicting mapping), or the top when no free block touches it."""
        below = self.start_before.get(self.top)
        if below is None:
            return self.top
        conflict = self._conflict(below, self.top - below)
        return below if conflict is None else self._end_of(conflict)

    def _new_handle(self, size):
        self.handle_size.append(size)
        self.live_on.append(0)
        self.idle_since.append(self.clock)
        self.handles_made += 1
        self.held += size
        return len(self.handle_size) - 1

    def _grow(self, need, budget):
        tail = self._clear_tail()
        remaining = round_up(need - (self.top - tail), PAGE)
        in_tail = {self.mapped[m][1] for m in self.mappings_of(tail, self.top - tail)} if tail < self.top else set()
        idle = None
        start = self.top
        while remaining > 0:
            h = None
            if self.held + min(remaining, self.handle) > budget:
                if idle is None:  # the largest first, the longest idle first among equals; none the tail holds
                    idle = sorted((h for h in range(len(self.handle_size)) if self.live_on[h] == 0 and h not in in_tail),
                                  key=lambda h: (self.handle_size[h], -self.idle_since[h]))
                fits = [i for i in range(len(idle)) if self.handle_size[idle[i]] <= remaining]
                if fits:
                    h = idle.pop(fits[-1])
                    self.aliases_mapped += 1
            if h is None:
                h = self._new_handle(min(remaining, self.handle))
            self.starts.append(self.top)
            self.mapped.append((self.handle_size[h], h))
            self.live_at.append(0)
            self.top += self.handle_size[h]
            remaining -= self.handle_size[h]
        size = self.top - start
        if start in self.start_before:
            below = self.start_before[start]
            size += self._remove(below)
            start = below
        self._insert(start, size)

    def take(self, size, budget):
        """The address of a new block of `size` bytes; growth stays within `budget` held bytes
        while idle handles can be mapped again instead."""
        self.clock += 1
        while True:
            for found, address in self.free[bisect.bisect_left(self.free, (size, -1)):]:
                start = self._clear_start(address, found, size)
                if start is not None:
                    self._remove(address)
                    self._insert(address, start - address)
                    self._insert(start + size, address + found - start - size)
                    self._mark(start, size, +1)
                    return start
            self._grow(size, budget)

    def release(self, address, size):
        self._mark(address, size, -1)
        if address in self.start_before:
            below = self.start_before[address]
            size += self._remove(below)
            address = below
        if address + size in self.size_at:
            size += self._remove(address + size)
        self._insert(address, size)


def every_size(size):
    return True


def spaces_of(model, **alias_options):
    """The spaces of `model` (one of MODELS) as (admits(size), space) pairs, the last admitting
    every size: a request goes to the first space that admits it."""
    if model == "single":
        return [(every_size, Space())]
    if model == "caching":
        return [(lambda size: size <= MiB, Space(lambda size: PAGE)), (every_size, Space(caching_segment))]
    if model == "first-fit":
        return [(every_size, FirstFitSpace())]
    if model == "huge-high":
        return [(every_size, HugeHighSpace())]
    if model == "huge-apart":
        return [(lambda size: size >= HUGE, Space()), (every_size, Space())]
    if model == "small-apart":
        return [(lambda size: size < MiB, Space()), (every_size, Space())]
    if model == "alias":
        return [(lambda size: size < MiB, Space()), (every_size, AliasSpace(**alias_options))]
    raise ValueError(f"unknown model {model!r}")


class Pass:
    """One pass of a trace through a model: peak held / peak live of the pass, and (alias model)
    the handles made and the aliases mapped during it."""

    def __init__(self, ratio, handles_made=0, aliases_mapped=0):
        self.ratio, self.handles_made, self.aliases_mapped = ratio, handles_made, aliases_mapped


def replay(rows, model, passes=1, **alias_options):
    """Replays (action, pointer, size) rows `passes` times through one instance of `model` (one of
    MODELS; `alias_options`: handle, slack) and returns a Pass for each. A free of a pointer the
    pass did not allocate is skipped; blocks live at a pass's end are freed before the next."""
    spaces = spaces_of(model, **alias_options)
    aliasing = spaces[-1][1] if model == "alias" else None
    peak_live = 0  # over every pass so far, as an allocator's growth budget sees it
    results = []
    for _ in range(passes):
        made = aliasing.handles_made if aliasing else 0
        mapped = aliasing.aliases_mapped if aliasing else 0
        live = {}
        live_bytes = pass_live = pass_held = 0
        for action, pointer, size in rows:
            if action == "allocate":
                size = round_up(max(size, 1), 512)
                space = next(space for admits, space in spaces if admits(size))
                if space is aliasing:
                    address = space.take(size, (1 + space.slack) * max(peak_live, live_bytes + size))
                else:
                    address = space.take(size)
                live[pointer] = (space, address, size)
                live_bytes += size
                peak_live = max(peak_live, live_bytes)
                pass_live = max(pass_live, live_bytes)
                pass_held = max(pass_held, sum(space.held for _, space in spaces))
            elif action == "free" and pointer in live:
                space, address, size = live.pop(pointer)
                space.release(address, size)
                live_bytes -= size
        for space, address, size in live.values():
            space.release(address, size)
        results.append(Pass(pass_held / pass_live if pass_live else 1.0,
                            aliasing.handles_made - made if aliasing else 0,
                            aliasing.aliases_mapped - mapped if aliasing else 0))
    return results


def held_over_live(rows, model, **alias_options):
    """Peak held / peak live of `model` (one of MODELS) over one pass of (action, pointer, size) rows."""
    return replay(rows, model, 1, **alias_options)[0].ratio


def names_from(parser, text, known, what):
    """The comma-separated names of `text`, each one of `known`; anything else is the parser's error."""
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        parser.error(f"unknown {what}(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
    return names


def read_rows(path):
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(os.path.splitext(path)[1], open)
    with opener(path, "rt") as f:
        return [(r["Action"], r["Pointer"], int(r["Size"])) for r in csv.DictReader(f)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", help="RMM replay logs (CSV, plain, gzip or xz)")
    parser.add_argument("--models", default="single,caching", help="comma-separated, from " + ",".join(MODELS))
    parser.add_argument("--passes", type=int, default=1, help="passes of each trace through one allocator")
    parser.add_argument("--alias-slack", type=float, default=ALIAS_SLACK,
                        help="alias model: new handles while held <= (1 + this) x peak live")
    parser.add_argument("--alias-handle-mib", type=int, default=ALIAS_HANDLE // MiB,
                        help="alias model: the handle size, MiB (a multiple of 2)")
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error("--passes must be 1 or more")
    if args.alias_slack < 0:
        parser.error("--alias-slack must not be negative")
    if args.alias_handle_mib < 2 or args.alias_handle_mib % 2:
        parser.error("--alias-handle-mib must be a positive multiple of 2")
    alias_options = {"handle": args.alias_handle_mib * MiB, "slack": args.alias_slack}
    models = names_from(parser, args.models, MODELS, "model")
    for path in args.traces:
        rows = read_rows(path)
        figures = []
        for m in models:
            passes = replay(rows, m, args.passes, **(alias_options if m == "alias" else {}))
            ratios = " / ".join(f"{p.ratio:.4f}" for p in passes)
            if m == "alias":
                ratios += " (handles made " + " / ".join(str(p.handles_made) for p in passes)
                ratios += ", aliases mapped " + " / ".join(str(p.aliases_mapped) for p in passes) + ")"
            figures.append(f"{m} {ratios}")
        print(f"{path}: peak held / peak live{' by pass' if args.passes > 1 else ''}: {', '.join(figures)}")


if __name__ == "__main__":
    main()
