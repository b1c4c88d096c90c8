// Pinned host memory and copies between host and device on the simulated GPU (what sleep and wake
// use to keep a tag's contents).
//
// A copy is work queued on its stream for its modelled time (cost_model.cpp), touching the device
// range it reads or writes: an unmap of that range before the copy completes is an unsafe unmap,
// as for launched work. Host-backed, a copy moves the real bytes at once (the caller reads them
// only after synchronizing, as it must on a GPU); otherwise it moves nothing and host_alloc hands
// out a token with no memory behind it, so a sleep of 100 GiB costs no host memory in a replay.
// A copy that names device memory that is not wholly mapped fails (invalid_value) and is counted
// as an unmapped access.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "device/sim/cost_model.hpp"
#include "device/sim/sim_state.hpp"
#include "tidepool/sim.hpp"

namespace tidepool {
namespace {

// Queues `cost_us` of work touching [address, address + bytes) on `stream`; false if the stream is
// not one of the device's.
bool queue_copy(detail::sim_state& state, detail::sim_device& target, stream_t stream, double cost_us,
                device_address address, std::size_t bytes) {
  double* tail = state.stream_tail(target, stream);
  if (tail == nullptr) return false;
  *tail = std::max(state.now, *tail) + cost_us;
  target.busy_until = std::max(target.busy_until, *tail);
  target.queued_work.push_back({*tail, address, bytes});
  return true;
}

// The host allocation holding all of [host, host + bytes), or false.
bool host_range_known(const detail::sim_state& state, const void* host, std::size_t bytes) {
  const auto* p = static_cast<const std::byte*>(host);
  for (const auto& [base, size] : state.host_allocations) {
    const auto* b = static_cast<const std::byte*>(base);
    if (p >= b && bytes <= size && p - b <= static_cast<std::ptrdiff_t>(size - bytes)) return true;
  }
  return false;
}

}  // namespace

driver_status sim_driver::host_alloc(int device, std::size_t bytes, void** out) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::host_alloc, detail::sim_call_cost_us(driver_call::host_alloc, bytes),
                                       device, detail::call_needs::context);
  if (status != driver_status::success) return status;
  if (out == nullptr || bytes == 0) return driver_status::invalid_value;
  void* host = nullptr;
  if (state.config.back_with_host_memory) {
    host = std::malloc(bytes);
    if (host == nullptr) return driver_status::out_of_memory;
  } else {
    host = reinterpret_cast<void*>(state.make_token(device) << 12);  // never dereferenced
  }
  state.host_allocations.emplace(host, bytes);
  *out = host;
  return driver_status::success;
}

driver_status sim_driver::host_free(int device, void* host) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto found = state.host_allocations.find(host);
  const std::size_t bytes = found == state.host_allocations.end() ? 0 : found->second;
  const auto status = state.begin_call(driver_call::host_free, detail::sim_call_cost_us(driver_call::host_free, bytes),
                                       device, detail::call_needs::valid_device);
  if (status != driver_status::success) return status;
  if (found == state.host_allocations.end()) return driver_status::invalid_value;
  if (state.config.back_with_host_memory) std::free(host);
  state.host_allocations.erase(found);
  return driver_status::success;
}

driver_status sim_driver::copy_to_host(int device, void* destination, device_address source, std::size_t bytes,
                                       stream_t stream) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::copy_to_host,
                                       detail::sim_call_cost_us(driver_call::copy_to_host, bytes), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  if (bytes == 0 || destination == nullptr || !host_range_known(state, destination, bytes)) {
    return driver_status::invalid_value;
  }
  if (!detail::sim_state::wholly_mapped(target, source, bytes)) {
    state.unmapped_accesses += 1;
    return driver_status::invalid_value;
  }
  if (!queue_copy(state, target, stream, detail::sim_call_cost_us(driver_call::copy_to_host, bytes), source, bytes)) {
    return driver_status::invalid_value;
  }
  if (state.config.back_with_host_memory) std::memcpy(destination, reinterpret_cast<const void*>(source), bytes);
  return driver_status::success;
}

driver_status sim_driver::copy_to_device(int device, device_address destination, const void* source,
                                         std::size_t bytes, stream_t stream) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::copy_to_device,
                                       detail::sim_call_cost_us(driver_call::copy_to_device, bytes), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  if (bytes == 0 || source == nullptr || !host_range_known(state, source, bytes)) return driver_status::invalid_value;
  if (!detail::sim_state::wholly_mapped(target, destination, bytes)) {
    state.unmapped_accesses += 1;
    return driver_status::invalid_value;
  }
  if (!queue_copy(state, target, stream, detail::sim_call_cost_us(driver_call::copy_to_device, bytes), destination,
                  bytes)) {
    return driver_status::invalid_value;
  }
  if (state.config.back_with_host_memory) std::memcpy(reinterpret_cast<void*>(destination), source, bytes);
  return driver_status::success;
}

}  // namespace tidepool
