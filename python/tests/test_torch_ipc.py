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
                 "imported": tidepool.imported_bytes(), "events_waited": len(events_waited)})
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
    r["events_made"] = events_made[0]
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
    assert r["received"] == {"class": "Tensor", "shape": [3 << 20], "first": 0x5A, "imported": 4 << 20,
                             "events_waited": 1}, r
    assert "cannot be sent on to a third" in r["send_on"], r
    assert r["sender_reads_child_write"] == 0x42, r
    assert r["storage_kept_while_child_holds"], r
    assert r["events_made"] >= 1, r
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


def test_tensors_from_pytorchs_own_allocator_are_mapped_by_tidepool_and_the_senders_counters_released():
    # A sender running PyTorch's allocator sends an expandable segment's handles as descriptors in
    # its own table ('e'), or a cudaMalloc segment's cudaIpc handle ('c', which sim cannot open):
    # here the "sender" is this process, its descriptors tidepool's own export of an allocation.
    r = run_with_stand_in("""
import ctypes, gc, json, os, struct
import tidepool
from tidepool import _ipc
tidepool.torch.use()
rebuild = torch.multiprocessing.reductions.rebuild_cuda_tensor
r = {"wrapped": rebuild.__name__ == "rebuild_cuda_tensor" and rebuild is not rebuild_cuda_tensor}
size = 4 << 20
ptr = tidepool.allocate(size)
ctypes.memset(ptr, 0x3c, size)
exported = _ipc.export_memory(ptr)
r["equal_handles"] = len(set(exported.handle_sizes)) == 1
header = struct.pack("=i4xQQ", os.getpid(), exported.handle_sizes[0], len(exported.fds))
expandable = bytes([2]) + b"e" + header + struct.pack(f"={len(exported.fds)}i", *exported.fds)
def receive(handle, counter, offset=exported.offset, nbytes=size, event=True):
    return rebuild(torch.Tensor, (nbytes // 2,), (2,), 1, torch.UntypedStorage, "uint8", 0, handle, nbytes, offset,
                   True, b"/torch_1_2_3", counter, b"event-" + bytes(counter), event)
tensor = receive(expandable, 5)
received = tensor.untyped_storage().data_ptr()
r["apart"] = received != ptr
r["bytes"] = [ctypes.c_ubyte.from_address(received).value, ctypes.c_ubyte.from_address(received + size - 1).value]
r["view"] = [list(tensor.shape), list(tensor.stride()), tensor.storage_offset(), tensor.requires_grad]
r["mapped"] = tidepool.imported_bytes()
r["events_waited"] = len(events_waited)
again = receive(expandable, 6)  # the same storage while the first lives: PyTorch's cache, counter released at once
from multiprocessing.reduction import ForkingPickler
try:
    ForkingPickler.dumps(tensor)
except tidepool.InvalidArgumentError as error:
    r["sent_on"] = str(error)
r["marked_received"] = _ipc.is_imported(received)
r["again_same_storage"] = again.untyped_storage() is tensor.untyped_storage()
r["released_while_held"] = list(released_counters)
del tensor, again
gc.collect()
r["released_after"] = list(released_counters)
r["marked_after"] = _ipc.is_imported(received)
r["mapped_after"] = tidepool.imported_bytes()
r["synchronized"] = calls.get("stream_synchronize", 0)
def refusal(handle, counter, **kwargs):
    try:
        receive(handle, counter, **kwargs)
    except tidepool.TidepoolError as error:
        return [error.name, str(error)]
r["cuda_malloc"] = refusal(bytes([2]) + b"c" + bytes(64), 7)
r["future"] = refusal(bytes([9]) + b"c" + bytes(64), 8)
r["gone"] = refusal(bytes([2]) + b"e" + struct.pack("=i4xQQ", 4194000, 2 << 20, 1) + struct.pack("=i", 3), 9)
r["released_on_refusals"] = [c[1] for c in released_counters[2:]]
open_fails_with[0] = "CUDA error: out of memory"
try:
    receive(expandable, 10)
except RuntimeError as error:
    r["other"] = [type(error).__name__, str(error)]
exported.close()
tidepool.deallocate(ptr)
print(json.dumps(r))
""", TIDEPOOL_SIM_HOST_MEMORY=1, TIDEPOOL_SIM_UUID="torch-receive")
    assert r["wrapped"] and r["equal_handles"], r
    assert r["apart"] and r["bytes"] == [0x3C, 0x3C], r
    assert r["view"] == [[2 << 20], [2], 1, True], r
    assert r["mapped"] >= 4 << 20 and r["events_waited"] >= 1, r
    assert r["again_same_storage"] and r["released_while_held"] == [["/torch_1_2_3", 6]], r
    assert "cannot be sent on to a third" in r["sent_on"], r
    assert r["marked_received"] and not r["marked_after"], r
    assert r["released_after"] == [["/torch_1_2_3", 6], ["/torch_1_2_3", 5]], r
    assert r["mapped_after"] == 0 and r["synchronized"] >= 1, r
    assert r["cuda_malloc"][0] == "TIDEPOOL_UNAVAILABLE" and "no cudaIpc memory handles" in r["cuda_malloc"][1], r
    assert r["future"][0] == "TIDEPOOL_INVALID_ARGUMENT" and "version 9" in r["future"][1], r
    assert r["gone"][0] == "TIDEPOOL_UNAVAILABLE" and "cannot reach process 4194000" in r["gone"][1], r
    assert r["released_on_refusals"] == [7, 8, 9], r
    assert r["other"] == ["RuntimeError", "CUDA error: out of memory"], r


def test_a_messages_tensors_share_one_event_made_by_the_sender_and_opened_by_the_receiver():
    r = run_with_stand_in("""
import ctypes, json
from multiprocessing.reduction import ForkingPickler
import tidepool
tidepool.torch.use()
pointers = [tidepool.allocate(1 << 20) for _ in range(8)]
tensors = [torch.Tensor(p, nbytes=1 << 20) for p in pointers]
made, waited = events_made[0], len(events_waited)
received = ForkingPickler.loads(ForkingPickler.dumps(tensors))
r = {"received": len(received), "made": events_made[0] - made, "waited": len(events_waited) - waited}
made = events_made[0]
alone = [ForkingPickler.loads(ForkingPickler.dumps(t)) for t in tensors[:3]]
r["made_alone"] = events_made[0] - made
del received, alone
print(json.dumps(r))
""", TIDEPOOL_SIM_HOST_MEMORY=1, TIDEPOOL_SIM_UUID="torch-events")
    assert r["received"] == 8 and r["made"] == 1 and r["waited"] == 1, r
    assert r["made_alone"] == 3, r
