"""A CuPy array sent to another process with tidepool.share_memory (CuPy's own IPC works on its
pool's cudaMalloc memory only): the child views the parent's memory with cupy.asarray (through
__cuda_array_interface__), checks it, writes into it and lets go; the parent reads the write, and
the array it passed as `keep` lives until then even once the parent dropped it. Prints JSON."""

import gc
import multiprocessing as mp
import time
import weakref

import cupy

MiB = 1 << 20
COUNT = 10 * MiB + 3  # float32 elements: ~40 MiB, over several handles


def receive(queue, answers):
    memory = queue.get()
    array = cupy.asarray(memory).view(cupy.float32)[:COUNT]
    answers.put({"sum": float(array.sum(dtype=cupy.float64)), "device": memory.device, "bytes": memory.bytes})
    array[:] = 2.5
    cupy.cuda.Device().synchronize()
    answers.put("wrote")
    queue.get()
    del array
    gc.collect()
    memory.close()
    answers.put("closed")


class Holder:
    def __init__(self, array):
        self.array = array


def main():
    import tidepool
    from common import emit

    tidepool.cupy.use()
    ctx = mp.get_context("spawn")
    queue, answers = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=receive, args=(queue, answers))
    child.start()
    array = cupy.arange(COUNT, dtype=cupy.float32)
    expected = float(array.sum(dtype=cupy.float64))
    cupy.cuda.Device().synchronize()
    holder = Holder(array)  # CuPy's own objects take no weak reference
    kept = weakref.ref(holder)
    queue.put(tidepool.share_memory(array.data.ptr, keep=holder))
    del holder
    pointer = array.data.ptr
    result = {"received": answers.get(timeout=120), "expected_sum": expected}
    result["child_wrote"] = answers.get(timeout=60) == "wrote"
    result["parent_reads_write"] = bool((array == 2.5).all())
    del array
    gc.collect()
    result["kept_after_parent_dropped_it"] = kept() is not None and tidepool.kept_for_other_processes() == 1
    again = cupy.full((COUNT,), 9.0, dtype=cupy.float32)
    result["reused_while_shared"] = again.data.ptr == pointer
    queue.put("let go")
    result["child_closed"] = answers.get(timeout=60) == "closed"
    deadline = time.time() + 10
    while kept() is not None and time.time() < deadline:
        time.sleep(0.01)
    result["dropped_after_child_closed"] = kept() is None
    child.join(60)
    result["child_exit"] = child.exitcode
    emit(result)


if __name__ == "__main__":
    main()
