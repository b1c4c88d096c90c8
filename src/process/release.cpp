// Process-wide release and headroom: release_cached_memory() hands back every cached byte on the
// GPUs this process has opened (and touches no other), available_bytes() says how much one
// allocation could still get.
#include <algorithm>
#include <cstdint>
#include <exception>

#include <fmt/format.h>

#include "process/process_state.hpp"
#include "process/tags.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool {
namespace {

// The driver to ask about devices, without creating pools. Null when there is none to be had
// (no CUDA driver on this machine): then no GPU was opened by this process through tidepool.
std::shared_ptr<driver> driver_if_available() {
  try {
    return default_driver();
  } catch (const error& e) {
    if (e.code() == error_code::unavailable) return nullptr;
    throw;
  }
}

// What one device hands back: its pool's cache, the CUDA async pools, then every reclaim hook.
std::size_t release_device(driver& drv, int device) {
  std::size_t bytes = 0;
  if (pool* p = detail::find_pool(device)) bytes += p->release();
  for (pool* p : detail::tag_pools(device)) bytes += p->release();  // 0 for a tag asleep
  bytes += drv.trim_async_pools(device);
  bytes += run_reclaim_hooks(device, SIZE_MAX);
  return bytes;
}

}  // namespace

namespace detail {

void check_device(driver& drv, int device) {
  const int count = drv.device_count();
  if (device < 0 || device >= count) {
    throw error(error_code::invalid_device,
                fmt::format("device {} does not exist: the '{}' driver has {} device(s)", device,
                            drv.name(), count));
  }
}

}  // namespace detail

std::size_t release_cached_memory() {
  const auto drv = driver_if_available();
  if (!drv) return 0;
  std::size_t bytes = 0;
  std::exception_ptr first_failure;
  const int count = drv->device_count();
  for (int device = 0; device < count; ++device) {
    // has_context() opens nothing; a GPU without a context holds nothing of ours, and opening
    // one would cost far more memory than it could give back.
    if (!drv->has_context(device)) continue;
    try {
      bytes += release_device(*drv, device);
    } catch (...) {
      // Keep releasing on the other devices; report the first failure after.
      if (!first_failure) first_failure = std::current_exception();
    }
  }
  if (first_failure) std::rethrow_exception(first_failure);
  return bytes;
}

std::size_t available_bytes(int device) {
  if (pool* p = detail::find_pool(device)) return p->available_bytes();
  const auto drv = default_driver();
  detail::check_device(*drv, device);
  // No pool yet: what a pool made now with the default options could map. The driver answers
  // free memory without opening a context (NVML on cuda).
  const pool_options options = detail::default_pool_options();
  const std::size_t free = drv->free_bytes(device);
  std::size_t bytes = free > options.headroom ? free - options.headroom : 0;
  bytes = std::min(bytes, options.byte_cap);
  const std::size_t page = drv->granularity(device);
  return page > 0 ? bytes / page * page : bytes;
}

}  // namespace tidepool
