"""tidepool.torch.use() makes Tensor.record_stream(stream) reach tidepool after PyTorch's own call:
the tensor's block, freed later, waits for the work queued on `stream` (on sim: "pending" right
after the free, where without the call it is free at once); a storage tidepool did not allocate (or
a CPU tensor's) is left to PyTorch, as its own allocator does; a stream of another device is
refused with a clear error and nothing changes.

These run over a stand-in `torch` module (torch_stand_in.py: PyTorch is not installed on the
machines that run them); a side stream's kernel reading a freed tensor while the next allocation is
written runs through the real PyTorch on the GPU (gpu/test_frameworks_gpu.py)."""

from torch_stand_in import run_with_stand_in

# The per-thread default stream's handle: a stream of every device, on sim as in CUDA.
PER_THREAD_STREAM = 2


def test_record_stream_reaches_tidepool_after_pytorchs_own_call():
    r = run_with_stand_in(f"""
import json
import tidepool
from tidepool import _allocate
tidepool.torch.use()

def state_after_free(record):
    pointer = _allocate.allocate(3 << 20)
    if record:
        torch.Tensor(pointer).record_stream(torch.cuda.Stream({PER_THREAD_STREAM}))
    _allocate.deallocate(pointer)
    return [b["state"] for b in tidepool.describe()["blocks"] if b["address"] == pointer]

result = {{"without": state_after_free(False), "recorded": state_after_free(True)}}
pointer = _allocate.allocate(3 << 20)
torch.Tensor(pointer).record_stream(torch.Stream({PER_THREAD_STREAM}))  # a device-generic stream
_allocate.deallocate(pointer)
result["generic"] = [b["state"] for b in tidepool.describe()["blocks"] if b["address"] == pointer]
torch.Tensor(0xdead0000).record_stream(torch.cuda.Stream({PER_THREAD_STREAM}))  # not tidepool's
torch.Tensor(0).record_stream(torch.cuda.Stream({PER_THREAD_STREAM}))  # an empty tensor
torch.Tensor(0x7f0000, device_type="cpu").record_stream(torch.cuda.Stream({PER_THREAD_STREAM}))
result["pytorch_calls"] = len(recorded_by_pytorch)
result["wrapped_name"] = torch.Tensor.record_stream.__name__
print(json.dumps(result))
""")
    assert r["without"] == ["free"], r
    assert r["recorded"] == ["pending"] and r["generic"] == ["pending"], r
    assert r["pytorch_calls"] == 5, r  # PyTorch's own call runs first, every time
    assert r["wrapped_name"] == "record_stream", r


def test_a_stream_of_another_device_is_refused_and_changes_nothing():
    r = run_with_stand_in("""
import json
import tidepool
from tidepool import _allocate
tidepool.torch.use()
pointer = _allocate.allocate(3 << 20)
try:
    torch.Tensor(pointer).record_stream(torch.cuda.Stream(0x5000))  # no stream of device 0
    refused = None
except tidepool.TidepoolError as error:
    refused = error.name
_allocate.deallocate(pointer)
state = [b["state"] for b in tidepool.describe()["blocks"] if b["address"] == pointer]
print(json.dumps({"refused": refused, "state": state}))
""")
    assert r == {"refused": "TIDEPOOL_INVALID_STREAM", "state": ["free"]}, r
