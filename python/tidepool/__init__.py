"""tidepool: a CUDA device-memory pool that gives memory back, for PyTorch and CuPy programs.

    import tidepool
    tidepool.torch.use()       # PyTorch allocates from tidepool (call before any CUDA allocation)
    tidepool.cupy.use()        # CuPy too: both frameworks then share one pool per GPU
    ...
    tidepool.release_cached_memory(verbose=True)   # every cache in the process, exact bytes

Pure Python over ctypes: the library, libtidepool.so, comes from the CMake build and is found at
$TIDEPOOL_LIBRARY, next to this package (`pip install ./python`, `cmake --install`), or on the
loader's search path.
"""

from . import _frameworks  # noqa: F401  (registers the framework-cache reclaim hook on load)
from ._allocate import (ANY_DEVICE, allocate, compact, deallocate, device_count, forget_stream,
                        get_current_stream, has_context, record_stream, release, set_current_stream)
from ._errors import AsleepError, InvalidArgumentError, LibraryNotFoundError, OutOfMemoryError, TidepoolError
from ._graph_pools import GraphPool, current_graph_pool
from ._hooks import add_reclaim_hook, remove_reclaim_hook
from ._ipc import ImportedMemory, MemoryShare, imported_bytes, kept_for_other_processes, share_memory
from ._library import load as _load
from ._library import path as library_path
from ._lifetime import allocating_persistent, persistent
from ._memory import (describe, dump_snapshot, memory_snapshot, recent_events, record, recording_path,
                      stop_recording, tag_pool_id)
from ._options import byte_cap, get_pool_options, set_byte_cap, set_pool_options
from ._release import release_cached_memory
from ._sharing import get_sharing_options, set_sharing_options
from ._stats import (MemorySummary, Stats, available_bytes, memory_summary, reset_peak_stats, stats,
                     summary)
from ._tags import current_tag, is_asleep, region, sleep, tag_stats, tags, wake

__all__ = [
    "ANY_DEVICE", "AsleepError", "GraphPool", "ImportedMemory", "InvalidArgumentError", "LibraryNotFoundError",
    "MemoryShare", "MemorySummary", "OutOfMemoryError", "Stats",
    "TidepoolError",
    "add_reclaim_hook", "allocate", "allocating_persistent", "available_bytes", "byte_cap", "compact", "current_graph_pool",
    "deallocate",
    "describe", "device_count",
    "dump_snapshot", "forget_stream", "get_current_stream", "get_pool_options", "get_sharing_options",
    "has_context", "imported_bytes", "kept_for_other_processes", "library_path", "memory_snapshot", "memory_summary", "recent_events", "record",
    "record_stream", "recording_path", "release", "release_cached_memory", "remove_reclaim_hook",
    "persistent", "reset_peak_stats",
    "set_byte_cap", "set_current_stream", "set_pool_options", "set_sharing_options", "share_memory", "stats",
    "stop_recording", "summary",
    "version",
    "current_tag", "is_asleep", "region", "sleep", "tag_pool_id", "tag_stats", "tags", "wake",
]


def version():
    """The library's version, e.g. '0.1.0'."""
    return _load().tidepool_version().decode()


def __getattr__(name):
    # tidepool.torch and tidepool.cupy load on first use, so that `import tidepool` imports
    # neither framework.
    if name in ("torch", "cupy"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'tidepool' has no attribute {name!r}")
