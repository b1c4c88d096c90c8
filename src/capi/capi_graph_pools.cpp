// The C API's graph pools: CUDA graph captures that share memory (tidepool/graph_pool.hpp).
#include <fmt/format.h>

#include "capi/capi_guard.hpp"
#include "capi/pool_lookup.hpp"
#include "tidepool/c_api.h"
#include "tidepool/errors.hpp"
#include "tidepool/graph_pool.hpp"
#include "tidepool/process.hpp"

extern "C" {

tidepool_status tidepool_new_graph_pool(uint64_t* id) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (id == nullptr) throw_null_argument("tidepool_new_graph_pool", "id");
    *id = tidepool::new_graph_pool();
  });
}

tidepool_status tidepool_set_graph_pool(uint64_t id, uint64_t* previous) {
  using namespace tidepool::detail;
  return guarded([&] {
    const std::uint64_t replaced = tidepool::set_current_graph_pool(id);
    if (previous != nullptr) *previous = replaced;
  });
}

tidepool_status tidepool_current_graph_pool(uint64_t* id) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (id == nullptr) throw_null_argument("tidepool_current_graph_pool", "id");
    *id = tidepool::current_graph_pool();
  });
}

tidepool_status tidepool_set_default_graph_pool(uint64_t id, uint64_t* previous) {
  using namespace tidepool::detail;
  return guarded([&] {
    const std::uint64_t replaced = tidepool::set_default_graph_pool(id);
    if (previous != nullptr) *previous = replaced;
  });
}

tidepool_status tidepool_default_graph_pool(uint64_t* id) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (id == nullptr) throw_null_argument("tidepool_default_graph_pool", "id");
    *id = tidepool::default_graph_pool();
  });
}

tidepool_status tidepool_set_capture_graph_pool(int device, tidepool_stream_t stream, uint64_t id,
                                                uint64_t* capture_id) {
  using namespace tidepool::detail;
  return guarded([&] {
    check_device_exists(device);
    tidepool::stream_capture capture;
    const auto drv = tidepool::default_driver();
    if (drv->capture_of(device, stream, &capture) != tidepool::driver_status::success || !capture.active) {
      throw tidepool::error(tidepool::error_code::invalid_stream,
                            fmt::format("tidepool_set_capture_graph_pool: stream {} of device {} is not being captured",
                                        static_cast<const void*>(stream), device));
    }
    tidepool::set_capture_graph_pool(capture.id, id);
    if (capture_id != nullptr) *capture_id = capture.id;
  });
}

tidepool_status tidepool_forget_capture_graph_pool(uint64_t capture_id) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (capture_id != 0) tidepool::set_capture_graph_pool(capture_id, 0);
  });
}

}  // extern "C"
