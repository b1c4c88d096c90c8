// tidepool/reclaim.hpp: reclaim hooks, the way a program (or a framework front end) lets the
// pool's out-of-memory path take back memory cached elsewhere in the process.
//
// A hook stands for a cache tidepool cannot see: PyTorch's caching allocator, CuPy's pool, a
// framework's workspace. When an allocation on `device` would fail, the pool calls every hook
// (after releasing its own cache and trimming the CUDA async pools) and retries.
#pragma once

#include <cstddef>
#include <functional>

#include "tidepool/export.h"

namespace tidepool {

/// Frees what it can on `device` (at least `bytes_needed` if it can) and returns the bytes it
/// handed back to the driver (0 if unknown or nothing). Must not allocate from tidepool.
using reclaim_hook = std::function<std::size_t(int device, std::size_t bytes_needed)>;

/// Registers a hook for every pool of the process; returns an id for remove_reclaim_hook.
TIDEPOOL_API int add_reclaim_hook(reclaim_hook hook);
/// Unregisters a hook; unknown ids throw tidepool::error. Waits for calls of the hook in progress
/// on other threads: once it returns, the hook is not running and is never called again, so what
/// it captured may be freed. Called from inside the hook itself, it does not wait for that call.
TIDEPOOL_API void remove_reclaim_hook(int id);
/// Calls every hook for `device`; returns the sum of what they reported.
TIDEPOOL_API std::size_t run_reclaim_hooks(int device, std::size_t bytes_needed);

}  // namespace tidepool
