"""CUDA tensors sent to another process through torch.multiprocessing (spawn), as an RL trainer
sends its weights to a rollout worker. `sender` and `receiver` name each process's allocator:
"default" (PyTorch's), "expandable" (PyTorch's with expandable segments, a sender only) or
"tidepool" (tidepool.torch.use()). The sender makes a set of tensors
(fp32, bf16, int64, a Parameter that requires grad, a view at a storage offset, an empty one),
changes them with kernels just before the send, and puts them on a queue; the receiver checks
what it got against checksums computed by the sender, writes into one, and says so. The sender
then reads the receiver's write, drops its own references and allocates again while the receiver
still holds its tensors (their memory must not be handed out again), and finally waits for the
receiver to let go. It also times sending 64 tensors of 16 MiB (1 GiB), the same tensors sent
again, and the receiver's rebuild. A PyTorch-allocator sender also reports what its allocator
still holds for the receiver once its own references are gone, and after the receiver let go. A
process stuck for 80 s prints its threads' stacks and ends. Prints the figures as JSON."""

import faulthandler
import os
import sys
import time

import torch
import torch.multiprocessing as mp

MiB = 1 << 20


def make_tensors():
    generator = torch.Generator(device="cuda").manual_seed(0)
    weights = {
        "fp32": torch.randn(16 * MiB // 4, device="cuda", generator=generator),
        "bf16": torch.randn(3, 1000, 777, device="cuda", generator=generator).to(torch.bfloat16),
        "int64": torch.arange(12345, device="cuda", dtype=torch.int64),
        "parameter": torch.nn.Parameter(torch.randn(256, 512, device="cuda", generator=generator)),
    }
    base = torch.randn(4096, device="cuda", generator=generator)
    weights["view"] = base[1000:1100].view(10, 10)
    weights["empty"] = torch.empty(0, 7, device="cuda")
    return weights


def describe(t):
    return {"class": type(t).__name__, "dtype": str(t.dtype), "shape": list(t.shape), "stride": list(t.stride()),
            "offset": t.storage_offset(), "requires_grad": t.requires_grad,
            "sum": float(t.detach().double().sum().item()) if t.numel() else 0.0}


def receive(uses_tidepool, queue, answers):
    faulthandler.dump_traceback_later(80, exit=True)
    if uses_tidepool:
        import tidepool

        tidepool.torch.use()
    torch.cuda.init()
    try:
        weights, expected = queue.get()
    except Exception as error:  # noqa: BLE001  (reported to the sender, which prints it)
        answers.put({"error": f"{type(error).__name__}: {error}"})
        return
    answers.put({name: describe(t) == expected[name] or [describe(t), expected[name]]
                 for name, t in weights.items()})
    weights["fp32"].fill_(7.0)
    torch.cuda.synchronize()
    answers.put("wrote")
    queue.get()  # the sender reallocated meanwhile: our memory must be as we left it
    answers.put(float(weights["fp32"].double().sum().item()))
    # Timed, twice: 64 tensors of 16 MiB received and rebuilt.
    for _ in range(2):
        started = time.perf_counter()
        many = queue.get()
        torch.cuda.synchronize()
        answers.put({"receive_s": time.perf_counter() - started, "count": len(many),
                     "ok": all(float(t[0].item()) == i for i, t in enumerate(many))})
    queue.get()
    del weights, many
    import gc

    gc.collect()
    torch.cuda.synchronize()
    answers.put("released")
    queue.get()


def main():
    faulthandler.dump_traceback_later(80, exit=True)
    sender, receiver = sys.argv[1], sys.argv[2]
    if sender == "tidepool":
        import tidepool

        tidepool.torch.use()
    elif sender == "expandable":  # read at the allocator's first use; the receiver gets its own
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        torch.empty(1, device="cuda")
        del os.environ["PYTORCH_CUDA_ALLOC_CONF"]
    from common import emit

    ctx = mp.get_context("spawn")
    queue, answers = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=receive, args=(receiver == "tidepool", queue, answers))
    child.start()
    weights = make_tensors()
    # Kernels queued just before the send: the receiver must see their result.
    for _ in range(50):
        weights["fp32"].mul_(1.0001)
    expected = {name: describe(t) for name, t in weights.items()}
    result = {"sender": sender, "receiver": receiver}
    queue.put((weights, expected))
    result["received_as_sent"] = answers.get(timeout=120)
    if "error" in result["received_as_sent"]:
        child.join(60)
        result["receiver_exit"] = child.exitcode
        emit(result)
        return
    result["receiver_wrote"] = answers.get(timeout=60) == "wrote"
    result["sender_sees_receivers_write"] = float(weights["fp32"].double().sum().item()) == 7.0 * (16 * MiB // 4)
    # The sender lets go of its tensors and allocates as much again, filled with 9: under the
    # receiver's tensors nothing may change.
    fp32_pointer = weights["fp32"].data_ptr()
    del weights
    again = [torch.full((16 * MiB // 4,), 9.0, device="cuda") for _ in range(4)]
    torch.cuda.synchronize()
    result["reused_while_received"] = any(t.data_ptr() == fp32_pointer for t in again)
    queue.put("check")
    result["receiver_memory_intact"] = answers.get(timeout=60) == 7.0 * (16 * MiB // 4)
    many = [torch.full((4 * MiB,), float(i), device="cuda") for i in range(64)]
    torch.cuda.synchronize()
    started = time.perf_counter()
    queue.put(many)
    received = answers.get(timeout=120)
    result["send_1gib_in_64_tensors_s"] = time.perf_counter() - started
    result["receiver_rebuild_s"] = received["receive_s"]
    result["many_received"] = received["ok"] and received["count"] == 64
    started = time.perf_counter()
    queue.put(many)  # the same tensors again, as a trainer sends its weights after each update
    received = answers.get(timeout=120)
    result["send_again_s"] = time.perf_counter() - started
    result["many_received"] = result["many_received"] and received["ok"] and received["count"] == 64
    if sender == "tidepool":
        result["kept_while_received"] = tidepool.kept_for_other_processes()
    del many
    torch.cuda.ipc_collect()
    held_for_receiver = torch.cuda.memory_allocated()  # PyTorch's allocator: blocks a receiver holds stay
    queue.put("release")
    result["receiver_released"] = answers.get(timeout=60) == "released"
    if sender != "tidepool":
        torch.cuda.ipc_collect()  # frees the blocks whose receivers let go
        result["freed_after_receiver_released_mib"] = (held_for_receiver - torch.cuda.memory_allocated()) / MiB
    if sender == "tidepool":
        deadline = time.time() + 10
        while tidepool.kept_for_other_processes() and time.time() < deadline:
            time.sleep(0.01)
        result["kept_after_release"] = tidepool.kept_for_other_processes()
    queue.put("done")
    child.join(60)
    result["receiver_exit"] = child.exitcode
    emit(result)


if __name__ == "__main__":
    main()
