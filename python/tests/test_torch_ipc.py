"""Sending tidepool tensors to another process through torch.multiprocessing after
tidepool.torch.use(), on the simulated GPU backed by host memory: a spawned child receives a CUDA
tensor over the sender's memory (the same bytes, both ways), cannot send it on, and once it lets
go the sender drops the storage it kept; CPU tensors take PyTorch's own reduction; a CUDA storage
sent alone is refused with tidepool's error, and other failures pass through.

These run over a stand-in `torch` module (torch_stand_in.py); the real PyTorch sends tensors the
same way on the GPU (gpu/test_frameworks_gpu.py)."""

import textwrap

from sim_support import run_program
from torch_stand_in import SOURCE, run_with_stand_in

PROGRAM = """
import ctypes, gc, json, multiprocessing as mp, time, weakref
from multiprocessing.reduction import ForkingPickler
import tidepool
tidepool.torch.use()

def child(queue, answers):
    tensor = queue.get()
    ptr = tensor.untyped_storage().data_ptr()
    answers.put({"class": type(tensor).__name__, "shape": list(tensor.shape),
                 "first": ctypes.c_ubyte.from_address(ptr).value,
                 "imported": tidepool.imported_bytes()})
    ctypes.c_ubyte.from_address(ptr + 1).value = 0x42
    try:
        ForkingPickler.dumps(tensor)
        answers.put("sent on")
    except tidepool.InvalidArgumentError as error:
        answers.put(str(error))
    queue.get()
    del tensor
    gc.collect()
    answers.put(tidepool.imported_bytes())


if __name__ == "__main__":
    r = {}
    size = 3 * (1 << 20)
    ptr = tidepool.allocate(size)
    ctypes.memset(ptr, 0x5a, size)
    tensor = torch.Tensor(ptr, nbytes=size)
    storage = weakref.ref(tensor.untyped_storage())
    reducer = ForkingPickler._extra_reducers[torch.Tensor]
    r["cpu_reduction"] = reducer(torch.Tensor(1234, device_type="cpu"))[0].__name__
    r["cuda_reduction"] = reducer(tensor)[0].__name__
    gc.collect()
    r["kept_after_an_unsent_reduction"] = wait_for(lambda: tidepool.kept_for_other_processes() == 0)
    ctx = mp.get_context("spawn")
    queue, answers = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(queue, answers))
    p.start()
    queue.put(tensor)
    del tensor
    r["received"] = answers.get(timeout=60)
    r["send_on"] = answers.get(timeout=60)
    r["sender_reads_child_write"] = ctypes.c_ubyte.from_address(ptr + 1).value
    r["storage_kept_while_child_holds"] = storage() is not None
    r["synchronized_before_send"] = calls.get("stream_synchronize", 0)
    queue.put("let go")
    r["child_imported_after"] = answers.get(timeout=60)
    p.join(60)
    r["storage_dropped_after"] = wait_for(lambda: storage() is None)
    tidepool.deallocate(ptr)
    print(json.dumps(r))
"""


def test_a_spawned_child_receives_a_cuda_tensor_over_the_senders_memory(tmp_path):
    r = run_program(tmp_path, SOURCE + textwrap.dedent(PROGRAM), TIDEPOOL_SIM_HOST_MEMORY=1,
                    TIDEPOOL_SIM_UUID="torch-ipc-test")
    assert r["cpu_reduction"] == "_pytorchs_rebuild", r
    assert r["cuda_reduction"] == "rebuild_cuda_tensor", r
    assert r["kept_after_an_unsent_reduction"], r
    assert r["received"] == {"class": "Tensor", "shape": [3 << 20], "first": 0x5A, "imported": 4 << 20}, r
    assert "cannot be sent on to a third" in r["send_on"], r
    assert r["sender_reads_child_write"] == 0x42, r
    assert r["storage_kept_while_child_holds"], r
    assert r["synchronized_before_send"] >= 1, r  # the stand-in has no interprocess events
    assert r["child_imported_after"] == 0, r
    assert r["storage_dropped_after"], r


def test_a_storage_sent_alone_is_refused_with_tidepools_error_and_other_failures_pass_through():
    r = run_with_stand_in("""
import json
import tidepool
tidepool.torch.use()
r = {}
try:
    torch.UntypedStorage()._share_cuda_()
except tidepool.InvalidArgumentError as error:
    r["refused"] = str(error)
    r["cause"] = str(error.__cause__)[:60]
share_fails_with[0] = "CUDA error: invalid device context"
try:
    torch.UntypedStorage()._share_cuda_()
except RuntimeError as error:
    r["other"] = [type(error).__name__, str(error)]
print(json.dumps(r))
""")
    assert "cannot be sent to another process on its own" in r["refused"], r
    assert "send a tensor over it instead" in r["refused"], r
    assert r["cause"].startswith("CUDAPluggableAllocator does not yet support shareIPcHandle"), r
    assert r["other"] == ["RuntimeError", "CUDA error: invalid device context"], r
