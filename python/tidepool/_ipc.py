"""Memory shared between processes: a live tidepool allocation sent to another process, which maps
the same device memory (CUDA IPC of tidepool's virtual memory; cudaIpcGetMemHandle cannot export
it).

    # sender: keep=... stays alive here until every receiver has let go of the memory
    queue.put(tidepool.share_memory(array.data.ptr, keep=array))
    # receiver (a multiprocessing child): an ImportedMemory, with __cuda_array_interface__
    memory = queue.get()
    array = cupy.asarray(memory).view(cupy.float32)   # the sender's bytes, no copy

A MemoryShare travels by pickling through multiprocessing (queues, pipes, a child's arguments):
each physical handle under the allocation goes as a file descriptor (_ipc_descriptors.py), and
with them the write end of a pipe whose read end the sender watches. A receiver keeps its write
end open while it maps the memory, and the process's death closes it too, so the sender learns
when every receiver is done without any message: a thread of its own then drops `keep`, and the
allocation may be freed and reused. This is the job PyTorch's IPC reference counter file does for
its own allocator. tidepool.torch.use() sends CUDA tensors this way (_torch_ipc.py).

A receiver that still maps an allocation's handles from an earlier send maps nothing again: each
share names its handles (the sending process's token and the handles' export ids), and every
ImportedMemory over the same handles is a view of one mapping, unmapped when the last view closes.
So a program that sends the same weights every step pays the driver's import and mapping once,
as PyTorch's receivers reuse a cudaIpcOpenMemHandle while a tensor from it lives.
"""

import ctypes
import functools
import os
import select
import threading

from . import _arguments, _errors, _library
from ._ipc_descriptors import Descriptors, install_message_hooks

_first_capacity = 64  # handles under one allocation asked for first; more on a second try

RECEIVED_MESSAGE = ("tidepool: this memory was received from another process and cannot be shared "
                    "on to a third: it is mapped from the process that made it. Share it from that "
                    "process, or share a copy")


@functools.cache
def _ensure_descriptor_room():
    """A large allocation lies on many handles, each sent as a descriptor, and a model's tensors
    add up: raise this process's soft limit on open files to the hard one, once."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


class ExportedMemory:
    """One allocation's physical memory as file descriptors (tidepool_export_memory): `fds` (one
    per handle, in address order, owned by this object: close() or collection closes them),
    `handle_sizes`, `handle_ids` (each handle's export id, the same while it lives), `offset` of
    the allocation in the first handle, its size `bytes`, and the GPU's UUID `device_uuid` (16
    bytes)."""

    def __init__(self, device_uuid, fds, handle_sizes, offset, nbytes, handle_ids=()):
        self.device_uuid = bytes(device_uuid)
        self.fds = list(fds)
        self.handle_sizes = list(handle_sizes)
        self.handle_ids = list(handle_ids)
        self.offset = offset
        self.bytes = nbytes

    def close(self):
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)

    def __del__(self):
        self.close()


def export_memory(ptr):
    """Exports the live tidepool allocation at `ptr` (an int), on any device or tag, as an
    ExportedMemory. Raises TidepoolError: INVALID_POINTER for memory tidepool did not allocate,
    ASLEEP for a sleeping tag's, UNAVAILABLE where the driver cannot share the memory;
    InvalidArgumentError for memory this process received from another."""
    ptr = _arguments.pointer("export_memory", "ptr", ptr)
    if is_imported(ptr):
        raise _errors.error_for(_errors.INVALID_ARGUMENT, RECEIVED_MESSAGE)
    lib = _library.load()
    _ensure_descriptor_room()
    capacity = _first_capacity
    while True:
        uuid = (ctypes.c_uint8 * 16)()
        fds = (ctypes.c_int * capacity)()
        sizes = (ctypes.c_size_t * capacity)()
        ids = (ctypes.c_uint64 * capacity)()
        count, offset, nbytes = ctypes.c_size_t(0), ctypes.c_size_t(0), ctypes.c_size_t(0)
        status = lib.tidepool_export_memory(ctypes.c_void_p(ptr), uuid, fds, sizes, ids, capacity,
                                            ctypes.byref(count), ctypes.byref(offset), ctypes.byref(nbytes))
        if status == _errors.INVALID_ARGUMENT and count.value > capacity:
            capacity = count.value  # nothing was opened: ask again with room for all
            continue
        _library.check(status)
        n = count.value
        return ExportedMemory(bytes(uuid), fds[:n], sizes[:n], offset.value, nbytes.value, ids[:n])


class _Mapping:
    """Handles another process exported, mapped here once (tidepool_import_memory): where the
    first handle starts, the pointer that closes the mapping, and how many ImportedMemory views
    use it."""

    def __init__(self, key, ptr, offset, device):
        self.key = key
        self.base = ptr - offset
        self.close_ptr = ptr
        self.device = device
        self.views = 1


_lock = threading.Lock()
_mappings = {}  # (sender's token, GPU UUID, handle ids, handle sizes) -> _Mapping, while views use it
_views = {}  # pointer -> received memory starting there, still mapped (add_received, is_imported)


class ImportedMemory:
    """Device memory another process exported, mapped here: `ptr` (an int), `bytes`, `device`
    (this process's ordinal of the GPU). Exposes `__cuda_array_interface__` (bytes, unsigned
    8-bit), so cupy.asarray(memory) and torch.as_tensor(memory) view it without a copy and keep
    it mapped while they live. close() (or collection, or `with`) unmaps it once the device's
    queued work is done, and tells the sender this process let go. `handles_named`, a pair of
    the sending process's token and the handles' export ids, lets memory over handles this
    process maps already share that mapping (nothing is imported or mapped again)."""

    def __init__(self, device_uuid, fds, handle_sizes, offset, nbytes, keep_alive_fd=-1, handles_named=None):
        self.ptr = 0
        self._mapping = None
        self._keep_alive_fd = -1
        key = None
        if handles_named is not None and len(handles_named[1]) == len(handle_sizes):
            key = (handles_named[0], bytes(device_uuid), tuple(handles_named[1]), tuple(handle_sizes))
        mapping = None
        if key is not None:
            if offset < 0 or nbytes <= 0 or offset + nbytes > sum(handle_sizes):
                raise _errors.error_for(_errors.INVALID_ARGUMENT,
                                        f"tidepool: cannot import memory: {nbytes} bytes at offset {offset} do "
                                        f"not lie in the {sum(handle_sizes)} bytes of its handles")
            with _lock:
                mapping = _mappings.get(key)
                if mapping is not None:
                    mapping.views += 1
        if mapping is None:
            mapping = _import(device_uuid, fds, handle_sizes, offset, nbytes, key)
        self._mapping = mapping
        self._keep_alive_fd = keep_alive_fd  # this object closes it from now on
        self.ptr = mapping.base + offset
        self.bytes = nbytes
        self.device = mapping.device
        add_received(self.ptr)

    @property
    def __cuda_array_interface__(self):
        if not self.ptr:
            raise ValueError("tidepool.ImportedMemory: closed")
        return {"shape": (self.bytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3,
                "strides": None}

    def close(self):
        ptr, self.ptr = self.ptr, 0
        mapping, self._mapping = self._mapping, None
        last = False
        if ptr:
            drop_received(ptr)
        with _lock:
            if mapping is not None:
                mapping.views -= 1
                last = mapping.views == 0
                if last and _mappings.get(mapping.key) is mapping:
                    del _mappings[mapping.key]
        fd, self._keep_alive_fd = self._keep_alive_fd, -1
        try:
            if last:
                _library.check(_library.load().tidepool_close_imported_memory(ctypes.c_void_p(mapping.close_ptr)))
        finally:
            if fd >= 0:
                os.close(fd)  # the sender's watch sees this receiver let go

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  (collection at exit: the library may be gone)
            pass

    def __repr__(self):
        state = f"{self.bytes} bytes at {self.ptr:#x} on device {self.device}" if self.ptr else "closed"
        return f"tidepool.ImportedMemory({state})"


def _import(device_uuid, fds, handle_sizes, offset, nbytes, key):
    """Maps the handles behind `fds` (tidepool_import_memory) as a _Mapping with one view,
    registered under `key` unless None."""
    lib = _library.load()
    _ensure_descriptor_room()
    count = len(fds)
    uuid = (ctypes.c_uint8 * 16)(*bytes(device_uuid))
    fd_array = (ctypes.c_int * max(count, 1))(*fds)
    size_array = (ctypes.c_size_t * max(count, 1))(*handle_sizes)
    ptr = ctypes.c_void_p(0)
    device = ctypes.c_int(-1)
    _library.check(lib.tidepool_import_memory(uuid, fd_array, size_array, count, offset, nbytes, ctypes.byref(ptr),
                                              ctypes.byref(device)))
    mapping = _Mapping(key, ptr.value, offset, device.value)
    if key is not None:
        with _lock:
            _mappings.setdefault(key, mapping)  # another thread's mapping of the same handles stays first
    return mapping


def add_received(ptr):
    """Counts memory received from another process that starts at `ptr` (an ImportedMemory, or a
    storage that PyTorch's own allocator sent, _torch_ipc_receive.py): not to be shared on."""
    with _lock:
        _views[ptr] = _views.get(ptr, 0) + 1


def drop_received(ptr):
    """Undoes one add_received(ptr)."""
    with _lock:
        left = _views.pop(ptr, 1) - 1
        if left:
            _views[ptr] = left


def is_imported(ptr):
    """Whether `ptr` is the first byte of memory this process received from another process (and
    still maps)."""
    return ptr in _views


def imported_bytes():
    """Bytes of other processes' memory this process maps now (whole handles)."""
    out = ctypes.c_size_t(0)
    _library.check(_library.load().tidepool_imported_bytes(ctypes.byref(out)))
    return out.value


def _end_export(ptr):
    """tidepool_end_export for a share every receiver let go of, from the watcher's thread, which
    must go on: a pointer no longer live (the program freed it, having passed no `keep`) has
    nothing to end, and nothing else can fail there."""
    _library.load().tidepool_end_export(ctypes.c_void_p(ptr))


class _Watch:
    """The sender's side: objects kept alive for receivers, each until the read end of its pipe
    reports that every write end (the receivers', and the MemoryShare's own) is closed. One
    daemon thread polls all the pipes."""

    def __init__(self):
        self._lock = threading.Lock()
        self._kept = {}  # read end -> what it keeps alive
        self._thread = None
        self._wake_read = self._wake_write = -1
        self._wake_pending = False

    def keep(self, read_end, kept, ptr):
        with self._lock:
            self._kept[read_end] = (kept, ptr)
            if self._thread is None:
                self._wake_read, self._wake_write = os.pipe()
                self._thread = threading.Thread(target=self._run, name="tidepool-ipc-watch", daemon=True)
                self._thread.start()
            elif not self._wake_pending:
                # One wake for a burst of sends (a model's tensors): the thread takes them all.
                self._wake_pending = True
                os.write(self._wake_write, b"+")

    def count(self):
        with self._lock:
            return len(self._kept)

    def _run(self):
        poller = select.poll()
        poller.register(self._wake_read, select.POLLIN)
        watched = set()
        while True:
            with self._lock:
                self._wake_pending = False
                for fd in self._kept.keys() - watched:
                    poller.register(fd, select.POLLIN | select.POLLHUP)
                    watched.add(fd)
            for fd, _ in poller.poll():
                if fd == self._wake_read:
                    os.read(fd, 4096)
                    continue
                # Nothing is ever written: readable means end of file, every write end closed.
                poller.unregister(fd)
                watched.discard(fd)
                with self._lock:
                    kept, ptr = self._kept.pop(fd, (None, None))
                os.close(fd)
                if ptr is not None:
                    _end_export(ptr)  # while `kept` still holds the allocation: sleep may take it now
                del kept  # the allocation may be freed now (outside the lock: a free may run here)

    def forget_in_child(self):
        """After fork: the child has no watcher thread and keeps nothing for the parent's sends."""
        self._lock = threading.Lock()
        self._kept = {}
        self._thread = None
        self._wake_read = self._wake_write = -1
        self._wake_pending = False


_watch = _Watch()
# This process among senders: with the handles' export ids, what a receiver's mappings are keyed
# by. A forked child gets its own, since the export ids it makes may repeat its parent's.
_token = os.urandom(16)


def _after_fork_in_child():
    global _token
    _watch.forget_in_child()
    _token = os.urandom(16)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def kept_for_other_processes():
    """How many shared allocations this process keeps alive now because a receiver may still map
    them."""
    return _watch.count()


class MemoryShare:
    """A live tidepool allocation ready to be sent to other processes through multiprocessing
    (share_memory). Pickled, it becomes an ImportedMemory in the process that unpickles it; it may
    be sent to several. `keep` stays alive in this process until this object is gone and every
    receiver has closed its ImportedMemory (or exited)."""

    def __init__(self, ptr, keep=None):
        self._exported, self._keep_alive = None, -1  # what close() finds if the export fails
        install_message_hooks()
        self._exported = export_memory(ptr)
        read_end, self._keep_alive = os.pipe()
        _watch.keep(read_end, keep, ptr)

    @property
    def bytes(self):
        return self._exported.bytes

    def __reduce__(self):
        if self._keep_alive < 0:
            raise ValueError("tidepool.MemoryShare: closed")
        e = self._exported
        named = (_token, e.handle_ids) if e.handle_ids and all(e.handle_ids) else None
        return (_receive, (e.device_uuid, Descriptors(e.fds + [self._keep_alive]), e.handle_sizes, e.offset,
                           e.bytes, named))

    def close(self):
        """Closes this process's descriptors; receivers that got it keep theirs."""
        if self._exported is not None:
            self._exported.close()
        fd, self._keep_alive = self._keep_alive, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self):
        self.close()


def _receive(device_uuid, descriptors, handle_sizes, offset, nbytes, handles_named=None):
    install_message_hooks()  # this process's later messages: one fetch each
    fds = descriptors.detach()
    keep_alive_fd = fds.pop()  # the last one: the write end of the sender's watched pipe
    try:
        try:
            return ImportedMemory(device_uuid, fds, handle_sizes, offset, nbytes, keep_alive_fd, handles_named)
        except BaseException:
            os.close(keep_alive_fd)
            raise
    finally:
        for fd in fds:
            os.close(fd)


def share_memory(ptr, keep=None):
    """Makes the live tidepool allocation at `ptr` (an int) sendable to other processes: returns
    a MemoryShare, which pickled through multiprocessing arrives as an ImportedMemory of the same
    bytes. Pass the object that owns the allocation as `keep` (a tensor, an array): it stays alive
    here until every receiver is done, so the memory is not freed and handed out again under
    them. Until then tidepool.sleep() leaves the allocation's memory awake (the receivers map it).
    Raises TidepoolError as export_memory does."""
    return MemoryShare(ptr, keep)
