"""Driver failures under a Python program (issue 10): TIDEPOOL_SIM_FAIL makes chosen driver calls
of the simulated GPU fail (each kind the pool makes, at several places, and at random). Every
failure reaches Python as a TidepoolError (OutOfMemoryError where memory ran out) whose message says
what failed, never a crash; a retry succeeds; afterwards everything frees, release() leaves nothing
held, and the pool still allocates. Each run is a child process: the driver is fixed per process."""

import random

import pytest

from sim_support import run_script

SCRIPT = r"""
import os
import tidepool as tp

MiB = 1 << 20
spec = os.environ["TIDEPOOL_SIM_FAIL"]
errors = 0

# Each failed attempt spends at least one injected failure, so one attempt more than there are
# failures must succeed (a call may touch many handles: under the 96 MiB cap they are granules).
attempts = len(spec.split(",")) + 1

def attempt(f, *args, **kwargs):
    global errors
    for _ in range(attempts):
        try:
            return f(*args, **kwargs)
        except tp.TidepoolError as e:
            text = str(e)
            assert "tidepool" in text or "out of memory" in text.lower(), text
            assert type(e).__name__ in ("TidepoolError", "OutOfMemoryError"), repr(e)
            errors += 1
    raise AssertionError(f"{attempts} attempts in a row failed under " + spec)

tp.set_pool_options(byte_cap=96 * MiB)
sizes = [512, 3 * MiB, 20 * MiB, 65536, 40 * MiB, MiB]
live = []
for i in range(30):
    try:
        live.append(tp.allocate(sizes[i % 6], persistent=(i % 5 == 0)))
    except tp.OutOfMemoryError as e:
        errors += 1
        assert "out of memory" in str(e).lower(), str(e)
    except tp.TidepoolError as e:
        errors += 1
        assert "tidepool" in str(e), str(e)
    if len(live) > 4:
        attempt(tp.deallocate, live.pop(0))
    if i % 8 == 7:
        attempt(tp.release, 0)
    if i % 12 == 11:
        attempt(tp.release_cached_memory)
    s = tp.stats(0)
    assert s.in_use_bytes + s.cached_bytes == s.mapped_bytes, s
    assert s.live_allocations == len(live), (s, len(live))
for p in live:
    attempt(tp.deallocate, p)
attempt(tp.release, 0)
s = tp.stats(0)
assert s.live_allocations == 0 and s.in_use_bytes == 0, s
# A failed mem_release inside placement (reported, issue 10) may leave a handle counted as held.
assert s.mapped_bytes == 0 or "mem_release" in spec, s
for size in (4096, 24 * MiB):
    p = attempt(tp.allocate, size)
    attempt(tp.deallocate, p)
print("errors", errors)
"""

# The driver calls the pool makes on this path (on sim; streams and contexts are not the pool's).
KINDS = ["address_reserve", "mem_create", "mem_map", "mem_set_access", "mem_unmap", "mem_release",
         "mem_get_info", "event_create", "event_record", "event_query", "device_synchronize",
         "async_pool_trim"]
STATUS = {"mem_create": "out_of_memory", "address_reserve": "out_of_memory"}


def spec_of(failures):
    return ",".join(f"{kind}:{n}:{STATUS.get(kind, 'error')}" for kind, n in failures)


def run(failures):
    out = run_script(SCRIPT, TIDEPOOL_SIM_FAIL=spec_of(failures), TIDEPOOL_SIM_CAPACITY="1GiB")
    return int(out.split()[-1])


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_failing_at_several_calls(kind):
    # Calls 1, 2, 3, 5, 8 and 13 of the kind fail (each once).
    run([(kind, n) for n in (1, 2, 3, 5, 8, 13)])


def test_failures_at_random_calls():
    rng = random.Random(10)
    seen = 0
    for _ in range(8):
        seen += run([(rng.choice(KINDS), rng.randint(1, 20)) for _ in range(4)])
    assert seen > 0, "no injected failure reached the program"


def test_failures_reach_the_program():
    assert run([("mem_create", n) for n in range(1, 7)]) > 0
