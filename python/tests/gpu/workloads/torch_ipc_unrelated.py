"""CUDA tensors handed to a process that is not a multiprocessing child, as RL frameworks hand
them through Ray or ZeroMQ: the sender reduces each tensor with
torch.multiprocessing.reductions.reduce_tensor and pickles the results to a file; a separate
interpreter (`--receive PATH MODE`, started with subprocess) unpickles them, rebuilds the tensors,
checks their sums and writes into the first. `sender` and `receiver`: "default" (PyTorch's
allocator) or "tidepool" (tidepool.torch.use()). Prints the figures as JSON."""

import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

import torch

MiB = 1 << 20


def receive(path, uses_tidepool):
    if uses_tidepool:
        import tidepool

        tidepool.torch.use()
    torch.cuda.init()
    started = time.perf_counter()
    with open(path, "rb") as source:
        tensors = [rebuild(*arguments) for rebuild, arguments in pickle.load(source)]
    sums = [float(t.double().sum().item()) for t in tensors]
    rebuilt_s = time.perf_counter() - started
    tensors[0].fill_(5.0)
    torch.cuda.synchronize()
    del tensors
    gc.collect()
    torch.cuda.synchronize()
    print(json.dumps({"sums": sums, "rebuilt_s": rebuilt_s}))


def main():
    sender, receiver = sys.argv[1], sys.argv[2]
    if sender == "tidepool":
        import tidepool

        tidepool.torch.use()
    from common import emit
    from torch.multiprocessing.reductions import reduce_tensor

    tensors = [torch.full((4 * MiB,), float(i + 1), device="cuda") for i in range(8)]
    torch.cuda.synchronize()
    expected = [float(t.double().sum().item()) for t in tensors]
    result = {"sender": sender, "receiver": receiver}
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "reduced.pickle")
        with open(path, "wb") as out:
            pickle.dump([reduce_tensor(t) for t in tensors], out)  # plain pickle, as Ray's
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--receive", path, receiver],
                              capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        result["receiver_error"] = done.stderr[-3000:]
        emit(result)
        return
    received = json.loads(done.stdout.strip().splitlines()[-1])
    result["sums_as_sent"] = received["sums"] == expected
    result["receiver_rebuilt_s"] = received["rebuilt_s"]
    result["sender_sees_receivers_write"] = float(tensors[0].double().sum().item()) == 5.0 * 4 * MiB
    gc.collect()
    if sender == "tidepool":
        deadline = time.time() + 10
        while tidepool.kept_for_other_processes() and time.time() < deadline:
            time.sleep(0.01)
        result["kept_after_receiver_exited"] = tidepool.kept_for_other_processes()
    else:
        del tensors
        gc.collect()
        torch.cuda.ipc_collect()
        result["allocated_after_receiver_exited_mib"] = torch.cuda.memory_allocated() / MiB
    emit(result)


if __name__ == "__main__":
    if sys.argv[1] == "--receive":
        receive(sys.argv[2], sys.argv[3] == "tidepool")
    else:
        main()
