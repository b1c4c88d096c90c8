// Finding the pool behind a device number or a pointer, for the C API, and naming what a pointer
// that no pool holds live is: freed already (a double free), or never tidepool's.
#include "capi/pool_lookup.hpp"

#include <fmt/format.h>

#include "process/process_state.hpp"
#include "process/tags.hpp"
#include "tidepool/c_api.h"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

namespace tidepool::detail {
namespace {

[[noreturn]] void throw_double_free(const char* operation, const void* ptr, int device) {
  throw error(error_code::double_free,
              fmt::format("tidepool: {} of {}: double free: it was freed already (no allocation of the pool of "
                          "device {} starts there now)",
                          operation, ptr, device));
}

// The device whose pool has `ptr` in free memory (a pointer freed already), else -1. Asked only
// once no pool holds `ptr` live, so it costs nothing on the way of a good free. allocation_size()
// changes nothing; its error code says what the address is to that pool.
int device_where_freed(const void* ptr) {
  std::vector<pool*> pools = existing_pools();
  for (pool* p : tag_pools(-1)) pools.push_back(p);
  for (pool* p : pools) {
    if (p == nullptr) continue;
    try {
      (void)p->allocation_size(ptr);
    } catch (const error& e) {
      if (e.code() == error_code::double_free) return p->device();
    }
  }
  return -1;
}

}  // namespace

void check_device_exists(int device) {
  const int count = default_driver()->device_count();
  if (device < 0 || device >= count) {
    throw error(error_code::invalid_device,
                fmt::format("device {} does not exist: the driver has {} device(s)", device, count));
  }
}

pool& pool_holding(const void* ptr, int device, const char* operation) {
  if (device == TIDEPOOL_ANY_DEVICE) {
    if (pool* owner = find_owning_pool(ptr)) return *owner;
    if (const int freed_on = device_where_freed(ptr); freed_on >= 0) throw_double_free(operation, ptr, freed_on);
    throw error(error_code::invalid_pointer,
                fmt::format("pointer {} was not allocated by tidepool on any device", ptr));
  }
  // A tag's pool holds it (once any tag has a pool): tags.hpp.
  if (pool* tagged = tag_pool_owning(ptr, device)) return *tagged;
  if (pool* p = find_pool(device)) return *p;
  check_device_exists(device);
  throw error(error_code::invalid_pointer,
              fmt::format("pointer {} was not allocated by tidepool: device {} has no pool", ptr,
                          device));
}

void deallocate_on(void* ptr, int device, stream_t stream) {
  if (ptr == nullptr) return;
  pool& p = pool_holding(ptr, device, "deallocate");
  try {
    p.deallocate(ptr, stream);
  } catch (const error& e) {
    // The pool says "not allocated now (already freed?)": say it as the C API's callers expect.
    if (e.code() == error_code::double_free) throw_double_free("deallocate", ptr, p.device());
    // Not the untagged pool's: freed already in a tag's pool is a double free too.
    if (e.code() == error_code::invalid_pointer && tags_have_pools()) {
      if (const int freed_on = device_where_freed(ptr); freed_on >= 0) throw_double_free("deallocate", ptr, freed_on);
    }
    throw;
  }
}

}  // namespace tidepool::detail
