// The C API's pool options: tidepool_pool_options_t to and from tidepool::pool_options, honouring
// the caller's struct_size so that older callers keep working when fields are appended.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>

#include <fmt/format.h>

#include "capi/capi_guard.hpp"
#include "process/process_state.hpp"
#include "tidepool/c_api.h"
#include "tidepool/process.hpp"

namespace tidepool::detail {
namespace {

// The C enum's values are fixed by the ABI; the C++ enum's order is not, so each is named here.
std::int32_t to_c_thread_caches(thread_cache_policy p) {
  switch (p) {
    case thread_cache_policy::when_contended: return TIDEPOOL_THREAD_CACHES_WHEN_CONTENDED;
    case thread_cache_policy::always: return TIDEPOOL_THREAD_CACHES_ALWAYS;
    case thread_cache_policy::never: return TIDEPOOL_THREAD_CACHES_NEVER;
  }
  return TIDEPOOL_THREAD_CACHES_WHEN_CONTENDED;
}

thread_cache_policy from_c_thread_caches(std::int32_t value) {
  switch (value) {
    case TIDEPOOL_THREAD_CACHES_WHEN_CONTENDED: return thread_cache_policy::when_contended;
    case TIDEPOOL_THREAD_CACHES_ALWAYS: return thread_cache_policy::always;
    case TIDEPOOL_THREAD_CACHES_NEVER: return thread_cache_policy::never;
    default: break;
  }
  throw error(error_code::invalid_argument,
              fmt::format("thread_caches is {}: expected TIDEPOOL_THREAD_CACHES_WHEN_CONTENDED (0), "
                          "TIDEPOOL_THREAD_CACHES_ALWAYS (1) or TIDEPOOL_THREAD_CACHES_NEVER (2)",
                          value));
}

// Where each field of tidepool_pool_options_t ends: a caller's struct (of this header or an older
// one) ends at one of them.
constexpr std::size_t options_field_ends[] = {
    offsetof(tidepool_pool_options_t, byte_cap),
    offsetof(tidepool_pool_options_t, headroom),
    offsetof(tidepool_pool_options_t, small_size_threshold),
    offsetof(tidepool_pool_options_t, max_cached_bytes),
    offsetof(tidepool_pool_options_t, decay_milliseconds),
    offsetof(tidepool_pool_options_t, address_range_bytes),
    offsetof(tidepool_pool_options_t, immediate_release),
    offsetof(tidepool_pool_options_t, reserved_),
    offsetof(tidepool_pool_options_t, growth_slack),
    offsetof(tidepool_pool_options_t, thread_caches),
    offsetof(tidepool_pool_options_t, reserved2_),
    offsetof(tidepool_pool_options_t, alias_free_handles),
    offsetof(tidepool_pool_options_t, reserved3_),
    offsetof(tidepool_pool_options_t, alias_slack),
    offsetof(tidepool_pool_options_t, follow_graph_captures),
    offsetof(tidepool_pool_options_t, reserved4_),
    offsetof(tidepool_pool_options_t, compact_on_out_of_memory),
    offsetof(tidepool_pool_options_t, reserved5_),
    offsetof(tidepool_pool_options_t, reserved5_) + sizeof(std::int32_t),
};
static_assert(options_field_ends[std::size(options_field_ends) - 1] == sizeof(tidepool_pool_options_t),
              "a field appended to tidepool_pool_options_t needs its end listed here");

tidepool_pool_options_t to_c_options(const pool_options& o) {
  tidepool_pool_options_t c{};
  c.struct_size = sizeof(tidepool_pool_options_t);
  c.byte_cap = o.byte_cap;
  c.headroom = o.headroom;
  c.small_size_threshold = o.small_size_threshold;
  c.max_cached_bytes = o.release.max_cached_bytes;
  c.decay_milliseconds = static_cast<std::uint64_t>(o.release.decay.count());
  c.address_range_bytes = o.address_range_bytes;
  c.immediate_release = o.release.immediate ? 1 : 0;
  c.growth_slack = o.growth_slack;
  c.thread_caches = to_c_thread_caches(o.thread_caches);
  c.alias_free_handles = o.alias_free_handles ? 1 : 0;
  c.alias_slack = o.alias_slack;
  c.follow_graph_captures = o.follow_graph_captures ? 1 : 0;
  c.compact_on_out_of_memory = o.compact_on_out_of_memory ? 1 : 0;
  return c;
}

pool_options from_c_options(const tidepool_pool_options_t& c) {
  check_reserved("tidepool_set_default_pool_options", "reserved_", c.reserved_);
  check_reserved("tidepool_set_default_pool_options", "reserved2_", c.reserved2_);
  check_reserved("tidepool_set_default_pool_options", "reserved3_", c.reserved3_);
  check_reserved("tidepool_set_default_pool_options", "reserved4_", c.reserved4_);
  check_reserved("tidepool_set_default_pool_options", "reserved5_", c.reserved5_);
  check_bytes("byte_cap", c.byte_cap, true);
  check_bytes("headroom", c.headroom, false);
  check_bytes("small_size_threshold", c.small_size_threshold, false);
  check_bytes("max_cached_bytes", c.max_cached_bytes, true);
  check_bytes("address_range_bytes", c.address_range_bytes, false);
  if (c.immediate_release != 0 && c.immediate_release != 1) {
    throw error(error_code::invalid_argument,
                fmt::format("immediate_release is {}: expected 0 or 1", c.immediate_release));
  }
  constexpr auto max_ms = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (c.decay_milliseconds > max_ms) {
    throw error(error_code::invalid_argument,
                fmt::format("decay_milliseconds {} is too large", c.decay_milliseconds));
  }
  if (!(c.growth_slack >= 0.0 && c.growth_slack <= 1e6)) {  // also refuses NaN
    throw error(error_code::invalid_argument,
                fmt::format("growth_slack is {}: expected a number from 0 up", c.growth_slack));
  }
  if (c.alias_free_handles != 0 && c.alias_free_handles != 1) {
    throw error(error_code::invalid_argument,
                fmt::format("alias_free_handles is {}: expected 0 or 1", c.alias_free_handles));
  }
  if (!(c.alias_slack >= 0.0 && c.alias_slack <= 1e6)) {  // also refuses NaN
    throw error(error_code::invalid_argument,
                fmt::format("alias_slack is {}: expected a number from 0 up", c.alias_slack));
  }
  if (c.follow_graph_captures != 0 && c.follow_graph_captures != 1) {
    throw error(error_code::invalid_argument,
                fmt::format("follow_graph_captures is {}: expected 0 or 1", c.follow_graph_captures));
  }
  if (c.compact_on_out_of_memory != 0 && c.compact_on_out_of_memory != 1) {
    throw error(error_code::invalid_argument,
                fmt::format("compact_on_out_of_memory is {}: expected 0 or 1", c.compact_on_out_of_memory));
  }
  pool_options o;
  o.follow_graph_captures = c.follow_graph_captures == 1;
  o.compact_on_out_of_memory = c.compact_on_out_of_memory == 1;
  o.alias_free_handles = c.alias_free_handles == 1;
  o.alias_slack = c.alias_slack;
  o.thread_caches = from_c_thread_caches(c.thread_caches);
  o.growth_slack = c.growth_slack;
  o.byte_cap = static_cast<std::size_t>(c.byte_cap);
  o.headroom = static_cast<std::size_t>(c.headroom);
  o.small_size_threshold = static_cast<std::size_t>(c.small_size_threshold);
  o.release.max_cached_bytes = static_cast<std::size_t>(c.max_cached_bytes);
  o.release.decay = std::chrono::milliseconds(static_cast<std::int64_t>(c.decay_milliseconds));
  o.release.immediate = c.immediate_release == 1;
  o.address_range_bytes = static_cast<std::size_t>(c.address_range_bytes);
  return o;
}

}  // namespace
}  // namespace tidepool::detail

extern "C" {

tidepool_status tidepool_set_default_pool_options(const tidepool_pool_options_t* options) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (options == nullptr) throw_null_argument("tidepool_set_default_pool_options", "options");
    check_struct_size(options->struct_size, "tidepool_set_default_pool_options", "tidepool_pool_options_t",
                      options_field_ends);
    // Fields the caller's struct does not have keep the values in force.
    tidepool_pool_options_t merged = to_c_options(default_pool_options());
    const auto bytes = std::min<std::uint64_t>(options->struct_size, sizeof merged);
    std::memcpy(&merged, options, static_cast<std::size_t>(bytes));
    tidepool::set_default_pool_options(from_c_options(merged));
  });
}

tidepool_status tidepool_get_default_pool_options(tidepool_pool_options_t* options) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (options == nullptr) throw_null_argument("tidepool_get_default_pool_options", "options");
    check_struct_size(options->struct_size, "tidepool_get_default_pool_options", "tidepool_pool_options_t",
                      options_field_ends);
    const tidepool_pool_options_t current = to_c_options(default_pool_options());
    const auto bytes = std::min<std::uint64_t>(options->struct_size, sizeof current);
    const std::size_t skip = sizeof current.struct_size;
    std::memcpy(reinterpret_cast<char*>(options) + skip, reinterpret_cast<const char*>(&current) + skip,
                static_cast<std::size_t>(bytes) - skip);
  });
}

}  // extern "C"
