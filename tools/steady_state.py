"""Driver work per pass when one trace is replayed again and again through one tidepool pool: how
quickly a training loop stops paying driver calls (the growth budget widens while stealing goes on
without a new peak, src/core/growth.cpp). Each pass frees what the trace leaves live at its end.

    TIDEPOOL_DEVICE=sim TIDEPOOL_LIBRARY=build/src/libtidepool.so PYTHONPATH=python \
        python3 tools/steady_state.py traces/gpt2_train.csv.gz 12

Prints, per pass: driver calls, driver time (modelled on sim, measured on a GPU) and the pool's
peak held / peak in use so far.
"""

import csv
import gzip
import sys

import tidepool


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, passes = sys.argv[1], int(sys.argv[2])
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = [(r["Action"], r["Pointer"], int(r["Size"])) for r in csv.DictReader(f)]
    before = tidepool.stats(0)
    print("pass  driver calls  driver ms  peak held / peak in use")
    for n in range(passes):
        live = {}
        for action, pointer, size in rows:
            if action == "allocate":
                live[pointer] = tidepool.allocate(size, 0)
            elif action == "free":
                tidepool.deallocate(live.pop(pointer))
        for ptr in live.values():
            tidepool.deallocate(ptr)
        after = tidepool.stats(0)
        print(f"{n:4}  {after.driver_calls - before.driver_calls:12}  "
              f"{(after.driver_microseconds - before.driver_microseconds) / 1000:9.1f}  "
              f"{after.peak_mapped_bytes / after.peak_in_use_bytes:.3f}")
        before = after


if __name__ == "__main__":
    main()
