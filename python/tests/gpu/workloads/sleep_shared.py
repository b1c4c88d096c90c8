"""Sleep with memory shared between processes, on a real GPU: under tidepool.torch.use(), a
tensor allocated in a tag is sent to a child through torch.multiprocessing (CUDA IPC through
tidepool.share_memory); while the child maps it the parent sleeps the tag: the shared tensor stays
awake (writes made while asleep are seen by the child, and the child's by the parent after wake),
the tag's other tensor sleeps and comes back; once the child lets go, the whole tag sleeps. Prints
JSON."""

import gc
import multiprocessing as mp
import time

import torch

MiB = 1 << 20
COUNT = 16 * MiB  # float32 elements: 64 MiB, several handles


def receive(queue, answers):
    import tidepool

    tidepool.torch.use()
    shared = queue.get()
    answers.put(float(shared[:1000].sum()))
    queue.get()  # the parent slept, wrote while asleep, and woke
    answers.put(float(shared[5].item()))
    shared[6] = 6.5
    torch.cuda.synchronize()
    answers.put("wrote")
    queue.get()
    del shared
    gc.collect()
    answers.put("closed")


def main():
    import tidepool
    from common import emit

    tidepool.torch.use()
    ctx = torch.multiprocessing.get_context("spawn")
    queue, answers = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=receive, args=(queue, answers))
    child.start()
    with tidepool.region("weights"):
        shared = torch.ones(COUNT, device="cuda")
        own = torch.arange(COUNT, device="cuda", dtype=torch.float32)
    own_sum = float(own.sum(dtype=torch.float64))
    torch.cuda.synchronize()
    queue.put(shared)
    result = {"child_sum": answers.get(timeout=120)}
    result["slept_while_shared"] = tidepool.sleep("weights")
    shared[5] = 5.5  # the shared tensor is awake: the GPU may touch it while the tag sleeps
    torch.cuda.synchronize()
    tidepool.wake("weights")
    result["own_sum_after_wake"] = float(own.sum(dtype=torch.float64))
    result["own_sum"] = own_sum
    queue.put("woke")
    result["child_reads_write_made_asleep"] = answers.get(timeout=60)
    result["child_wrote"] = answers.get(timeout=60) == "wrote"
    result["parent_reads_child_write"] = float(shared[6].item())
    queue.put("let go")
    result["child_closed"] = answers.get(timeout=60) == "closed"
    deadline = time.time() + 10
    while tidepool.kept_for_other_processes() != 0 and time.time() < deadline:
        time.sleep(0.01)
    result["released_by_child"] = tidepool.kept_for_other_processes() == 0
    result["slept_after"] = tidepool.sleep("weights")
    tidepool.wake("weights")
    result["shared_after"] = [float(shared[5].item()), float(shared[6].item()), float(shared[7].item())]
    child.join(60)
    result["child_exit"] = child.exitcode
    emit(result)


if __name__ == "__main__":
    main()
