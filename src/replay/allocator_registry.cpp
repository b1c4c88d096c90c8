// The allocators `tidepool replay` knows, by name, and the error every baseline raises when the
// driver fails in a way that is not out-of-memory.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "replay/async_allocator.hpp"
#include "replay/cupy_allocator.hpp"
#include "replay/exact_allocator.hpp"
#include "replay/replay_allocator.hpp"
#include "replay/tidepool_allocator.hpp"
#include "replay/torch_caching_allocator.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::replay {

std::vector<std::string> allocator_names() {
  std::vector<std::string> names;
  names.emplace_back("tidepool");
  for (const char* n : {"caching", "expandable", "cupy", "async", "exact"}) names.emplace_back(n);
  return names;
}

std::unique_ptr<replay_allocator> make_allocator(std::string_view name, std::shared_ptr<driver> drv, int device,
                                                 const pool_options& tidepool_options) {
  if (name == "tidepool") return std::make_unique<tidepool_allocator>(std::move(drv), device, tidepool_options);
  if (name == "caching") return std::make_unique<torch_caching_allocator>(std::move(drv), device, false);
  if (name == "expandable") return std::make_unique<torch_caching_allocator>(std::move(drv), device, true);
  if (name == "cupy") return std::make_unique<cupy_allocator>(std::move(drv), device);
  if (name == "async") return std::make_unique<async_allocator>(std::move(drv), device);
  if (name == "exact") return std::make_unique<exact_allocator>(std::move(drv), device);
  throw error(error_code::invalid_argument,
              fmt::format("unknown allocator \"{}\" (known: {})", name, fmt::join(allocator_names(), ", ")));
}

namespace detail {
void throw_driver_failure(std::string_view allocator, driver_call call, driver_status status) {
  throw error(error_code::driver_failure,
              fmt::format("{}: driver call {} failed: {}", allocator, to_string(call), to_string(status)));
}
}  // namespace detail

}  // namespace tidepool::replay
