"""A stand-in `torch` module for the sim tests of tidepool.torch: PyTorch is not installed on the
machines that run them. It carries only what tidepool.torch.use() and the code it wraps touch
(CUDAPluggableAllocator, change_current_allocator, empty_cache, is_current_stream_capturing,
torch.cuda.graph with CUDAGraph and graph_pool_handle as PyTorch 2.11 has them: the pool handle in
`graph.pool` as () or (handle,), CUDAGraph.pool() refused before a capture ended; inductor's
`triton.cudagraph_trees` setting; torch.backends.cudnn's benchmark flag, its module made when
the script calls import_cudnn(); a Tensor over a given pointer, with record_stream, beside a Stream
over a given handle; torch.cuda.memory's statistics, whose C++ calls refuse pluggable allocators,
its per-process memory fraction, which they drop, its history and snapshots, refused,
UntypedStorage._share_cuda_, refused, use_mem_pool, torch.multiprocessing's reduction of
tensors with what the rebuild of a received one calls, and its rebuild of a tensor PyTorch's own
allocator sent, whose mapping the pluggable interface refuses). `SOURCE` is prepended to a script run in
a fresh interpreter (sim_support.run_script); it records PyTorch's calls in `calls`, `captures` and
`recorded_by_pytorch`. The real PyTorch runs these paths on the GPU (python/tests/gpu).
run_with_stand_in() runs a script after it and returns the JSON the script printed last."""

import json

from sim_support import run_script

SOURCE = """
import sys, types
calls = {"empty_cache": 0}
capturing = [False]
captures = []
torch = types.ModuleType("torch")
torch.cuda = types.ModuleType("torch.cuda")
torch.cuda.memory = types.ModuleType("torch.cuda.memory")
class CUDAPluggableAllocator:
    def __init__(self, path, alloc_name, free_name):
        self.names = (alloc_name, free_name)
def change_current_allocator(allocator):
    assert allocator.names == ("tidepool_torch_alloc", "tidepool_torch_free")
def empty_cache():
    calls["empty_cache"] += 1
class CUDAGraph:
    private_pools = [0]
    def __init__(self):
        self._pool, self._captured = None, False
    def capture_begin(self, pool=None, capture_error_mode="global"):
        if pool is None:
            CUDAGraph.private_pools[0] += 1
            pool = (CUDAGraph.private_pools[0], 0)
        self._pool = pool
        capturing[0] = True
        captures.append(["begin", pool])
    def capture_end(self):
        capturing[0] = False
        self._captured = True
        captures.append(["end", self._pool])
    def pool(self):
        if not self._captured:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool
pool_handles = [0]
def graph_pool_handle():
    pool_handles[0] += 1
    return (0, pool_handles[0])
class graph:
    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.pool = () if pool is None else (pool,)
        self.cuda_graph = cuda_graph
    def __enter__(self):
        torch.cuda.empty_cache()
        self.cuda_graph.capture_begin(*self.pool)
    def __exit__(self, *args):
        self.cuda_graph.capture_end()
recorded_by_pytorch = []
class Stream:
    # torch.cuda.Stream over a handle here; as in PyTorch, also made from a generic stream's
    # stream_id, device_index and device_type (the stand-in's stream ids are the handles).
    def __init__(self, handle=None, stream_id=None, device_index=None, device_type=None):
        self.cuda_stream = handle if handle is not None else stream_id
    def synchronize(self):
        calls["stream_synchronize"] = calls.get("stream_synchronize", 0) + 1
class GenericStream:  # torch.Stream: no cuda_stream
    def __init__(self, stream_id, device_index=0):
        self.stream_id, self.device_index, self.device_type = stream_id, device_index, 1
class _Storage:
    def __init__(self, pointer, nbytes=0, keep=None):
        self._pointer, self._nbytes, self._keep = pointer, nbytes, keep
    def data_ptr(self):
        return self._pointer
    def nbytes(self):
        return self._nbytes
class Tensor:
    # A tensor over `nbytes` bytes at `pointer` (uint8, one dimension), as far as
    # torch.multiprocessing's reduction and the rebuild of a received tensor look at it.
    def __init__(self, pointer, device=0, device_type="cuda", nbytes=0, keep=None):
        self._storage = _Storage(pointer, nbytes, keep)
        self.device = types.SimpleNamespace(type=device_type,
                                            index=device if device_type == "cuda" else None)
        self.is_cuda = device_type == "cuda"
        self.requires_grad, self.is_leaf, self.dtype = False, True, "uint8"
        self.shape, self._stride, self._offset = (nbytes,), (1,), 0
    def untyped_storage(self):
        return self._storage
    def stride(self):
        return self._stride
    def storage_offset(self):
        return self._offset
    def set_(self, storage, offset, shape, stride):
        self._storage, self._offset, self.shape, self._stride = storage, offset, tuple(shape), tuple(stride)
        return self
    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self
    def record_stream(self, stream):
        recorded_by_pytorch.append((self._storage.data_ptr(), getattr(stream, "cuda_stream", None)))
torch.Tensor = Tensor
def as_tensor(obj, device=None):  # over __cuda_array_interface__, keeping `obj` as PyTorch does
    interface = obj.__cuda_array_interface__
    return Tensor(interface["data"][0], nbytes=interface["shape"][0], keep=obj)
torch.as_tensor = as_tensor
torch.empty = lambda shape, dtype=None, device=None: Tensor(0, device=getattr(device, "index", 0))
torch.nn = types.ModuleType("torch.nn")
torch.nn.Parameter = type("Parameter", (Tensor,), {})
# torch.multiprocessing's reductions as PyTorch 2.11 has them: importing it registers
# reduce_tensor with multiprocessing's ForkingPickler; PyTorch's own way for CUDA storages is
# UntypedStorage._share_cuda_ (refused below), marked here by what it pickles to.
torch.multiprocessing = types.ModuleType("torch.multiprocessing")
torch.multiprocessing.reductions = types.ModuleType("torch.multiprocessing.reductions")
def _pytorchs_rebuild(pointer):
    return ("rebuilt by PyTorch's reduction", pointer)
def _pytorchs_reduce_tensor(tensor):
    return (_pytorchs_rebuild, (tensor.untyped_storage().data_ptr(),))
def init_reductions():
    from multiprocessing.reduction import ForkingPickler
    ForkingPickler.register(Tensor, torch.multiprocessing.reductions.reduce_tensor)
torch.multiprocessing.reductions.reduce_tensor = _pytorchs_reduce_tensor
torch.multiprocessing.reductions.init_reductions = init_reductions
torch.multiprocessing.reductions._pytorchs_rebuild = _pytorchs_rebuild
sys.modules["torch.multiprocessing"] = torch.multiprocessing
sys.modules["torch.multiprocessing.reductions"] = torch.multiprocessing.reductions
init_reductions()
# torch/cuda/memory.py's statistics, as PyTorch 2.11 has them: every reader goes through
# memory_stats_as_nested_dict (looked up in the module at each call), and the C++ calls behind it
# and behind reset_peak_memory_stats refuse a pluggable allocator.
def _refused(name):
    raise RuntimeError(f"CUDAPluggableAllocator does not yet support {name}. If you need it, "
                       "please file an issue describing your use case.")
def memory_stats_as_nested_dict(device=None):
    _refused("getDeviceStats")
def memory_stats(device=None):
    flat = {}
    def add(prefix, value):
        if isinstance(value, dict):
            for key, inner in value.items():
                add(prefix + "." + key if prefix else key, inner)
        else:
            flat[prefix] = value
    add("", torch.cuda.memory.memory_stats_as_nested_dict(device=device))
    return dict(sorted(flat.items()))
def reset_peak_memory_stats(device=None):
    _refused("resetPeakStats")
def memory_summary(device=None, abbreviated=False):
    _refused("getDeviceStats")
def reset_accumulated_memory_stats(device=None):
    _refused("resetAccumulatedStats")
for _name, _function in {
        "memory_stats_as_nested_dict": memory_stats_as_nested_dict, "memory_stats": memory_stats,
        "reset_peak_memory_stats": reset_peak_memory_stats, "memory_summary": memory_summary,
        "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
        "memory_allocated": lambda device=None: torch.cuda.memory.memory_stats(device).get(
            "allocated_bytes.all.current", 0),
        "max_memory_allocated": lambda device=None: torch.cuda.memory.memory_stats(device).get(
            "allocated_bytes.all.peak", 0),
        "memory_reserved": lambda device=None: torch.cuda.memory.memory_stats(device).get(
            "reserved_bytes.all.current", 0),
        "max_memory_reserved": lambda device=None: torch.cuda.memory.memory_stats(device).get(
            "reserved_bytes.all.peak", 0)}.items():
    setattr(torch.cuda.memory, _name, _function)
    setattr(torch.cuda, _name, _function)
# The per-process memory fraction as PyTorch 2.11 has it: the setter checks its argument and makes a
# C++ call that the pluggable interface drops (recorded here in `fractions_to_pytorch`), the getter
# is refused. The stand-in GPU has 1 GiB.
fractions_to_pytorch = []
def set_per_process_memory_fraction(fraction, device=None):
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    fractions_to_pytorch.append(fraction)
def get_per_process_memory_fraction(device=None):
    _refused("getMemoryFraction")
for _name, _function in {
        "set_per_process_memory_fraction": set_per_process_memory_fraction,
        "get_per_process_memory_fraction": get_per_process_memory_fraction}.items():
    setattr(torch.cuda.memory, _name, _function)
    setattr(torch.cuda, _name, _function)
# torch.cuda.memory's history and snapshots as PyTorch 2.11 has them: their C++ calls refuse a
# pluggable allocator, and _dump_snapshot pickles what the module's _snapshot (looked up at each
# call) returns.
def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                           device=None, clear_history=False):
    _refused("recordHistory")
def _snapshot(device=None, augment_with_fx_traces=False):
    _refused("snapshot")
def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    import pickle
    s = torch.cuda.memory._snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(s, f)
def memory_snapshot(mempool_id=None):
    _refused("snapshot")
torch.cuda.memory._record_memory_history = _record_memory_history
torch.cuda.memory._snapshot = _snapshot
torch.cuda.memory._dump_snapshot = _dump_snapshot
torch.cuda.memory.memory_snapshot = memory_snapshot
torch.cuda.memory_snapshot = memory_snapshot
# torch.UntypedStorage._share_cuda_, what torch.multiprocessing calls to send a CUDA tensor: the
# pluggable interface refuses it (PyTorch's message spells it "shareIPcHandle"); `share_fails_with`
# makes it fail another way.
share_fails_with = [None]
class UntypedStorage:
    def _share_cuda_(self):
        if share_fails_with[0] is not None:
            raise RuntimeError(share_fails_with[0])
        raise RuntimeError("CUDAPluggableAllocator does not yet support shareIPcHandle. If you "
                           "need it, please file an issue describing your use case.")
torch.UntypedStorage = UntypedStorage
# The receiving side as PyTorch 2.11 has it (torch/multiprocessing/reductions.py): a storage
# received before and still alive is reused from shared_cache (the new receipt's counter released
# at once); else UntypedStorage._new_shared_cuda maps it through the allocator's getIpcDevPtr,
# which the pluggable interface refuses after waiting for the sender's event (`open_fails_with`
# makes it fail another way). Counters released are in `released_counters`, events waited on in
# `events_waited`.
import weakref
released_counters, events_waited, open_fails_with = [], [], [None]
def _new_shared_cuda(*args):
    if args[7]:
        events_waited.append(args[6])
    if open_fails_with[0] is not None:
        raise RuntimeError(open_fails_with[0])
    raise RuntimeError("CUDAPluggableAllocator does not yet support getIpcDevPtr. If you need it, please file an "
                       "issue describing your use case.")
UntypedStorage._new_shared_cuda = staticmethod(_new_shared_cuda)
UntypedStorage._release_ipc_counter_cuda = staticmethod(lambda handle, offset: released_counters.append([handle.decode(), offset]))
UntypedStorage._release_ipc_counter = staticmethod(
    lambda handle, offset, device=None: UntypedStorage._release_ipc_counter_cuda(handle, offset))
class StorageWeakRef:
    def __init__(self, storage):
        self.ref = weakref.ref(storage)
reductions = torch.multiprocessing.reductions
reductions.shared_cache, reductions.StorageWeakRef = {}, StorageWeakRef
def rebuild_cuda_tensor(tensor_cls, tensor_size, tensor_stride, tensor_offset, storage_cls, dtype, storage_device,
                        storage_handle, storage_size_bytes, storage_offset_bytes, requires_grad, ref_counter_handle,
                        ref_counter_offset, event_handle, event_sync_required):
    cached = reductions.shared_cache.get((storage_handle, storage_offset_bytes))
    storage = cached.ref() if cached is not None else None
    if storage is None:
        storage = storage_cls._new_shared_cuda(storage_device, storage_handle, storage_size_bytes,
                                               storage_offset_bytes, ref_counter_handle, ref_counter_offset,
                                               event_handle, event_sync_required)
    else:
        storage_cls._release_ipc_counter(ref_counter_handle, ref_counter_offset, device=storage_device)
    t = torch._utils._rebuild_tensor(torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True),
                                     tensor_offset, tensor_size, tensor_stride)
    t.requires_grad = requires_grad
    return t
reductions.rebuild_cuda_tensor = rebuild_cuda_tensor
torch._utils = types.SimpleNamespace(_rebuild_tensor=lambda typed, offset, size, stride: Tensor(0).set_(
    typed._untyped_storage, offset, size, stride))
torch.storage = types.SimpleNamespace(TypedStorage=lambda wrap_storage, dtype, _internal: types.SimpleNamespace(
    _untyped_storage=wrap_storage, dtype=dtype))
class Event:  # interprocess events: `events_made` counts them, `events_waited` their opened handles
    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        events_made[0] += 1
        self.handle = b"event-%d" % events_made[0]
    def record(self, stream=None):
        pass
    def ipc_handle(self):
        return self.handle
    @staticmethod
    def from_ipc_handle(device, handle):
        return types.SimpleNamespace(wait=lambda stream: events_waited.append(handle))
events_made = [0]
torch.cuda.Event = Event
# torch.cuda.use_mem_pool as PyTorch 2.11 has it: a context manager over a MemPool (recorded in
# `pools_used`; a MemPool cannot be made under a pluggable allocator, so any pool will do here).
import contextlib
pools_used = []
@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    pools_used.append(pool)
    yield
torch.cuda.memory.use_mem_pool = use_mem_pool
torch.cuda.use_mem_pool = use_mem_pool
class device:  # torch.device over "cuda", "cuda:N" or ("cuda", N)
    def __init__(self, spec, index=None):
        kind, _, text = str(spec).partition(":")
        self.type, self.index = kind, int(text) if text else index
torch.device = device
torch.cuda.get_device_properties = lambda device: types.SimpleNamespace(total_memory=1 << 30)
torch.cuda.is_initialized = lambda: True
torch.cuda.current_device = lambda: 0
torch.cuda.current_stream = lambda device=None: Stream(0)  # the default stream: sim captures none
torch.cuda.Stream = Stream
torch.Stream = GenericStream
torch.cuda.memory.CUDAPluggableAllocator = CUDAPluggableAllocator
torch.cuda.memory.change_current_allocator = change_current_allocator
torch.cuda.memory.empty_cache = empty_cache
torch.cuda.empty_cache = empty_cache
torch.cuda.is_current_stream_capturing = lambda: capturing[0]
torch.cuda.CUDAGraph = CUDAGraph
torch.cuda.graph = graph
torch.cuda.graph_pool_handle = graph_pool_handle
# torch.backends.cudnn as PyTorch 2.11 has it: the flag lives in C++ (torch._C), the module's
# `benchmark` attribute is a ContextProp on the module's class keeping the C++ setter, and
# flags() / set_flags() look the setter up in torch._C at each call. PyTorch's cuDNN benchmark
# asks the allocator's cacheInfo, refused for a pluggable allocator: `convolution` does the same.
torch._C = types.ModuleType("torch._C")
cudnn_benchmark = [False]
def _get_cudnn_benchmark():
    return cudnn_benchmark[0]
def _set_cudnn_benchmark(on):
    cudnn_benchmark[0] = bool(on)
torch._C._get_cudnn_benchmark = _get_cudnn_benchmark
torch._C._set_cudnn_benchmark = _set_cudnn_benchmark
class ContextProp:
    def __init__(self, getter, setter):
        self.getter, self.setter = getter, setter
    def __get__(self, obj, objtype):
        return self.getter()
    def __set__(self, obj, value):
        self.setter(value)
def _cudnn_module():
    class CudnnModule(types.ModuleType):
        benchmark = ContextProp(torch._C._get_cudnn_benchmark, torch._C._set_cudnn_benchmark)
        def set_flags(self, _benchmark=None):
            before = torch._C._get_cudnn_benchmark()
            if _benchmark is not None:
                torch._C._set_cudnn_benchmark(_benchmark)
            return before
        def convolution(self):
            if torch._C._get_cudnn_benchmark():
                _refused("cacheInfo")
            return "convolved"
    return CudnnModule("torch.backends.cudnn")
torch.backends = types.ModuleType("torch.backends")
def import_cudnn():  # what `import torch.backends.cudnn` does, whenever the program does it
    torch.backends.cudnn = sys.modules["torch.backends.cudnn"] = _cudnn_module()
    return torch.backends.cudnn
sys.modules["torch.backends"] = torch.backends
torch._inductor = types.ModuleType("torch._inductor")
torch._inductor.config = types.ModuleType("torch._inductor.config")
torch._inductor.config.triton = types.SimpleNamespace(cudagraph_trees=True)
sys.modules["torch._inductor"] = torch._inductor
sys.modules["torch._inductor.config"] = torch._inductor.config
sys.modules["torch"] = torch
sys.modules["torch.nn"] = torch.nn
sys.modules["torch._C"] = torch._C
sys.modules["torch.cuda"] = torch.cuda
sys.modules["torch.cuda.memory"] = torch.cuda.memory
"""


def run_with_stand_in(source, **variables):
    """Runs `source` after SOURCE in a fresh interpreter on sim (sim_support.run_script) and
    returns the JSON value it printed last."""
    return json.loads(run_script(SOURCE + source, **variables).strip().splitlines()[-1])
