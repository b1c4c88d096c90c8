"""What tidepool knows of the frameworks in this process: whether PyTorch and CuPy are routed to
tidepool, and the reclaim hooks that let tidepool's out-of-memory path empty their caches.

Nothing here imports a framework: a framework is looked at only if the program already imported
it (sys.modules), so tidepool never loads torch or cupy, nor opens a GPU on their behalf.
"""

import ctypes
import sys
import warnings

from . import _library

routed = {"torch": False, "cupy": False}


def loaded(name):
    """The framework module if the program imported it, else None."""
    return sys.modules.get(name)


def torch_cache_active():
    """PyTorch with its own caching allocator and CUDA initialised (so it may hold a cache)."""
    torch = loaded("torch")
    if torch is None or routed["torch"]:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
    except AttributeError:
        return None
    return torch


def empty_torch_cache(devices):
    """Empties PyTorch's cache; returns {device: bytes handed back}, by its reserved counts."""
    torch = torch_cache_active()
    if torch is None:
        return {}
    visible = torch.cuda.device_count()
    devices = [d for d in devices if d < visible]
    before = {d: torch.cuda.memory_reserved(d) for d in devices}
    torch.cuda.empty_cache()
    return {d: before[d] - torch.cuda.memory_reserved(d) for d in devices}


def cupy_pools(cupy):
    """CuPy's default device pool, or None where this CuPy has none."""
    try:
        return cupy.get_default_memory_pool()
    except AttributeError:
        return None


def empty_cupy_pool(device):
    """Frees every free block of CuPy's default pool on `device`; returns the bytes, by its total."""
    cupy = loaded("cupy")
    if cupy is None:
        return 0
    pool = cupy_pools(cupy)
    if pool is None:
        return 0
    with cupy.cuda.Device(device):
        before = pool.total_bytes()
        pool.free_all_blocks()
        return before - pool.total_bytes()


def _framework_caches_hook(device, bytes_needed, user_data):
    """The reclaim hook: PyTorch's cache (when torch is not routed to tidepool) and CuPy's pool
    on `device`. Runs on whichever thread ran out of memory; must not raise into C."""
    del bytes_needed, user_data
    freed = 0
    try:
        freed += empty_torch_cache([device]).get(device, 0)
        freed += empty_cupy_pool(device)
    except Exception as error:  # noqa: BLE001 - a hook must never raise through the C API
        warnings.warn(f"tidepool: emptying framework caches on device {device} failed: {error}")
    return freed


# Kept alive for the life of the process: the library holds the pointer.
_hook_callback = _library.RECLAIM_FN(_framework_caches_hook)
_hook_id = None


def register_framework_hooks(lib):
    """Registers the framework-cache hook with the library (once)."""
    global _hook_id
    if _hook_id is not None:
        return
    hook_id = ctypes.c_int(-1)
    _library.check(lib.tidepool_add_reclaim_hook(_hook_callback, None, ctypes.byref(hook_id)))
    _hook_id = hook_id.value


_library.on_load(register_framework_hooks)
