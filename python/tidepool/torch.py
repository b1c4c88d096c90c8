"""Routes PyTorch's CUDA allocations to tidepool's pools (torch.cuda.memory.CUDAPluggableAllocator
over tidepool_torch_alloc / tidepool_torch_free).

    import tidepool
    tidepool.torch.use()   # before the first CUDA allocation

PyTorch's allocator can be chosen once per process, before CUDA memory is first allocated. After
use(), torch.cuda.empty_cache() also hands back what tidepool's pools cache on every GPU this
process opened, as PyTorch's own allocator does (torch.cuda.graph calls it before each capture,
so what other streams cached goes back before the capture lays out its memory), except while the
current stream is being captured; code that imported empty_cache by name before use() keeps
PyTorch's, which reaches no pluggable allocator. Tensor.record_stream(stream) reaches tidepool too
(the pluggable interface does not pass it on): the tensor's memory is not reused before the work
queued on `stream` ahead of its free has completed. PyTorch's C++ callers of the allocator's
recordStream (none by default: NCCL's process groups keep tensors alive instead) still reach no
pluggable allocator. torch.cuda.memory_allocated(), max_memory_allocated(), memory_reserved(),
memory_stats(), reset_peak_memory_stats() and reset_accumulated_memory_stats(), which PyTorch
refuses under any pluggable allocator, answer from the device's tidepool pool (_torch_stats.py:
allocated, requested and reserved bytes, current and peak, and allocation counts;
memory_summary() is tidepool.summary()); torch.cuda.set_per_process_memory_fraction(), which the
pluggable interface drops, caps the device's pool (tidepool.set_byte_cap), and
get_per_process_memory_fraction() reads it back (_torch_memory_fraction.py).
torch.cuda.memory._record_memory_history(), _snapshot(), _dump_snapshot() and
torch.cuda.memory_snapshot(), refused too, record and snapshot tidepool's memory for
pytorch.org/memory_viz (_torch_memory_history.py). cuDNN's benchmark mode, which asks the
allocator a question PyTorch refuses for pluggable allocators, is kept off with one warning
(_torch_cudnn.py). CUDA tensors sent to another process through torch.multiprocessing (CUDA IPC,
which the pluggable interface refuses) go through tidepool.share_memory: the receiver maps the
sender's memory, waits for the work that wrote it, and the sender keeps it until the receiver lets
go (_torch_ipc.py); tensors sent by a process running PyTorch's own allocator, which the pluggable
interface cannot receive, are mapped by tidepool (_torch_ipc_receive.py).
tidepool.stats() has every figure, and tidepool.release_cached_memory() empties every cache of
the process.

What lives long. PyTorch passes no lifetime with an allocation; code run under
`with tidepool.persistent():` allocates persistent memory, placed apart from scratch (a model's
weights, a cache kept for the whole run). persistent_optimizer_state(optimizer) does it for the
state an optimizer makes in its first step, so that torch.cuda.empty_cache() can hand back the
first step's scratch whole; it may cost peak memory where that state filled holes the loop never
used again (docs/RESULTS.md, section 0, "An optimizer's state kept apart").

CUDA graphs. After use(), captures that torch.cuda.graph(pool=...) or CUDAGraph.capture_begin(pool)
give one PyTorch pool share their memory in tidepool too (each PyTorch pool maps to one
tidepool.GraphPool, entered for all threads while a capture runs, so make_graphed_callables'
backward capture on the autograd thread joins it); a capture with no pool keeps its memory to
itself, as PyTorch's private pool does, and a later capture given `pool=graph.pool()` shares with
it. A GraphPool the program entered itself wins. torch.compile(mode="reduce-overhead") works
through use(), which turns inductor's CUDA graph trees off
(torch._inductor.config.triton.cudagraph_trees = False): the trees call allocator checkpointing
that PyTorch's pluggable interface refuses ("CUDAPluggableAllocator does not yet support
getCheckpointState"); without them inductor captures each compiled graph through torch.cuda.graph,
which tidepool follows.

Out of memory. When tidepool cannot satisfy an allocation, after releasing every cache it can
reach, PyTorch raises a RuntimeError whose message starts "CUDA out of memory." (PyTorch's own
words, followed by tidepool's report), the allocation is not made, and the program goes on: catch
it, free what you hold (or take a smaller batch) and retry. It is not torch.OutOfMemoryError:
PyTorch makes that type only from its own C++ exception class, which a pluggable allocator cannot
throw without being built against libtorch. Catch RuntimeError and ask is_out_of_memory(error),
which is true for both kinds:

    try:
        loss = step(batch)
    except RuntimeError as error:
        if not tidepool.torch.is_out_of_memory(error):
            raise
        ...   # smaller batch

Tags (sleep and wake). With use(), tensors made inside `with tidepool.region("weights"):` come
from that tag's memory; tidepool.sleep("weights") hands it back and tidepool.wake("weights") brings
it back at the same addresses. A program that keeps PyTorch's own allocator elsewhere (as vLLM
does) uses a MemPool over one tag instead:

    pool = tidepool.torch.mem_pool("kv-cache")
    with torch.cuda.use_mem_pool(pool):
        cache = torch.empty(...)          # a segment of the tag's memory, whatever thread runs
    tidepool.sleep("kv-cache")

PyTorch's pluggable allocator passes no tag to its alloc function, so each tag has an entry point
of its own (tidepool_torch_alloc_tag<N>): at most 16 tags can have a MemPool in one process.
PyTorch's caching allocator keeps the MemPool's segments (its own cache) inside the tag's memory,
so they sleep and wake with it. The same code runs after use(), where PyTorch makes no MemPool:
mem_pool(tag) is then a TagMemPool, and torch.cuda.use_mem_pool given one enters
tidepool.region(tag) (this thread's allocations inside come from the tag's memory).
"""

import functools

from . import (_allocate, _errors, _frameworks, _library, _release, _torch_cudnn, _torch_graphs,
               _torch_ipc, _torch_ipc_receive, _torch_mem_pools, _torch_memory_fraction, _torch_memory_history,
               _torch_replace, _torch_stats)
from ._torch_optimizer_state import persistent_optimizer_state  # noqa: F401  (tidepool.torch's API)

# What the message of an out-of-memory error holds, PyTorch's and tidepool's alike (it starts
# with it; a framework that wraps the error may put words before it).
OUT_OF_MEMORY_MESSAGE = "CUDA out of memory."
# Tags with a PyTorch entry point of their own (TIDEPOOL_TORCH_TAG_SLOTS in c_api.h).
TAG_SLOTS = 16


def use():
    """Routes PyTorch's CUDA allocations to tidepool. Raises TidepoolError if PyTorch already
    allocated CUDA memory with its own allocator."""
    import torch

    if _frameworks.routed["torch"]:
        return
    path = _library.path()  # loads the library, so a missing one fails here, clearly
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "tidepool_torch_alloc",
                                                         "tidepool_torch_free")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as error:
        raise _errors.TidepoolError(
            _errors.INVALID_ARGUMENT,
            "tidepool.torch.use() must run before PyTorch's first CUDA allocation "
            f"(PyTorch says: {error})") from error
    _frameworks.routed["torch"] = True
    _torch_replace.replace_memory_call(torch, "empty_cache", _empty_cache_releasing_tidepool)
    torch.Tensor.record_stream = _record_stream_reaching_tidepool(torch.Tensor.record_stream)
    _torch_stats.answer_memory_statistics(torch)
    _torch_memory_fraction.follow_memory_fraction(torch)
    _torch_memory_history.answer_memory_history(torch)
    _torch_ipc.share_cuda_tensors(torch)
    _torch_ipc_receive.receive_from_pytorchs_allocator(torch)
    _torch_mem_pools.route_tag_pools(torch)
    cuda_graph_class = getattr(torch.cuda, "CUDAGraph", None)
    if cuda_graph_class is not None:
        _torch_graphs.follow_graph_pools(cuda_graph_class)
    _torch_graphs.capture_compiled_graphs_without_trees()
    _torch_cudnn.keep_benchmark_off(torch)


def _empty_cache_releasing_tidepool(original):
    """torch.cuda.empty_cache for a process routed to tidepool: PyTorch's own call (which empties
    no pluggable allocator's cache), then every opened GPU's pool hands its free cached memory back
    (tidepool_release). Skipped while the current stream is being captured: a release waits for
    the device, which would end the capture."""

    @functools.wraps(original)
    def empty_cache():
        original()
        import torch

        if torch.cuda.is_current_stream_capturing():
            return
        for device in _release.opened_devices(_library.load()):
            _allocate.release(device)

    return empty_cache


def _record_stream_reaching_tidepool(original):
    """Tensor.record_stream for a process routed to tidepool: PyTorch's own call (which reaches no
    pluggable allocator), then tidepool_record_stream on the tensor's storage, so that its memory
    is not reused before the work queued on `stream` ahead of its free has completed. A storage
    tidepool did not allocate (another allocator's, or memory inside a MemPool's segment) is left
    to PyTorch, as PyTorch's allocator leaves memory it does not own; any other refusal (a stream of
    another device) raises."""

    @functools.wraps(original)
    def record_stream(self, stream):
        original(self, stream)
        if self.device.type != "cuda":
            return
        storage = self.untyped_storage().data_ptr()
        if storage == 0:  # nothing allocated (an empty tensor)
            return
        try:
            _allocate.record_stream(storage, _cuda_stream_handle(stream), self.device.index)
        except _errors.TidepoolError as error:
            if error.status != _errors.INVALID_POINTER:
                raise

    return record_stream


def _cuda_stream_handle(stream):
    """The cudaStream_t of a torch.cuda.Stream, or of a device-generic torch.Stream (which carries
    only PyTorch's stream id: torch.cuda.Stream names the same stream from it)."""
    handle = getattr(stream, "cuda_stream", None)
    if handle is not None:
        return handle
    import torch

    return torch.cuda.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                             device_type=stream.device_type).cuda_stream


def graph_pool_of(handle):
    """The id of the tidepool.GraphPool that PyTorch graph pool `handle`
    (torch.cuda.graph_pool_handle() or CUDAGraph.pool()) stands for after use(), or 0 where no
    capture used it yet."""
    return _torch_graphs.graph_pool_of(handle)


def mem_pool(tag):
    """Tag `tag`'s memory for torch.cuda.use_mem_pool: where use() did not route PyTorch to
    tidepool, a torch.cuda.MemPool whose segments are the tag's memory; after use(), where PyTorch
    makes no MemPool, a TagMemPool that use()'s torch.cuda.use_mem_pool turns into
    tidepool.region(tag) (_torch_mem_pools.py)."""
    import torch

    from . import _tags

    slot = _tags.tag_id(tag)  # checks the name
    if is_used():
        return _torch_mem_pools.TagMemPool(tag)
    if slot >= TAG_SLOTS:
        raise _errors.TidepoolError(
            _errors.INVALID_ARGUMENT,
            f"tag {tag!r} is the process's tag number {slot}; only the first {TAG_SLOTS} tags can have a "
            "MemPool (one PyTorch entry point each)")
    allocator = torch.cuda.memory.CUDAPluggableAllocator(_library.path(), f"tidepool_torch_alloc_tag{slot}",
                                                         "tidepool_torch_free")
    return torch.cuda.MemPool(allocator.allocator())


def is_used():
    """Whether PyTorch's allocations go to tidepool."""
    return _frameworks.routed["torch"]


def is_out_of_memory(error):
    """Whether `error` is PyTorch running out of device memory: torch.OutOfMemoryError (PyTorch's
    own allocator), or the RuntimeError PyTorch raises when tidepool's allocation fails."""
    torch = _frameworks.loaded("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(error, oom_type):
        return True
    return isinstance(error, RuntimeError) and OUT_OF_MEMORY_MESSAGE in str(error)
