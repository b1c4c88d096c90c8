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

Requests are rounded up to 512 bytes; nothing is ever given back. Prints peak held / peak live
for each model.

    python3 bench/analysis/best_fit_models.py [--models single,caching,...] TRACE...
"""

import argparse
import bisect
import csv
import gzip

MiB = 1 << 20
PAGE = 2 * MiB
HUGE = 256 * MiB
MODELS = ("single", "caching", "first-fit", "huge-high", "huge-apart", "small-apart")


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


def every_size(size):
    return True


def spaces_of(model):
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
    raise ValueError(f"unknown model {model!r}")


def held_over_live(rows, model):
    """Peak held / peak live of `model` (one of MODELS) over (action, pointer, size) rows."""
    spaces = spaces_of(model)
    live = {}
    live_bytes = peak_live = peak_held = 0
    for action, pointer, size in rows:
        if action == "allocate":
            size = round_up(max(size, 1), 512)
            space = next(space for admits, space in spaces if admits(size))
            live[pointer] = (space, space.take(size), size)
            live_bytes += size
            peak_live = max(peak_live, live_bytes)
            peak_held = max(peak_held, sum(space.held for _, space in spaces))
        elif action == "free":
            space, address, size = live.pop(pointer)
            space.release(address, size)
            live_bytes -= size
    return peak_held / peak_live if peak_live else 1.0


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [(r["Action"], r["Pointer"], int(r["Size"])) for r in csv.DictReader(f)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", help="RMM replay logs (CSV, plain or gzip)")
    parser.add_argument("--models", default="single,caching", help="comma-separated, from " + ",".join(MODELS))
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        parser.error(f"unknown model(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(MODELS)}")
    for path in args.traces:
        rows = read_rows(path)
        figures = ", ".join(f"{m} {held_over_live(rows, m):.4f}" for m in models)
        print(f"{path}: peak held / peak live: {figures}")


if __name__ == "__main__":
    main()
