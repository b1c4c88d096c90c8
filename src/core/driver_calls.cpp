// driver_calls: the one call that the driver counts as two (map, then grant access).
#include "core/driver_calls.hpp"

namespace tidepool::detail {

driver_status driver_calls::mem_map(device_address address, std::size_t size, physical_handle handle) {
  if (modelled_) {
    add(driver_call::mem_map, driver_.modelled_cost_us(driver_call::mem_map, size));
    add(driver_call::mem_set_access, driver_.modelled_cost_us(driver_call::mem_set_access, size));
    return driver_.mem_map(device_, address, size, handle);
  }
  // Measured: the whole of map + access is timed once and split in the ratio of the H200 figures
  // (1.6 us map, 36.5 us access at 2 MiB), since one driver call does both.
  const auto start = std::chrono::steady_clock::now();
  const driver_status status = driver_.mem_map(device_, address, size, handle);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  add(driver_call::mem_map, us * (1.6 / 38.1));
  add(driver_call::mem_set_access, us * (36.5 / 38.1));
  return status;
}

}  // namespace tidepool::detail
