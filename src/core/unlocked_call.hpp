// A driver call made with the pool's lock dropped. A device-wide wait, trimming the CUDA async
// pools (0.16 s measured) and cuMemFree in fallback mode (it waits for the device) take as long as
// the GPU likes; a cached allocation on another thread must not wait behind them, so the pool
// keeps its lock for the bookkeeping around such a call only. The call is counted once the lock
// is back: the pool's counts are guarded by it.
#pragma once

#include <chrono>
#include <cstddef>

#include "core/driver_calls.hpp"
#include "core/spin_lock.hpp"

namespace tidepool::detail {

/// Runs call(driver&) (a driver call of kind `kind` over `bytes`) with `lock` released, and counts
/// it in `calls`. `lock` is held on entry and on return; driver calls never throw.
template <class F>
auto call_unlocked(spin_lock& lock, driver_calls& calls, driver_call kind, std::size_t bytes, F&& call) {
  const double modelled = calls.raw().modelled_cost_us(kind, bytes);
  const auto start = std::chrono::steady_clock::now();
  lock.unlock();
  auto result = call(calls.raw());
  lock.lock();
  const double measured = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  calls.add(kind, modelled >= 0.0 ? modelled : measured);
  return result;
}

}  // namespace tidepool::detail
