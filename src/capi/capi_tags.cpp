// The C API's tags (issue 13): the thread's current tag, putting a tag to sleep and waking it.
// The PyTorch entry points of tag slots are in capi_frameworks.cpp; tidepool_tag_stats beside
// tidepool_stats in capi_process.cpp.
#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "capi/capi_guard.hpp"
#include "process/tags.hpp"
#include "tidepool/c_api.h"
#include "tidepool/process.hpp"

namespace tidepool::detail {
namespace {

std::string tag_text(const char* function, const char* tag) {
  if (tag == nullptr) throw_null_argument(function, "tag");
  return tag;
}

// Text out as tidepool_recording_path gives it: *length the full size, at most capacity - 1
// bytes and a NUL written.
void copy_text(const char* function, const std::string& text, char* buffer, size_t capacity, size_t* length) {
  if (length == nullptr) throw_null_argument(function, "length");
  if (buffer == nullptr && capacity != 0) throw_null_argument(function, "buffer");
  *length = text.size();
  if (capacity == 0) return;
  const std::size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

sleep_keep to_keep(tidepool_sleep_keep keep) {
  switch (keep) {
    case TIDEPOOL_KEEP_CONTENTS: return sleep_keep::contents;
    case TIDEPOOL_KEEP_NOTHING: return sleep_keep::nothing;
    case TIDEPOOL_SLEEP_KEEP_MAX_ENUM: break;
  }
  throw error(error_code::invalid_argument,
              fmt::format("keep {} is neither TIDEPOOL_KEEP_CONTENTS (0) nor TIDEPOOL_KEEP_NOTHING (1)",
                          static_cast<int>(keep)));
}

}  // namespace
}  // namespace tidepool::detail

extern "C" {

tidepool_status tidepool_push_tag(const char* tag) {
  using namespace tidepool::detail;
  return guarded([&] { tidepool::push_tag(tag_text("tidepool_push_tag", tag)); });
}

tidepool_status tidepool_pop_tag(void) {
  using namespace tidepool::detail;
  return guarded([] { tidepool::pop_tag(); });
}

tidepool_status tidepool_set_default_tag(const char* tag) {
  using namespace tidepool::detail;
  return guarded([&] { (void)tidepool::set_default_tag(tag == nullptr ? std::string() : std::string(tag)); });
}

tidepool_status tidepool_current_tag(char* buffer, size_t capacity, size_t* length) {
  using namespace tidepool::detail;
  return guarded([&] { copy_text("tidepool_current_tag", tidepool::current_tag(), buffer, capacity, length); });
}

tidepool_status tidepool_default_tag(char* buffer, size_t capacity, size_t* length) {
  using namespace tidepool::detail;
  return guarded([&] { copy_text("tidepool_default_tag", tidepool::default_tag(), buffer, capacity, length); });
}

tidepool_status tidepool_tag_id(const char* tag, int* id) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (id == nullptr) throw_null_argument("tidepool_tag_id", "id");
    *id = static_cast<int>(tag_id(tag_named(tag_text("tidepool_tag_id", tag))));
  });
}

tidepool_status tidepool_tag_count(int* count) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (count == nullptr) throw_null_argument("tidepool_tag_count", "count");
    *count = static_cast<int>(tag_count());
  });
}

tidepool_status tidepool_tag_name(int id, char* buffer, size_t capacity, size_t* length) {
  using namespace tidepool::detail;
  return guarded([&] {
    const tag_entry* t = id >= 0 ? tag_at(static_cast<std::size_t>(id)) : nullptr;
    if (t == nullptr) {
      throw tidepool::error(tidepool::error_code::invalid_argument,
                            fmt::format("tidepool_tag_name: no tag has index {}", id));
    }
    copy_text("tidepool_tag_name", t->name, buffer, capacity, length);
  });
}

tidepool_status tidepool_sleep(const char* tag, tidepool_sleep_keep keep, size_t* bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    const std::string name = tag_text("tidepool_sleep", tag);
    const std::size_t released = tidepool::sleep_tag(name, to_keep(keep));
    if (bytes != nullptr) *bytes = released;
  });
}

tidepool_status tidepool_wake(const char* tag) {
  using namespace tidepool::detail;
  return guarded([&] { tidepool::wake_tag(tag_text("tidepool_wake", tag)); });
}

tidepool_status tidepool_tag_asleep(const char* tag, int* asleep) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (asleep == nullptr) throw_null_argument("tidepool_tag_asleep", "asleep");
    *asleep = tidepool::tag_asleep(tag_text("tidepool_tag_asleep", tag)) ? 1 : 0;
  });
}

}  // extern "C"
