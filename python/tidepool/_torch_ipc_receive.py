"""Receiving CUDA tensors from a process that runs PyTorch's own allocator (torch.multiprocessing's
queues, pipes and a child's arguments), in a process whose CUDA memory is tidepool's (use()).

PyTorch rebuilds a received CUDA tensor over the sender's memory through its allocator's
getIpcDevPtr, which the pluggable interface refuses ("CUDAPluggableAllocator does not yet support
getIpcDevPtr"). use() wraps torch.multiprocessing.reductions.rebuild_cuda_tensor: where PyTorch
refuses, the sender's storage is mapped here by tidepool instead, from what PyTorch sent:
- a cudaMalloc segment ('c', the default allocator's handle: a version byte, b"c", the 64-byte
  cudaIpcMemHandle_t of the segment's base) is opened with cuIpcOpenMemHandle
  (tidepool_open_cuda_ipc_memory), which the driver maps once per process however often it opens;
- an expandable segment ('e', PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the sender's pid,
  its segment size and the file descriptors of the handles under the storage, in the sender's
  table) is taken with pidfd_getfd, as PyTorch does, and mapped as tidepool maps its own shares
  (tidepool_import_memory).
As PyTorch's own receiver does: the current stream waits for the sender's event before the tensor
is used; the tensor is registered in reductions.shared_cache, so later receipts of the same storage
reuse it (PyTorch's rebuild then releases their counters at once); when the storage dies, the
device's stream is synchronized and the sender's reference counter for this receipt decremented
(torch.UntypedStorage._release_ipc_counter_cuda), so that the sender's allocator may free the
block. A storage that cannot be mapped releases its counter too, and raises tidepool's error. A
tensor received so cannot be sent on (counted as received memory: _ipc.is_imported).
"""

import ctypes
import functools
import os
import struct

from . import _errors, _ipc, _library, _torch_ipc

_MARK = "_tidepool_receives_pytorch_tensors"
_REFUSAL = "does not yet support getIpcDevPtr"
_NEWEST_VERSION = 2  # PyTorch 2.11's shareable handles; 'e' changed after it
_SHARE_HEADER = struct.Struct("=i4xQQ")  # PyTorch's ShareHeader: pid_t pid, size_t segment_size, size_t num_handles
_PIDFD_GETFD = 438  # the system call's number on x86-64 and arm64


def receive_from_pytorchs_allocator(torch):
    """Makes torch.multiprocessing's rebuild of a received CUDA tensor map it with tidepool where
    PyTorch's pluggable interface refuses to."""
    try:
        from torch.multiprocessing import reductions
    except ImportError:
        return
    original = reductions.rebuild_cuda_tensor
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def rebuild_cuda_tensor(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except RuntimeError as error:
            if _REFUSAL not in str(error):
                raise
        return _rebuild(torch, reductions, *args, **kwargs)

    setattr(rebuild_cuda_tensor, _MARK, True)
    reductions.rebuild_cuda_tensor = rebuild_cuda_tensor  # what a pickled tensor names


def _rebuild(torch, reductions, tensor_cls, tensor_size, tensor_stride, tensor_offset, storage_cls, dtype,
             storage_device, storage_handle, storage_size_bytes, storage_offset_bytes, requires_grad,
             ref_counter_handle, ref_counter_offset, event_handle, event_sync_required):
    device = torch.device("cuda", storage_device)
    release = functools.partial(_release_counter, torch, device, ref_counter_handle, ref_counter_offset)
    try:
        if event_sync_required:
            _torch_ipc.wait_for_sender(torch, device, event_handle)
        memory = _ReceivedStorage(storage_handle, storage_device, storage_offset_bytes, storage_size_bytes,
                                  release)
    except BaseException:
        release()  # never received: the sender need not keep the block for this receipt
        raise
    storage = torch.as_tensor(memory, device=device).untyped_storage()  # holds `memory` until freed
    reductions.shared_cache[(storage_handle, storage_offset_bytes)] = reductions.StorageWeakRef(storage)
    tensor = torch._utils._rebuild_tensor(torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype,
                                                                     _internal=True),
                                          tensor_offset, tensor_size, tensor_stride)
    if tensor_cls is torch.nn.Parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    tensor.requires_grad = requires_grad
    return tensor


def _release_counter(torch, device, ref_counter_handle, ref_counter_offset):
    """The sender's counter for one receipt, decremented once the device's work on it is done."""
    torch.cuda.current_stream(device).synchronize()
    torch.UntypedStorage._release_ipc_counter_cuda(ref_counter_handle, ref_counter_offset)


class _ReceivedStorage:
    """The sender's storage mapped here, with `__cuda_array_interface__` (bytes); the mapping is
    closed and the sender's counter released when it is collected (its tensor's storage died)."""

    def __init__(self, handle, device, offset, size, release):
        self._close = None
        self._release = release
        kind = _handle_kind(handle)
        if kind == b"c":
            base = _open_cuda_ipc(device, handle[-64:])
            self.ptr = base + offset
            _ipc.add_received(self.ptr)  # an ImportedMemory (below) counts itself
            self._close = functools.partial(_close_cuda_ipc, base, self.ptr)
        else:
            memory = _import_expandable_segment(handle, device, offset, size)
            self._close = memory.close
            self.ptr = memory.ptr
        self.bytes = size

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.bytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3, "strides": None}

    def __del__(self):
        close, self._close = self._close, None
        if close is None:
            return
        try:
            close()  # waits for the device, then unmaps
        finally:
            self._release()


def _handle_kind(handle):
    if len(handle) == 64:
        return b"c"  # an older PyTorch's bare cudaIpcMemHandle_t
    version, kind = (handle[0], handle[1:2]) if len(handle) >= 2 else (None, None)
    if version is None or version > _NEWEST_VERSION or kind not in (b"c", b"e") or \
            (kind == b"c" and len(handle) != 66):
        raise _errors.error_for(_errors.INVALID_ARGUMENT,
                                f"tidepool: a CUDA tensor sent by PyTorch's allocator came with a shareable "
                                f"handle tidepool does not know (version {version}, type {kind!r}, {len(handle)} "
                                f"bytes; known: versions up to {_NEWEST_VERSION}, types 'c' and 'e')")
    return kind


def _open_cuda_ipc(device, handle64):
    lib = _library.load()
    ptr = ctypes.c_void_p(0)
    raw = (ctypes.c_uint8 * 64)(*handle64)
    _library.check(lib.tidepool_open_cuda_ipc_memory(device, raw, ctypes.byref(ptr)))
    return ptr.value


def _close_cuda_ipc(base, ptr):
    _ipc.drop_received(ptr)
    _library.check(_library.load().tidepool_close_cuda_ipc_memory(ctypes.c_void_p(base)))


def _import_expandable_segment(handle, device, offset, size):
    """An expandable segment's handles under the storage, taken from the sender (pidfd_getfd) and
    mapped as one of tidepool's own shares (an ImportedMemory)."""
    body = handle[2:]
    if len(body) < _SHARE_HEADER.size:
        raise _errors.error_for(_errors.INVALID_ARGUMENT, "tidepool: an expandable segment's handle too short")
    pid, segment_size, count = _SHARE_HEADER.unpack_from(body)
    fd_bytes = body[_SHARE_HEADER.size:]
    if count == 0 or len(fd_bytes) != 4 * count:
        raise _errors.error_for(_errors.INVALID_ARGUMENT,
                                f"tidepool: an expandable segment's handle names {count} handles in "
                                f"{len(fd_bytes)} bytes (tidepool reads POSIX descriptors, 4 bytes each)")
    senders_fds = struct.unpack(f"={count}i", fd_bytes)
    fds = []
    try:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as error:
            raise _errors.error_for(_errors.UNAVAILABLE,
                                    f"tidepool: cannot reach process {pid}, which sent an expandable segment's "
                                    f"handles ({error})") from error
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            for fd in senders_fds:
                got = libc.syscall(_PIDFD_GETFD, pidfd, fd, 0)
                if got < 0:
                    error = ctypes.get_errno()
                    raise _errors.error_for(_errors.UNAVAILABLE,
                                            f"tidepool: cannot take descriptor {fd} from process {pid} "
                                            f"(pidfd_getfd: {os.strerror(error)}), which PyTorch's expandable "
                                            "segments send")
                fds.append(got)
        finally:
            os.close(pidfd)
        uuid = _device_uuid(device)
        return _ipc.ImportedMemory(uuid, fds, [segment_size] * count, offset, size)
    finally:
        for fd in fds:
            os.close(fd)


def _device_uuid(device):
    lib = _library.load()
    uuid = (ctypes.c_uint8 * 16)()
    _library.check(lib.tidepool_device_uuid(device, uuid))
    return bytes(uuid)
