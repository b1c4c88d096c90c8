// The C API of GPU sharing (issue 14): tidepool_sharing_options_t to and from
// tidepool::sharing_options, honouring the caller's struct_size, and tidepool_stop_sharing.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "capi/capi_guard.hpp"
#include "tidepool/c_api.h"
#include "tidepool/process.hpp"

namespace {

tidepool_sharing_options_t to_c(const tidepool::sharing_options& o) {
  tidepool_sharing_options_t c{};
  c.struct_size = sizeof c;
  c.enabled = o.enabled ? 1 : 0;
  c.gives = o.gives ? 1 : 0;
  c.wait_milliseconds = static_cast<std::uint64_t>(o.wait.count());
  return c;
}

// Where each field of tidepool_sharing_options_t ends (capi_options.cpp says why).
constexpr std::size_t sharing_field_ends[] = {
    offsetof(tidepool_sharing_options_t, enabled),
    offsetof(tidepool_sharing_options_t, gives),
    offsetof(tidepool_sharing_options_t, wait_milliseconds),
    offsetof(tidepool_sharing_options_t, wait_milliseconds) + sizeof(std::uint64_t),
};
static_assert(sharing_field_ends[std::size(sharing_field_ends) - 1] == sizeof(tidepool_sharing_options_t),
              "a field appended to tidepool_sharing_options_t needs its end listed here");

void check_flag(const char* name, std::int32_t value) {
  if (value != 0 && value != 1) {
    throw tidepool::error(tidepool::error_code::invalid_argument, fmt::format("{} is {}: expected 0 or 1", name, value));
  }
}

}  // namespace

extern "C" {

tidepool_status tidepool_set_sharing_options(const tidepool_sharing_options_t* options) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (options == nullptr) throw_null_argument("tidepool_set_sharing_options", "options");
    check_struct_size(options->struct_size, "tidepool_set_sharing_options", "tidepool_sharing_options_t",
                      sharing_field_ends);
    tidepool_sharing_options_t merged = to_c(tidepool::get_sharing_options());
    const auto bytes = std::min<std::uint64_t>(options->struct_size, sizeof merged);
    std::memcpy(&merged, options, static_cast<std::size_t>(bytes));
    check_flag("enabled", merged.enabled);
    check_flag("gives", merged.gives);
    if (merged.wait_milliseconds > 60000) {
      throw tidepool::error(tidepool::error_code::invalid_argument,
                            fmt::format("wait_milliseconds is {}: expected 0 to 60000", merged.wait_milliseconds));
    }
    tidepool::sharing_options o;
    o.enabled = merged.enabled == 1;
    o.gives = merged.gives == 1;
    o.wait = std::chrono::milliseconds(static_cast<std::int64_t>(merged.wait_milliseconds));
    tidepool::set_sharing_options(o);
  });
}

tidepool_status tidepool_get_sharing_options(tidepool_sharing_options_t* options) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (options == nullptr) throw_null_argument("tidepool_get_sharing_options", "options");
    check_struct_size(options->struct_size, "tidepool_get_sharing_options", "tidepool_sharing_options_t",
                      sharing_field_ends);
    const tidepool_sharing_options_t current = to_c(tidepool::get_sharing_options());
    const auto bytes = std::min<std::uint64_t>(options->struct_size, sizeof current);
    const std::size_t skip = sizeof current.struct_size;
    std::memcpy(reinterpret_cast<char*>(options) + skip, reinterpret_cast<const char*>(&current) + skip,
                static_cast<std::size_t>(bytes) - skip);
  });
}

tidepool_status tidepool_stop_sharing(void) {
  using namespace tidepool::detail;
  return guarded([] { tidepool::stop_sharing(); });
}

}  // extern "C"
