// The pool's door to the driver: every call goes through here and is counted in the pool's own
// driver_call_counts, so one pool's figures are its own even when pools of several devices (or a
// baseline allocator in a replay) share one driver.
//
// Time per call: the driver's modelled cost when it has one (sim: device/sim/cost_model.cpp),
// else the measured wall time of the call (cuda); for mem_map, which is two driver calls, the
// driver's own measurement of each (driver::last_mem_map_times).
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "core/recording_clock.hpp"
#include "tidepool/driver.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::detail {

class driver_calls {
 public:
  driver_calls(driver& drv, int device) : driver_(drv), device_(device) {
    modelled_ = drv.modelled_cost_us(driver_call::mem_create, 2 << 20) >= 0.0;
  }

  /// Runs `call_fn` (a driver call of kind `call` over `bytes`) and counts it.
  template <class F>
  auto counted(driver_call call, std::size_t bytes, F&& call_fn) {
    if (modelled_) {
      add(call, driver_.modelled_cost_us(call, bytes));
      return call_fn();
    }
    const auto start = std::chrono::steady_clock::now();
    auto result = call_fn();
    add(call, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    return result;
  }

  /// Counts one call of kind `call` costing `us`.
  void add(driver_call call, double us) noexcept {
    const auto k = static_cast<std::size_t>(call);
    ++counts_.calls[k];
    counts_.microseconds[k] += us;
  }

  driver_status address_reserve(std::size_t size, std::size_t alignment, device_address* out) {
    return counted(driver_call::address_reserve, size,
                   [&] { return driver_.address_reserve(device_, size, alignment, out); });
  }
  driver_status address_free(device_address address, std::size_t size) {
    return counted(driver_call::address_free, size, [&] { return driver_.address_free(device_, address, size); });
  }
  driver_status mem_create(std::size_t size, physical_handle* out) {
    return counted(driver_call::mem_create, size, [&] { return driver_.mem_create(device_, size, out); });
  }
  driver_status mem_release(physical_handle handle, std::size_t size) {
    return counted(driver_call::mem_release, size, [&] { return driver_.mem_release(device_, handle); });
  }
  /// cuMemMap + cuMemSetAccess: the driver counts two calls, and so do we.
  driver_status mem_map(device_address address, std::size_t size, physical_handle handle);
  driver_status mem_set_access(device_address address, std::size_t size, int peer) {
    return counted(driver_call::mem_set_access, size,
                   [&] { return driver_.mem_set_access(device_, address, size, peer); });
  }
  driver_status mem_unmap(device_address address, std::size_t size) {
    const driver_status status =
        counted(driver_call::mem_unmap, size, [&] { return driver_.mem_unmap(device_, address, size); });
    if (log_ != nullptr && status == driver_status::success) {
      log_->push_back(make_recorded_event(recorded_event::kind::unmap, address, size, 0));
    }
    return status;
  }
  driver_status mem_alloc(std::size_t size, device_address* out) {
    return counted(driver_call::mem_alloc, size, [&] { return driver_.mem_alloc(device_, size, out); });
  }
  driver_status mem_free(device_address address, std::size_t size) {
    return counted(driver_call::mem_free, size, [&] { return driver_.mem_free(device_, address); });
  }
  device_memory_info memory_info() {
    return counted(driver_call::mem_get_info, 0, [&] { return driver_.memory_info(device_); });
  }
  std::size_t free_bytes() {
    return counted(driver_call::mem_get_info, 0, [&] { return driver_.free_bytes(device_); });
  }
  driver_status event_create(event_t* out) {
    return counted(driver_call::event_create, 0, [&] { return driver_.event_create(device_, out); });
  }
  driver_status event_destroy(event_t event) {
    return counted(driver_call::event_destroy, 0, [&] { return driver_.event_destroy(device_, event); });
  }
  driver_status event_record(event_t event, stream_t stream) {
    return counted(driver_call::event_record, 0, [&] { return driver_.event_record(device_, event, stream); });
  }
  driver_status event_query(event_t event) {
    return counted(driver_call::event_query, 0, [&] { return driver_.event_query(device_, event); });
  }
  driver_status event_synchronize(event_t event) {
    return counted(driver_call::event_synchronize, 0, [&] { return driver_.event_synchronize(device_, event); });
  }
  driver_status stream_synchronize(stream_t stream) {
    return counted(driver_call::stream_synchronize, 0, [&] { return driver_.stream_synchronize(device_, stream); });
  }
  driver_status device_synchronize() {
    return counted(driver_call::device_synchronize, 0, [&] { return driver_.device_synchronize(device_); });
  }
  driver_status stream_create(stream_t* out) {
    return counted(driver_call::stream_create, 0, [&] { return driver_.stream_create(device_, out); });
  }
  driver_status stream_destroy(stream_t stream) {
    return counted(driver_call::stream_destroy, 0, [&] { return driver_.stream_destroy(device_, stream); });
  }
  driver_status host_alloc(std::size_t bytes, void** out) {
    return counted(driver_call::host_alloc, bytes, [&] { return driver_.host_alloc(device_, bytes, out); });
  }
  driver_status host_free(void* host, std::size_t bytes) {
    return counted(driver_call::host_free, bytes, [&] { return driver_.host_free(device_, host); });
  }
  driver_status copy_to_host(void* destination, device_address source, std::size_t bytes, stream_t stream) {
    return counted(driver_call::copy_to_host, bytes,
                   [&] { return driver_.copy_to_host(device_, destination, source, bytes, stream); });
  }
  driver_status copy_to_device(device_address destination, const void* source, std::size_t bytes, stream_t stream) {
    return counted(driver_call::copy_to_device, bytes,
                   [&] { return driver_.copy_to_device(device_, destination, source, bytes, stream); });
  }
  driver_status mem_export(physical_handle handle, int* fd) {
    return counted(driver_call::mem_export, 0, [&] { return driver_.mem_export(device_, handle, fd); });
  }
  std::size_t trim_async_pools() {
    return counted(driver_call::async_pool_trim, 0, [&] { return driver_.trim_async_pools(device_); });
  }

  [[nodiscard]] const driver_call_counts& counts() const noexcept { return counts_; }
  [[nodiscard]] driver& raw() noexcept { return driver_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// While the pool records (pool::start_recording), successful maps and unmaps are appended to
  /// `log` (the pool's buffer; both are called under the pool's lock only); nullptr stops it.
  void log_mappings(std::vector<recorded_event>* log) noexcept { log_ = log; }

 private:
  driver_status map_and_count(device_address address, std::size_t size, physical_handle handle);

  driver& driver_;
  int device_;
  bool modelled_ = false;
  driver_call_counts counts_{};
  std::vector<recorded_event>* log_ = nullptr;
};

}  // namespace tidepool::detail
