"""set_pool_options(thread_caches=...) and Stats.thread_caches: threads allocating from Python get
caches of their own with "always", none with "never", and the figures stay exact while they live
and after they end."""

import textwrap

from sim_support import run_script

# Each worker keeps one block, then allocates and frees one size many times (its cache serves all
# but the first), and waits with its cache alive until the main thread has read the stats.
_WORKERS = """
    import threading, time
    import tidepool

    KiB = 1024
    THREADS, ROUNDS = 4, 200
    ready = threading.Barrier(THREADS + 1)
    counted = threading.Barrier(THREADS + 1)
    failures = []

    def work(i):
        try:
            size = (i + 1) * 96 * KiB
            kept = tidepool.allocate(size)
            for _ in range(ROUNDS):
                tidepool.deallocate(tidepool.allocate(size))
        except Exception as e:  # reported by the main thread; the barriers must still be reached
            failures.append(repr(e))
            kept = None
        ready.wait()
        counted.wait()
        if kept is not None:
            tidepool.deallocate(kept)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for w in workers:
        w.start()
    ready.wait()
    alive = tidepool.stats(0)
    counted.wait()
    for w in workers:
        w.join()
    after = tidepool.stats(0)
    # A Python thread's join() returns before its OS thread has finished exiting, and the caches go
    # back when the OS thread exits: wait for that (the figures above are exact either way).
    deadline = time.monotonic() + 60
    while tidepool.stats(0).thread_caches != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    ended = tidepool.stats(0)
    released = tidepool.release(0)
    print(failures)
    print(alive.thread_caches, alive.live_allocations, alive.requested_bytes, alive.allocations)
    print(after.in_use_bytes, after.requested_bytes, after.live_allocations, after.allocations,
          after.deallocations, after.cached_bytes == after.mapped_bytes)
    print(ended.thread_caches, released == ended.mapped_bytes, tidepool.stats(0).mapped_bytes)
"""


def _lines(out):
    return out.strip().splitlines()


def test_thread_caches_round_trips_and_bad_values_are_refused_and_set_nothing():
    out = run_script("""
        import tidepool
        print(tidepool.get_pool_options()["thread_caches"])
        for value in ("always", "never", "when_contended", "always"):
            tidepool.set_pool_options(thread_caches=value)
            print(tidepool.get_pool_options()["thread_caches"])
        before = tidepool.get_pool_options()
        for value in ("sometimes", "ALWAYS", ""):
            try:
                tidepool.set_pool_options(thread_caches=value, headroom=1 << 20)
            except ValueError as e:
                print(type(e).__name__, e.name, str(e).split(": ", 1)[1])
        for value in (1, None, True):
            try:
                tidepool.set_pool_options(thread_caches=value, headroom=1 << 20)
            except TypeError as e:
                print("TypeError", e)
        print(tidepool.get_pool_options() == before)
    """)
    lines = _lines(out)
    assert lines[:5] == ["when_contended", "always", "never", "when_contended", "always"]
    assert lines[5] == ("InvalidArgumentError TIDEPOOL_INVALID_ARGUMENT tidepool.set_pool_options: "
                        "thread_caches is 'sometimes': expected one of 'when_contended', 'always', "
                        "'never'")
    assert "thread_caches is 'ALWAYS'" in lines[6]
    assert "thread_caches is ''" in lines[7]
    assert lines[8] == ("TypeError tidepool.set_pool_options: thread_caches must be one of "
                        "'when_contended', 'always', 'never', not int 1")
    assert "not NoneType None" in lines[9]
    assert "not bool True" in lines[10]
    assert lines[11] == "True"


def _run_workers(policy):
    """The output lines of _WORKERS run with set_pool_options(thread_caches=policy)."""
    out = run_script(textwrap.dedent(f"""
        import tidepool
        tidepool.set_pool_options(thread_caches="{policy}")
    """) + textwrap.dedent(_WORKERS))
    lines = _lines(out)
    assert lines[0] == "[]"
    return lines


def test_python_threads_get_caches_with_always_and_figures_are_exact_after_they_end():
    lines = _run_workers("always")
    threads, rounds, kib = 4, 200, 1024
    kept = sum((i + 1) * 96 * kib for i in range(threads))
    # Every worker has a cache while it lives; only the kept blocks are live.
    assert lines[1] == f"{threads} {threads} {kept} {threads * (rounds + 1)}"
    total = threads * (rounds + 1)
    assert lines[2] == f"0 0 0 {total} {total} True"
    assert lines[3] == "0 True 0"


def test_python_threads_get_no_cache_with_never():
    lines = _run_workers("never")
    assert lines[1].split()[0] == "0"
    assert lines[2] == f"0 0 0 {4 * 201} {4 * 201} True"
    assert lines[3] == "0 True 0"


def test_tag_stats_count_a_tags_thread_caches():
    out = run_script("""
        import tidepool
        tidepool.set_pool_options(thread_caches="always")
        with tidepool.region("cached"):
            tidepool.deallocate(tidepool.allocate(64 * 1024))
        s = tidepool.tag_stats("cached")
        print(s.thread_caches, s.live_allocations, s.allocations, s.deallocations)
        print(tidepool.stats(0).thread_caches)
    """)
    assert _lines(out) == ["1 0 1 1", "0"]
