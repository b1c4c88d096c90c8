"""Sending CUDA tensors to other processes (torch.multiprocessing's queues, pipes and a child's
arguments) under tidepool.torch.use(), as under PyTorch's own allocator.

PyTorch's pluggable allocator interface refuses shareIpcHandle ("CUDAPluggableAllocator does not
yet support shareIPcHandle"), and tidepool's memory is CUDA virtual memory, which
cudaIpcGetMemHandle cannot export. use() replaces torch.multiprocessing's reduction of tensors
(reductions.reduce_tensor, and ForkingPickler's registrations of it) with one that sends a CUDA
tensor's storage through tidepool.share_memory (_ipc.py): the storage's physical handles go as
file descriptors, and the receiver maps them and rebuilds the tensor over them, with its dtype,
shape, strides, offset, requires_grad and class (Parameter). As with PyTorch's allocator:
- the receiver waits on its current stream for the sender's work queued before the send (an
  interprocess CUDA event recorded on the sender's current stream, one for all the tensors of a
  message on that stream, opened once by the receiver);
- the sender keeps the storage alive, even once the program dropped the tensor, until every
  receiver has let go (its tensor collected, or its process ended), so its bytes are not handed
  out again under a receiver;
- writes on either side are seen by the other: one memory.
The receiving process needs the tidepool package and its library, but not use(): it may run
PyTorch's own allocator. A tensor received this way lies on an import, not on a tidepool
allocation, and cannot be sent on to a third process (refused with tidepool's error; send it from
the process that made it). CPU tensors, and CUDA tensors tidepool did not allocate, take PyTorch's
own path. A CUDA storage sent alone (not as a tensor) is still refused by PyTorch's interface:
use() turns that refusal into tidepool's error saying so.
"""

import functools

from . import _errors, _ipc, _ipc_descriptors

_MARK = "_tidepool_shares_cuda_tensors"

SEND_ON_MESSAGE = ("tidepool: this CUDA tensor was received from another process and cannot be sent "
                   "on to a third: its memory is mapped from the process that made it. Send it from "
                   "that process, or send a copy (tensor.clone())")
STORAGE_MESSAGE = ("tidepool: a CUDA storage allocated by tidepool cannot be sent to another process "
                   "on its own (PyTorch's pluggable allocator interface refuses shareIpcHandle): send "
                   "a tensor over it instead, which tidepool.torch.use() shares")


def share_cuda_tensors(torch):
    """Makes torch.multiprocessing send CUDA tensors allocated by tidepool through tidepool's own
    sharing, and PyTorch's refusal for storages sent alone name tidepool."""
    _refuse_cuda_storages_clearly(torch)
    try:
        from torch.multiprocessing import reductions
    except ImportError:  # a torch without multiprocessing: nothing sends tensors
        return
    original = reductions.reduce_tensor
    if getattr(original, _MARK, False):
        return
    _ipc_descriptors.install_message_hooks()  # a message's tensors fetched by the receiver at once

    @functools.wraps(original)
    def reduce_tensor(tensor):
        if not getattr(tensor, "is_cuda", False) or (tensor.requires_grad and not tensor.is_leaf):
            return original(tensor)  # CPU tensors; and PyTorch's refusal of non-leaf tensors
        return _reduce_cuda_tensor(torch, tensor, original)

    setattr(reduce_tensor, _MARK, True)
    # init_reductions() registers the module's reduce_tensor, read when it runs: a later call
    # (torch.multiprocessing imported again) registers this one. Registrations made already
    # hold the original itself: replace them.
    reductions.reduce_tensor = reduce_tensor
    from multiprocessing.reduction import ForkingPickler

    for cls, reducer in list(ForkingPickler._extra_reducers.items()):
        if reducer is original:
            ForkingPickler.register(cls, reduce_tensor)


def _reduce_cuda_tensor(torch, tensor, original):
    storage = tensor.untyped_storage()
    metadata = (type(tensor), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset(),
                tensor.requires_grad)
    if storage.nbytes() == 0:
        return rebuild_empty_cuda_tensor, (tensor.device.index,) + metadata
    ptr = storage.data_ptr()
    if _ipc.is_imported(ptr):
        raise _errors.error_for(_errors.INVALID_ARGUMENT, SEND_ON_MESSAGE)
    event, handle = _ready_event(torch, tensor.device)
    try:
        # Keeps the storage (so its memory) and the event alive until every receiver let go.
        share = _ipc.share_memory(ptr, keep=(storage, event))
    except _errors.TidepoolError as error:
        if error.status == _errors.INVALID_POINTER:
            return original(tensor)  # not tidepool's memory: PyTorch's own way
        raise
    return rebuild_cuda_tensor, (share, handle) + metadata


def _ready_event(torch, device):
    """An interprocess event recorded on the sender's current stream and its handle, so the
    receiver's stream waits for the work that wrote the tensor; where CUDA makes none, the
    current stream is synchronized instead (None, None). One for all the tensors of a message on
    one stream: recorded at the first, it follows all the work queued before the send."""
    stream = torch.cuda.current_stream(device)
    message = _ipc_descriptors.message_state()
    key = ("ready event", device.index, stream.cuda_stream)
    if message is not None and key in message:
        return message[key]
    try:
        event = torch.cuda.Event(interprocess=True)
        event.record(stream)
        ready = event, event.ipc_handle()
    except (RuntimeError, TypeError, AttributeError):
        stream.synchronize()
        ready = None, None
    if message is not None:
        message[key] = ready
    return ready


def wait_for_sender(torch, device, event_handle):
    """Makes the current stream wait for the sender's event, opened once for all the tensors of
    a message that name it."""
    stream = torch.cuda.current_stream(device)
    message = _ipc_descriptors.message_state(receiving=True)
    key = ("waited", bytes(event_handle), device.index, stream.cuda_stream)
    if message is not None and key in message:
        return
    torch.cuda.Event.from_ipc_handle(device, event_handle).wait(stream)
    if message is not None:
        message[key] = True


def rebuild_cuda_tensor(memory, event_handle, cls, dtype, shape, stride, storage_offset, requires_grad):
    """The receiver's side of _reduce_cuda_tensor: a tensor over the ImportedMemory `memory`,
    which its storage keeps mapped while it lives."""
    import torch

    device = torch.device("cuda", memory.device)
    if event_handle is not None:
        wait_for_sender(torch, device, event_handle)
    raw = torch.as_tensor(memory, device=device)  # bytes, no copy; holds `memory` until freed
    tensor = torch.empty((0,), dtype=dtype, device=device).set_(raw.untyped_storage(), storage_offset, shape, stride)
    return _as_class(torch, tensor, cls, requires_grad)


def rebuild_empty_cuda_tensor(device_index, cls, dtype, shape, stride, storage_offset, requires_grad):
    """The receiver's side of an empty CUDA tensor (no memory to share)."""
    import torch

    tensor = torch.empty_strided(shape, stride, dtype=dtype, device=torch.device("cuda", device_index))
    return _as_class(torch, tensor, cls, requires_grad)


def _as_class(torch, tensor, cls, requires_grad):
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad)


def _refuse_cuda_storages_clearly(torch):
    """Wraps torch.UntypedStorage._share_cuda_: PyTorch's refusal becomes tidepool's message."""
    storage_class = torch.UntypedStorage
    original = storage_class._share_cuda_
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def share_cuda(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        except RuntimeError as error:
            if "does not yet support shareIPcHandle" not in str(error) and \
                    "does not yet support shareIpcHandle" not in str(error):
                raise
            raise _errors.error_for(_errors.INVALID_ARGUMENT, STORAGE_MESSAGE) from error

    setattr(share_cuda, _MARK, True)
    storage_class._share_cuda_ = share_cuda
