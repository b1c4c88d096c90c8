// The parts of the device interface shared by every driver: names of statuses, calls and UUIDs,
// and the sums over call counts.
#include "tidepool/driver.hpp"

#include <numeric>

#include <fmt/format.h>

namespace tidepool {

std::string to_string(const device_uuid_bytes& u) {
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                     u[14], u[15]);
}

std::string_view to_string(driver_status status) noexcept {
  switch (status) {
    case driver_status::success: return "success";
    case driver_status::out_of_memory: return "out_of_memory";
    case driver_status::invalid_value: return "invalid_value";
    case driver_status::not_supported: return "not_supported";
    case driver_status::not_ready: return "not_ready";
    case driver_status::error: return "error";
  }
  return "unknown";
}

std::string_view to_string(driver_call call) noexcept {
  switch (call) {
    case driver_call::address_reserve: return "address_reserve";
    case driver_call::address_free: return "address_free";
    case driver_call::mem_create: return "mem_create";
    case driver_call::mem_release: return "mem_release";
    case driver_call::mem_map: return "mem_map";
    case driver_call::mem_set_access: return "mem_set_access";
    case driver_call::mem_unmap: return "mem_unmap";
    case driver_call::mem_alloc: return "mem_alloc";
    case driver_call::mem_free: return "mem_free";
    case driver_call::mem_get_info: return "mem_get_info";
    case driver_call::event_create: return "event_create";
    case driver_call::event_destroy: return "event_destroy";
    case driver_call::event_record: return "event_record";
    case driver_call::event_query: return "event_query";
    case driver_call::event_synchronize: return "event_synchronize";
    case driver_call::stream_create: return "stream_create";
    case driver_call::stream_destroy: return "stream_destroy";
    case driver_call::stream_wait_event: return "stream_wait_event";
    case driver_call::stream_synchronize: return "stream_synchronize";
    case driver_call::device_synchronize: return "device_synchronize";
    case driver_call::async_pool_trim: return "async_pool_trim";
    case driver_call::host_alloc: return "host_alloc";
    case driver_call::host_free: return "host_free";
    case driver_call::copy_to_host: return "copy_to_host";
    case driver_call::copy_to_device: return "copy_to_device";
    case driver_call::mem_export: return "mem_export";
    case driver_call::mem_import: return "mem_import";
    case driver_call::ipc_open: return "ipc_open";
    case driver_call::ipc_close: return "ipc_close";
    case driver_call::count_: break;
  }
  return "unknown";
}

std::uint64_t driver_call_counts::total_calls() const noexcept {
  return std::accumulate(calls.begin(), calls.end(), std::uint64_t{0});
}

double driver_call_counts::total_us() const noexcept {
  return std::accumulate(microseconds.begin(), microseconds.end(), 0.0);
}

namespace {
// The sum of `values` over the kinds of call `pick` names.
template <typename T>
T sum_of_kinds(const std::array<T, driver_call_kinds>& values, bool (*pick)(driver_call) noexcept) noexcept {
  T sum{};
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    if (pick(static_cast<driver_call>(k))) sum += values[k];
  }
  return sum;
}
}  // namespace

std::uint64_t driver_call_counts::memory_calls() const noexcept { return sum_of_kinds(calls, moves_memory); }

double driver_call_counts::memory_us() const noexcept { return sum_of_kinds(microseconds, moves_memory); }

std::uint64_t driver_call_counts::wait_calls() const noexcept { return sum_of_kinds(calls, waits_for_gpu); }

double driver_call_counts::wait_us() const noexcept { return sum_of_kinds(microseconds, waits_for_gpu); }

driver_call_counts& driver_call_counts::operator-=(const driver_call_counts& other) noexcept {
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    calls[k] -= other.calls[k];
    microseconds[k] -= other.microseconds[k];
  }
  return *this;
}

}  // namespace tidepool
