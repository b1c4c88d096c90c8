// Finding the pool behind a device number or a pointer, for the C API.
#include "capi/pool_lookup.hpp"

#include <fmt/format.h>

#include "process/process_state.hpp"
#include "tidepool/c_api.h"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

namespace tidepool::detail {

void check_device_exists(int device) {
  const int count = default_driver()->device_count();
  if (device < 0 || device >= count) {
    throw error(error_code::invalid_device,
                fmt::format("device {} does not exist: the driver has {} device(s)", device, count));
  }
}

pool& pool_holding(const void* ptr, int device) {
  if (device == TIDEPOOL_ANY_DEVICE) {
    if (pool* owner = find_owning_pool(ptr)) return *owner;
    throw error(error_code::invalid_pointer,
                fmt::format("pointer {} was not allocated by tidepool on any device", ptr));
  }
  if (pool* p = find_pool(device)) return *p;
  check_device_exists(device);
  throw error(error_code::invalid_pointer,
              fmt::format("pointer {} was not allocated by tidepool: device {} has no pool", ptr,
                          device));
}

void deallocate_on(void* ptr, int device, stream_t stream) {
  if (ptr == nullptr) return;
  pool_holding(ptr, device).deallocate(ptr, stream);
}

}  // namespace tidepool::detail
