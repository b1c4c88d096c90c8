"""Memory shared between processes from Python (tidepool.share_memory / ImportedMemory), on the
simulated GPU backed by host memory (TIDEPOOL_SIM_HOST_MEMORY=1, one TIDEPOOL_SIM_UUID), where
an exported handle is a memory file and the bytes are really shared: a multiprocessing child
(spawned, as PyTorch wants) reads what the parent wrote and writes what the parent then reads;
the parent keeps the owner alive until the child lets go, or dies; bad pointers are refused."""

import os
import subprocess
import sys
import textwrap

import pytest

from sim_support import run_program, sim_environment


def run_host_backed(tmp_path, source):
    """Runs `source` as a program on a host-backed sim (sim_support.run_program)."""
    return run_program(tmp_path, textwrap.dedent(source), TIDEPOOL_SIM_HOST_MEMORY=1,
                       TIDEPOOL_SIM_UUID="ipc-test")


PROGRAM = """
import ctypes, json, multiprocessing as mp, time, weakref
import tidepool

def child(queue, answers, die):
    memory = queue.get()
    data = (ctypes.c_ubyte * memory.bytes).from_address(memory.ptr)
    answers.put({"bytes": memory.bytes, "first": data[0], "last": data[memory.bytes - 1],
                 "imported": tidepool.imported_bytes(), "cai": memory.__cuda_array_interface__["typestr"]})
    data[1] = 0x42
    answers.put("wrote")
    queue.get()
    if die:
        import os
        os._exit(0)  # no close: the process's end lets go
    memory.close()
    answers.put(tidepool.imported_bytes())


class Owner:
    pass

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    r = {}
    size = 5 * (1 << 20) + 7
    tidepool.allocate(3000)  # a neighbour: the allocation starts inside its handle
    ptr = tidepool.allocate(size)
    ctypes.memset(ptr, 0x5a, size)
    owner = Owner()
    alive = weakref.ref(owner)
    queue, answers = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(queue, answers, DIE))
    p.start()
    queue.put(tidepool.share_memory(ptr, keep=owner))
    del owner
    r["seen"] = answers.get(timeout=60)
    r["wrote"] = answers.get(timeout=60)
    r["parent_reads_child_write"] = ctypes.c_ubyte.from_address(ptr + 1).value
    r["kept_while_child_maps"] = tidepool.kept_for_other_processes()
    r["owner_alive_while_child_maps"] = alive() is not None
    queue.put("let go")
    if not DIE:
        r["child_imported_after_close"] = answers.get(timeout=60)
    p.join(60)
    r["exit"] = p.exitcode
    r["owner_dropped_after"] = wait_for(lambda: alive() is None)
    r["kept_after"] = tidepool.kept_for_other_processes()
    tidepool.deallocate(ptr)
    print(json.dumps(r))
"""


@pytest.mark.parametrize("die", [False, True], ids=["closes", "exits-without-closing"])
def test_a_child_sees_the_parents_bytes_and_the_owner_lives_until_it_lets_go(tmp_path, die):
    r = run_host_backed(tmp_path, PROGRAM.replace("DIE", str(die)))
    assert r["seen"]["bytes"] == 5 * (1 << 20) + 7, r
    assert (r["seen"]["first"], r["seen"]["last"]) == (0x5A, 0x5A), r
    assert r["seen"]["imported"] >= 5 * (1 << 20), r
    assert r["seen"]["cai"] == "|u1", r
    assert r["parent_reads_child_write"] == 0x42, r
    assert r["kept_while_child_maps"] == 1 and r["owner_alive_while_child_maps"], r
    if not die:
        assert r["child_imported_after_close"] == 0, r
    assert r["exit"] == 0, r
    assert r["owner_dropped_after"] and r["kept_after"] == 0, r


def test_a_large_allocation_round_trips_and_bad_pointers_are_refused(tmp_path):
    r = run_host_backed(tmp_path, """
        import ctypes, json, pickle
        import tidepool
        from tidepool import _ipc
        r = {}
        size = 2 << 30  # about 90 handles: more than the first export asks room for
        ptr = tidepool.allocate(size)
        ctypes.memset(ptr + size - 4096, 0x77, 4096)
        exported = _ipc.export_memory(ptr)
        r["handles"] = len(exported.fds)
        exported.close()
        share = tidepool.share_memory(ptr, keep=None)
        memory = pickle.loads(pickle.dumps(share))  # this process's resource sharer hands the fds
        r["same_bytes"] = ctypes.c_ubyte.from_address(memory.ptr + size - 1).value
        r["apart"] = memory.ptr != ptr
        try:
            tidepool.share_memory(memory.ptr)
        except tidepool.InvalidArgumentError as error:
            r["shared_on"] = str(error)
        memory.close()
        share.close()
        r["closed_repr"] = repr(memory)
        try:
            pickle.dumps(share)
        except ValueError as error:
            r["closed_share"] = str(error)
        for name, bad in (("foreign", 4096), ("interior", ptr + 4096), ("negative", -1)):
            try:
                tidepool.share_memory(bad)
            except (tidepool.TidepoolError, ValueError) as error:
                r[name] = [type(error).__name__, getattr(error, "name", "")]
        tidepool.deallocate(ptr)
        try:
            tidepool.share_memory(ptr)
        except tidepool.TidepoolError as error:
            r["freed"] = error.name
        print(json.dumps(r))
    """)
    assert r["handles"] > 64, r
    assert r["same_bytes"] == 0x77 and r["apart"], r
    assert "cannot be shared on to a third" in r["shared_on"], r
    assert r["closed_repr"] == "tidepool.ImportedMemory(closed)", r
    assert "closed" in r["closed_share"], r
    assert r["foreign"] == ["TidepoolError", "TIDEPOOL_INVALID_POINTER"], r
    assert r["interior"] == ["TidepoolError", "TIDEPOOL_INVALID_POINTER"], r
    assert r["negative"][0] in ("InvalidArgumentError", "ValueError"), r
    assert r["freed"] == "TIDEPOOL_DOUBLE_FREE", r


def test_the_send_benchmark_runs_on_sim():
    # bench/gpu/ipc_send.py, which RESULTS quotes, kept working: two rounds of four allocations.
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "bench", "gpu", "ipc_send.py")
    env = sim_environment(TIDEPOOL_SIM_HOST_MEMORY=1, TIDEPOOL_SIM_UUID="ipc-bench-test")
    result = subprocess.run([sys.executable, bench, "--count", "4", "--mib", "2", "--rounds", "2"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 2, result.stdout
