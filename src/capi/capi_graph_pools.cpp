// The C API's graph pools: CUDA graph captures that share memory (tidepool/graph_pool.hpp).
#include "capi/capi_guard.hpp"
#include "tidepool/c_api.h"
#include "tidepool/graph_pool.hpp"

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

}  // extern "C"
