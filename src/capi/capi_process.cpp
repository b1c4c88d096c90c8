// The C API's process-wide entry points: devices, stats, release, available bytes, reclaim hooks.
#include <algorithm>
#include <array>
#include <cstring>

#include "capi/capi_guard.hpp"
#include "capi/pool_lookup.hpp"
#include "process/process_state.hpp"
#include "process/tags.hpp"
#include "tidepool/c_api.h"
#include "tidepool/process.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool::detail {
namespace {

tidepool_stats_t to_c_stats(const pool_stats& s) {
  tidepool_stats_t c{};
  c.struct_size = sizeof(tidepool_stats_t);
  c.in_use_bytes = s.in_use_bytes;
  c.requested_bytes = s.requested_bytes;
  c.cached_bytes = s.cached_bytes;
  c.mapped_bytes = s.mapped_bytes;
  c.reserved_address_bytes = s.reserved_address_bytes;
  c.peak_in_use_bytes = s.peak_in_use_bytes;
  c.peak_requested_bytes = s.peak_requested_bytes;
  c.peak_mapped_bytes = s.peak_mapped_bytes;
  c.live_allocations = s.live_allocations;
  c.allocations = s.allocations;
  c.deallocations = s.deallocations;
  c.out_of_memory_recoveries = s.out_of_memory_recoveries;
  c.released_bytes = s.released_bytes;
  c.driver_calls = s.driver.memory_calls();
  c.driver_microseconds = s.driver.memory_us();
  c.asleep_bytes = s.asleep_bytes;
  c.thread_caches = s.thread_caches;
  c.graph_kept_bytes = s.graph_kept_bytes;
  c.graphs = s.graphs;
  c.waits = s.driver.wait_calls();
  c.wait_microseconds = s.driver.wait_us();
  return c;
}

// Where each field of tidepool_stats_t ends: every field is 8 bytes (keep it so when appending),
// so a caller's struct ends at a multiple of 8.
constexpr auto stats_field_ends = [] {
  std::array<std::size_t, sizeof(tidepool_stats_t) / 8> ends{};
  for (std::size_t i = 0; i < ends.size(); ++i) ends[i] = (i + 1) * 8;
  return ends;
}();
static_assert(sizeof(tidepool_stats_t) % 8 == 0, "tidepool_stats_t's fields are 8 bytes each");

// Copies `filled` into the caller's `stats`, no more than its struct_size says it holds; the
// caller's struct_size stays as the caller set it.
void copy_stats_out(const tidepool_stats_t& filled, tidepool_stats_t* stats) {
  const auto caller_size = static_cast<std::size_t>(stats->struct_size);
  const std::size_t bytes = std::min(caller_size, sizeof(tidepool_stats_t));
  const std::size_t skip = sizeof(filled.struct_size);
  std::memcpy(reinterpret_cast<char*>(stats) + skip, reinterpret_cast<const char*>(&filled) + skip, bytes - skip);
}

}  // namespace
}  // namespace tidepool::detail

extern "C" {

tidepool_status tidepool_device_count(int* count) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (count == nullptr) throw_null_argument("tidepool_device_count", "count");
    *count = tidepool::default_driver()->device_count();
  });
}

tidepool_status tidepool_has_context(int device, int* has) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (has == nullptr) throw_null_argument("tidepool_has_context", "has");
    check_device_exists(device);
    *has = tidepool::default_driver()->has_context(device) ? 1 : 0;
  });
}

tidepool_status tidepool_stats(int device, tidepool_stats_t* stats) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (stats == nullptr) throw_null_argument("tidepool_stats", "stats");
    check_struct_size(stats->struct_size, "tidepool_stats", "tidepool_stats_t", stats_field_ends);
    check_device_exists(device);
    tidepool_stats_t filled{};
    filled.struct_size = sizeof(tidepool_stats_t);
    if (tidepool::pool* p = find_pool(device)) filled = to_c_stats(p->stats());
    copy_stats_out(filled, stats);
  });
}

tidepool_status tidepool_reset_peak_stats(int device) {
  using namespace tidepool::detail;
  return guarded([&] {
    check_device_exists(device);
    if (tidepool::pool* p = find_pool(device)) p->reset_peak_stats();
  });
}

tidepool_status tidepool_set_byte_cap(int device, uint64_t bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    check_bytes("tidepool_set_byte_cap's bytes", bytes, true);
    const std::size_t cap = bytes == UINT64_MAX ? SIZE_MAX : static_cast<std::size_t>(bytes);
    tidepool::set_device_byte_cap(device, cap);
  });
}

tidepool_status tidepool_byte_cap(int device, uint64_t* bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (bytes == nullptr) throw_null_argument("tidepool_byte_cap", "bytes");
    const std::size_t cap = tidepool::device_byte_cap(device);
    *bytes = cap == SIZE_MAX ? UINT64_MAX : static_cast<std::uint64_t>(cap);
  });
}

tidepool_status tidepool_tag_stats(const char* tag, int device, tidepool_stats_t* stats) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (tag == nullptr) throw_null_argument("tidepool_tag_stats", "tag");
    if (stats == nullptr) throw_null_argument("tidepool_tag_stats", "stats");
    check_struct_size(stats->struct_size, "tidepool_tag_stats", "tidepool_stats_t", stats_field_ends);
    check_device_exists(device);
    tidepool_stats_t filled{};
    filled.struct_size = sizeof(tidepool_stats_t);
    // A tag with no pool on the device holds nothing there; asking makes no pool.
    if (tag_entry* t = find_tag(tag)) {
      if (tidepool::pool* p = t->pools[device].load(std::memory_order_acquire)) filled = to_c_stats(p->stats());
    }
    copy_stats_out(filled, stats);
  });
}

tidepool_status tidepool_release(int device, size_t* bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    std::size_t released = 0;
    if (tidepool::pool* p = find_pool(device)) {
      released = p->release();
    } else {
      check_device_exists(device);
    }
    if (bytes != nullptr) *bytes = released;
  });
}

tidepool_status tidepool_compact(int device, size_t* bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    std::size_t released = 0;
    if (tidepool::pool* p = find_pool(device)) {
      released = p->compact();
    } else {
      check_device_exists(device);
    }
    // The tags' pools on the device too (their memory is the program's as much), but a sleeping
    // one: its memory went back when it slept.
    for (tidepool::pool* p : tag_pools(device)) {
      if (!p->asleep()) released += p->compact();
    }
    if (bytes != nullptr) *bytes = released;
  });
}

tidepool_status tidepool_release_cached_memory(size_t* bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    const std::size_t released = tidepool::release_cached_memory();
    if (bytes != nullptr) *bytes = released;
  });
}

tidepool_status tidepool_available_bytes(int device, size_t* bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (bytes == nullptr) throw_null_argument("tidepool_available_bytes", "bytes");
    *bytes = tidepool::available_bytes(device);
  });
}

tidepool_status tidepool_add_reclaim_hook(tidepool_reclaim_fn hook, void* user_data, int* id) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (hook == nullptr) throw_null_argument("tidepool_add_reclaim_hook", "hook");
    if (id == nullptr) throw_null_argument("tidepool_add_reclaim_hook", "id");
    *id = tidepool::add_reclaim_hook([hook, user_data](int device, std::size_t bytes_needed) {
      return hook(device, bytes_needed, user_data);
    });
  });
}

tidepool_status tidepool_remove_reclaim_hook(int id) {
  using namespace tidepool::detail;
  return guarded([&] { tidepool::remove_reclaim_hook(id); });
}

}  // extern "C"
