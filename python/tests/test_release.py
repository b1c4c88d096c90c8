"""tidepool.release_cached_memory(): exact bytes from the allocators' own counts, only on GPUs
this process opened, garbage collection where it frees something, verbose output."""

from sim_support import MiB, run_script


def test_release_returns_what_the_pools_handed_back(tp):
    ptr = tp.allocate(64 * MiB)
    tp.deallocate(ptr)
    released_before = tp.stats(0).released_bytes
    cached = tp.stats(0).cached_bytes
    assert cached >= 64 * MiB
    got = tp.release_cached_memory()
    assert got == tp.stats(0).released_bytes - released_before
    assert got >= 64 * MiB
    after = tp.stats(0)
    # What stays cached shares pages with live blocks (other tests' allocations), at most a page
    # per live block.
    assert after.cached_bytes < 2 * MiB * max(1, after.live_allocations)
    assert tp.release_cached_memory() == 0  # nothing left


def test_release_collects_cycles_holding_device_memory(tp):
    class Buffer:
        def __init__(self, size):
            self.ptr = tp.allocate(size)
            self.cycle = self  # only the garbage collector can free it

        def __del__(self):
            tp.deallocate(self.ptr)

    tp.release_cached_memory()
    Buffer(32 * MiB)
    assert tp.stats(0).live_allocations >= 1
    live = tp.stats(0).live_allocations
    got = tp.release_cached_memory()
    assert tp.stats(0).live_allocations == live - 1
    assert got >= 32 * MiB


def test_release_visits_only_devices_with_a_context():
    out = run_script(f"""
        import tidepool
        ptr = tidepool.allocate({16 * MiB}, device=1)
        tidepool.deallocate(ptr)
        print("released", tidepool.release_cached_memory())
        print("contexts", [tidepool.has_context(d) for d in range(3)])
        print("pools", [tidepool.stats(d).allocations for d in range(3)])
    """, TIDEPOOL_SIM_DEVICES=3)
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert int(lines["released"]) >= 16 * MiB
    assert lines["contexts"] == "[False, True, False]"
    assert lines["pools"] == "[0, 1, 0]"


def test_verbose_names_each_source(tp, capsys):
    ptr = tp.allocate(8 * MiB)
    tp.deallocate(ptr)
    got = tp.release_cached_memory(verbose=True)
    out = capsys.readouterr().out
    assert "tidepool pool" in out
    assert "device 0" in out
    assert "released" in out and "in total" in out
    assert got >= 8 * MiB


def test_release_without_garbage_collection(tp):
    ptr = tp.allocate(8 * MiB)
    tp.deallocate(ptr)
    assert tp.release_cached_memory(collect_garbage=False) >= 8 * MiB


def test_garbage_collection_only_where_it_can_free_device_memory():
    out = run_script(f"""
        import gc
        import tidepool
        from tidepool import _release
        calls = []
        real_collect = gc.collect

        class CountingGc:
            @staticmethod
            def collect(*args):
                calls.append(args)
                return real_collect(*args)

        _release.gc = CountingGc
        ptr = tidepool.allocate({MiB})
        tidepool.deallocate(ptr)
        junk = [[]]
        junk[0].append(junk)  # garbage, but it holds no device memory
        del junk
        tidepool.release_cached_memory()
        print("idle", len(calls))

        class Buffer:
            def __init__(self):
                self.ptr = tidepool.allocate({4 * MiB})
                self.me = self

            def __del__(self):
                tidepool.deallocate(self.ptr)

        Buffer()
        released = tidepool.release_cached_memory()
        print("cycle", len(calls), tidepool.stats(0).live_allocations, released >= {4 * MiB})
    """)
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert lines["idle"] == "0"  # nothing live on the GPU: no collection at all
    collections, live, released = lines["cycle"].split()
    assert int(collections) == 1  # one collection freed the cycle; nothing live after: stop
    assert live == "0" and released == "True"
