"""Sharing a GPU between processes (issue 14) from Python, on a simulated GPU whose capacity two
interpreters share: the options, and a process whose allocation succeeds because an idle
neighbour hands back its cache (its PyTorch/CuPy-style framework hook included)."""

import os
import subprocess
import sys
import tempfile
import textwrap

from sim_support import MiB, run_script, sim_environment


def test_options_round_trip_and_bad_values_are_refused():
    out = run_script("""
        import tidepool
        print(tidepool.get_sharing_options())
        tidepool.set_sharing_options(gives=False, wait_ms=25)
        print(tidepool.get_sharing_options())
        for bad in ({"gives": 1}, {"wait_ms": -1}, {"wait_ms": 60001}, {"nope": True}):
            try:
                tidepool.set_sharing_options(**bad)
            except (TypeError, ValueError) as e:
                print(type(e).__name__)
        print(tidepool.get_sharing_options())
    """)
    lines = out.strip().splitlines()
    assert lines[0] == "{'enabled': True, 'gives': True, 'wait_ms': 1000}"
    assert lines[1] == "{'enabled': True, 'gives': False, 'wait_ms': 25}"
    assert lines[2:6] == ["TypeError", "InvalidArgumentError", "InvalidArgumentError", "TypeError"]
    assert lines[6] == lines[1]


def test_environment_sets_the_defaults():
    out = run_script("""
        import tidepool
        print(tidepool.get_sharing_options())
    """, TIDEPOOL_SHARING="0", TIDEPOOL_SHARING_GIVES="0", TIDEPOOL_SHARING_WAIT_MS="7")
    assert out.strip() == "{'enabled': False, 'gives': False, 'wait_ms': 7}"


HOLDER = """
    import sys, tidepool
    blocks = [tidepool.allocate({chunk}) for _ in range({count})]
    for b in blocks:
        tidepool.deallocate(b)
    print("ready", flush=True)
    sys.stdin.read()
    print(tidepool.stats(0).released_bytes, flush=True)
"""


def test_an_idle_neighbour_hands_back_its_cache():
    with tempfile.TemporaryDirectory() as shared:
        variables = dict(TIDEPOOL_SIM_CAPACITY="1GiB", TIDEPOOL_SIM_SHARED=shared,
                         TIDEPOOL_SIM_UUID=f"py-{os.getpid()}", TIDEPOOL_LEDGER_DIR=shared)
        holder = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(HOLDER.format(chunk=64 * MiB, count=12))],
            env=sim_environment(**variables), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "ready"
            out = run_script(f"""
                import time, tidepool
                start = time.perf_counter()
                p = tidepool.allocate({512 * MiB})
                print("ok", time.perf_counter() - start)
            """, **variables)
            assert out.startswith("ok")
            holder.stdin.close()
            assert int(holder.stdout.readline()) == 768 * MiB
            assert holder.wait(timeout=60) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
        # Without sharing the same allocation fails.
        holder = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(HOLDER.format(chunk=64 * MiB, count=12))],
            env=sim_environment(**variables), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "ready"
            out = run_script(f"""
                import tidepool
                try:
                    tidepool.allocate({512 * MiB})
                    print("ok")
                except tidepool.OutOfMemoryError:
                    print("oom")
            """, TIDEPOOL_SHARING="0", **variables)
            assert out.strip() == "oom"
            holder.stdin.close()
            assert int(holder.stdout.readline()) == 0
            holder.wait(timeout=60)
        finally:
            if holder.poll() is None:
                holder.kill()


HOOKED_HOLDER = """
    import sys, threading, tidepool
    calls = []
    def hook(device, needed):
        calls.append(threading.current_thread() is threading.main_thread())
        return 0
    tidepool.add_reclaim_hook(hook)
    kept = [tidepool.allocate({chunk}) for _ in range({live})]
    for b in [tidepool.allocate({chunk}) for _ in range({cached})]:
        tidepool.deallocate(b)
    print("ready", flush=True)
    sys.stdin.read()
    print(len(calls), any(calls), flush=True)
"""


def test_a_request_the_cache_cannot_cover_reaches_the_python_hooks_on_the_helper_thread():
    with tempfile.TemporaryDirectory() as shared:
        variables = dict(TIDEPOOL_SIM_CAPACITY="1GiB", TIDEPOOL_SIM_SHARED=shared,
                         TIDEPOOL_SIM_UUID=f"py-hook-{os.getpid()}", TIDEPOOL_LEDGER_DIR=shared)
        source = textwrap.dedent(HOOKED_HOLDER.format(chunk=64 * MiB, live=8, cached=4))
        holder = subprocess.Popen([sys.executable, "-c", source], env=sim_environment(**variables),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "ready"
            # 600 MiB with 256 MiB free: the holder's 256 MiB cache is not enough, so its hooks run.
            out = run_script(f"""
                import tidepool
                try:
                    tidepool.allocate({600 * MiB})
                    print("ok")
                except tidepool.OutOfMemoryError:
                    print("oom")
            """, **variables)
            assert out.strip() == "oom"  # 512 MiB of the holder's are live: never handed over
            holder.stdin.close()
            calls, on_main = holder.stdout.readline().split()
            assert int(calls) >= 1
            assert on_main == "False"  # called on the helper thread, not the holder's main thread
            assert holder.wait(timeout=60) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
