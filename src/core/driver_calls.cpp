// driver_calls: the one call that the driver counts as two (map, then grant access), logged for
// a recording pool.
#include "core/driver_calls.hpp"

namespace tidepool::detail {

driver_status driver_calls::mem_map(device_address address, std::size_t size, physical_handle handle) {
  const driver_status status = map_and_count(address, size, handle);
  if (log_ != nullptr && status == driver_status::success) {
    log_->push_back(make_recorded_event(recorded_event::kind::map, address, size, 0));
  }
  return status;
}

driver_status driver_calls::map_and_count(device_address address, std::size_t size, physical_handle handle) {
  if (modelled_) {
    add(driver_call::mem_map, driver_.modelled_cost_us(driver_call::mem_map, size));
    add(driver_call::mem_set_access, driver_.modelled_cost_us(driver_call::mem_set_access, size));
    return driver_.mem_map(device_, address, size, handle);
  }
  // Measured: the driver times cuMemMap and cuMemSetAccess each on its own and tells this
  // thread's figures for the call just made.
  const auto start = std::chrono::steady_clock::now();
  const driver_status status = driver_.mem_map(device_, address, size, handle);
  const double whole_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const mem_map_times times = driver_.last_mem_map_times();
  if (times.map_us >= 0.0 && times.set_access_us >= 0.0) {
    add(driver_call::mem_map, times.map_us);
    add(driver_call::mem_set_access, times.set_access_us);
  } else {
    // A driver that neither models nor splits its calls: the whole call is the map's time.
    add(driver_call::mem_map, whole_us);
    add(driver_call::mem_set_access, 0.0);
  }
  return status;
}

}  // namespace tidepool::detail
