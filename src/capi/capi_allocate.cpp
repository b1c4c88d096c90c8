// The C API's allocation entry points: allocate, deallocate, record_stream, forget_stream, and
// the thread's current stream and lifetime hint (for callers that pass none).
#include <fmt/format.h>

#include "capi/capi_guard.hpp"
#include "capi/pool_lookup.hpp"
#include "capi/thread_lifetime.hpp"
#include "capi/thread_streams.hpp"
#include "process/process_state.hpp"
#include "tidepool/c_api.h"
#include "tidepool/process.hpp"

namespace tidepool::detail {
namespace {

lifetime to_lifetime(tidepool_lifetime hint) {
  switch (hint) {
    case TIDEPOOL_SCRATCH: return lifetime::scratch;
    case TIDEPOOL_PERSISTENT: return lifetime::persistent;
    case TIDEPOOL_LIFETIME_MAX_ENUM: break;
  }
  throw error(error_code::invalid_argument,
              fmt::format("lifetime hint {} is neither TIDEPOOL_SCRATCH (0) nor TIDEPOOL_PERSISTENT (1)",
                          static_cast<int>(hint)));
}

}  // namespace
}  // namespace tidepool::detail

extern "C" {

tidepool_status tidepool_allocate(size_t size, int device, tidepool_stream_t stream,
                                  tidepool_lifetime hint, void** out) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (out == nullptr) throw_null_argument("tidepool_allocate", "out");
    *out = nullptr;
    *out = tidepool::current_pool(device).allocate(size, stream, to_lifetime(hint));
  });
}

tidepool_status tidepool_deallocate(void* ptr, int device, tidepool_stream_t stream) {
  using namespace tidepool::detail;
  return guarded([&] { deallocate_on(ptr, device, stream); });
}

tidepool_status tidepool_record_stream(void* ptr, int device, tidepool_stream_t stream) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (ptr == nullptr) throw_null_argument("tidepool_record_stream", "ptr");
    pool_holding(ptr, device, "record_stream").record_stream(ptr, stream);
  });
}

tidepool_status tidepool_forget_stream(int device, tidepool_stream_t stream) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (device == TIDEPOOL_ANY_DEVICE) {
      for (tidepool::pool* p : tidepool::existing_pools()) {
        if (p != nullptr) p->forget_stream(stream);
      }
      return;
    }
    check_device_exists(device);
    if (tidepool::pool* p = find_pool(device)) p->forget_stream(stream);
  });
}

tidepool_status tidepool_set_current_stream(int device, tidepool_stream_t stream) {
  using namespace tidepool::detail;
  return guarded([&] {
    check_device_exists(device);
    set_current_stream(device, stream);
  });
}

tidepool_status tidepool_set_thread_lifetime(tidepool_lifetime hint) {
  using namespace tidepool::detail;
  return guarded([&] { set_thread_lifetime(to_lifetime(hint)); });
}

tidepool_status tidepool_get_thread_lifetime(tidepool_lifetime* hint) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (hint == nullptr) throw_null_argument("tidepool_get_thread_lifetime", "hint");
    *hint = thread_lifetime() == tidepool::lifetime::persistent ? TIDEPOOL_PERSISTENT : TIDEPOOL_SCRATCH;
  });
}

tidepool_status tidepool_get_current_stream(int device, tidepool_stream_t* stream) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (stream == nullptr) throw_null_argument("tidepool_get_current_stream", "stream");
    check_device_exists(device);
    *stream = current_stream(device);
  });
}

}  // extern "C"
