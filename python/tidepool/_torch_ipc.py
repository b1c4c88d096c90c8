"""Sharing a CUDA tensor with another process (torch.multiprocessing, CUDA IPC) under
tidepool.torch.use(): refused, with an error that says why and what to do.

PyTorch's pluggable allocator interface refuses shareIpcHandle ("CUDAPluggableAllocator does not
yet support shareIPcHandle"), and tidepool's memory is CUDA virtual memory, which
cudaIpcGetMemHandle cannot export. use() wraps torch.UntypedStorage._share_cuda_ (what
torch.multiprocessing's reductions call to send a CUDA tensor) so that the refusal names tidepool
and the ways around it. Sent through a torch.multiprocessing.Queue the error is raised in the
queue's feeder thread and the receiver waits for ever, as with any object that cannot be
pickled: that hang is the queue's; the message printed is this one.
"""

import functools

from . import _errors

MESSAGE = ("tidepool: a CUDA tensor allocated by tidepool cannot be shared with another process "
           "(torch.multiprocessing / CUDA IPC): PyTorch's pluggable allocator interface refuses "
           "shareIpcHandle, and tidepool's memory (CUDA virtual memory) cannot be exported by "
           "cudaIpcGetMemHandle. Send it as a CPU tensor, or keep the processes that exchange "
           "CUDA tensors on PyTorch's allocator")


def refuse_cuda_ipc_clearly(torch):
    """Wraps torch.UntypedStorage._share_cuda_: PyTorch's refusal becomes tidepool's message."""
    storage_class = torch.UntypedStorage
    original = storage_class._share_cuda_

    @functools.wraps(original)
    def share_cuda(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        except RuntimeError as error:
            if "does not yet support shareIPcHandle" not in str(error) and \
                    "does not yet support shareIpcHandle" not in str(error):
                raise
            raise _errors.error_for(_errors.INVALID_ARGUMENT, MESSAGE) from error

    storage_class._share_cuda_ = share_cuda
