"""Sending a tidepool tensor to another process (torch.multiprocessing's CUDA IPC) after
tidepool.torch.use(): PyTorch's refusal ("does not yet support shareIPcHandle") becomes tidepool's
InvalidArgumentError saying why and what to do; any other failure of the call is left as it was.

These run over a stand-in `torch` module (torch_stand_in.py); the real PyTorch's reduction of a
CUDA tensor is refused the same way on the GPU (gpu/test_frameworks_gpu.py)."""

from torch_stand_in import run_with_stand_in


def test_pytorchs_refusal_becomes_tidepools_error_and_other_failures_pass_through():
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
    assert "cannot be shared with another process" in r["refused"], r
    assert "Send it as a CPU tensor" in r["refused"], r
    assert r["cause"].startswith("CUDAPluggableAllocator does not yet support shareIPcHandle"), r
    assert r["other"] == ["RuntimeError", "CUDA error: invalid device context"], r
