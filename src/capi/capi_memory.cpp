// The C API for seeing memory: recording (process.hpp start_recording), describing a pool's
// blocks and handles (pool::describe; a device's pool, or a tag's), and the recent events of a
// recording.
#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "capi/capi_guard.hpp"
#include "capi/pool_lookup.hpp"
#include "process/process_state.hpp"
#include "process/tags.hpp"
#include "tidepool/c_api.h"
#include "tidepool/process.hpp"

namespace tidepool::detail {
namespace {

// Fills *summary and calls the callbacks for pool `p` (nullptr: all zero, no calls); `function`
// names the C call in errors.
void describe_into(tidepool::pool* p, const char* function, tidepool_memory_summary_t* summary,
                   tidepool_block_fn on_block, tidepool_handle_fn on_handle, void* user_data) {
  if (summary != nullptr && summary->struct_size < sizeof(uint64_t)) {
    throw tidepool::error(tidepool::error_code::invalid_argument,
                          fmt::format("{}: summary->struct_size is not set", function));
  }
  tidepool::pool_description d;
  if (p != nullptr) d = p->describe();  // copied under the pool's lock; the callbacks run without it
  if (summary != nullptr) {
    tidepool_memory_summary_t c{};
    c.struct_size = sizeof(c);
    c.held_bytes = d.stats.mapped_bytes;
    c.in_use_bytes = d.stats.in_use_bytes;
    c.cached_bytes = d.stats.cached_bytes;
    c.largest_free_block = d.largest_free_block;
    c.releasable_bytes = d.releasable_bytes;
    c.blocks = d.blocks.size();
    c.handles = d.handles.size();
    const auto size = std::min<std::size_t>(summary->struct_size, sizeof(c));
    std::memcpy(reinterpret_cast<char*>(summary) + sizeof(uint64_t), reinterpret_cast<const char*>(&c) + sizeof(uint64_t),
                size - sizeof(uint64_t));
  }
  if (on_block != nullptr) {
    for (const auto& b : d.blocks) {
      tidepool_block_info_t c{};
      c.struct_size = sizeof(c);
      c.address = b.address;
      c.size = b.size;
      c.requested = b.requested;
      c.stream = b.stream;
      c.range = b.range;
      c.state = static_cast<int32_t>(b.state);
      c.flags = (b.small ? TIDEPOOL_BLOCK_SMALL : 0) | (b.persistent ? TIDEPOOL_BLOCK_PERSISTENT : 0);
      on_block(&c, user_data);
    }
  }
  if (on_handle != nullptr) {
    for (const auto& h : d.handles) on_handle(h.address, h.size, user_data);
  }
}

}  // namespace
}  // namespace tidepool::detail

extern "C" {

tidepool_status tidepool_start_recording(const char* path) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (path == nullptr) throw_null_argument("tidepool_start_recording", "path");
    tidepool::start_recording(path);
  });
}

tidepool_status tidepool_stop_recording(void) {
  using namespace tidepool::detail;
  return guarded([] { tidepool::stop_recording(); });
}

tidepool_status tidepool_recording_path(char* buffer, size_t capacity, size_t* length) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (length == nullptr) throw_null_argument("tidepool_recording_path", "length");
    if (buffer == nullptr && capacity != 0) throw_null_argument("tidepool_recording_path", "buffer");
    const std::string path = tidepool::recording_path();
    *length = path.size();
    if (capacity == 0) return;
    const std::size_t n = std::min(path.size(), capacity - 1);
    std::memcpy(buffer, path.data(), n);
    buffer[n] = '\0';
  });
}

tidepool_status tidepool_describe(int device, tidepool_memory_summary_t* summary, tidepool_block_fn on_block,
                                  tidepool_handle_fn on_handle, void* user_data) {
  using namespace tidepool::detail;
  return guarded([&] {
    check_device_exists(device);
    describe_into(find_pool(device), "tidepool_describe", summary, on_block, on_handle, user_data);
  });
}

tidepool_status tidepool_describe_tag(const char* tag, int device, tidepool_memory_summary_t* summary,
                                      tidepool_block_fn on_block, tidepool_handle_fn on_handle, void* user_data) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (tag == nullptr) throw_null_argument("tidepool_describe_tag", "tag");
    check_device_exists(device);
    // A tag with no pool on the device holds nothing there; asking makes no pool.
    tidepool::pool* p = nullptr;
    if (tag_entry* t = find_tag(tag)) p = t->pools[device].load(std::memory_order_acquire);
    describe_into(p, "tidepool_describe_tag", summary, on_block, on_handle, user_data);
  });
}

tidepool_status tidepool_recent_events(int device, tidepool_event_fn on_event, void* user_data) {
  using namespace tidepool::detail;
  return guarded([&] {
    check_device_exists(device);
    if (on_event == nullptr) throw_null_argument("tidepool_recent_events", "on_event");
    for (const tidepool::recorded_event& e : tidepool::recent_events(device)) {
      tidepool_memory_event_t c{};
      c.struct_size = sizeof(c);
      c.action = static_cast<int32_t>(e.what);
      c.thread = e.thread;
      c.time_ns = e.time_ns;
      c.address = e.address;
      c.size = e.size;
      c.stream = e.stream;
      on_event(&c, user_data);
    }
  });
}

}  // extern "C"
