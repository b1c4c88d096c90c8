// tidepool::sim_driver: construction, contexts, device queries, memory info, the simulated async
// pool, fault injection and the checks tests read. The memory calls are in sim_memory.cpp, streams,
// events and the clock in sim_streams.cpp.
#include "tidepool/sim.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "device/sim/cost_model.hpp"
#include "device/sim/sim_state.hpp"
#include "tidepool/errors.hpp"

namespace tidepool {
namespace {

// Each device's synthetic region is 16 TiB from (device + 1) << 44: this many fit in 64 bits.
constexpr int most_devices = 1024;

// Refuses a configuration the simulation cannot honour, naming the bad value.
void check_config(const sim_config& config) {
  if (config.device_count < 0 || config.device_count > most_devices) {
    throw error(error_code::invalid_argument,
                fmt::format("sim_config: device_count {} is outside 0..{}", config.device_count, most_devices));
  }
  if (config.granularity == 0 || config.granularity % 4096 != 0) {
    throw error(error_code::invalid_argument,
                fmt::format("sim_config: granularity {} is not a non-zero multiple of 4096", config.granularity));
  }
  for (const int device : config.devices_with_context) {
    if (device < 0 || device >= config.device_count) {
      throw error(error_code::invalid_device,
                  fmt::format("sim_config: devices_with_context names device {}, but device_count is {}", device,
                              config.device_count));
    }
  }
}

// The device `device` for a test-facing method, or a tidepool::error naming the ordinal.
detail::sim_device& device_or_throw(detail::sim_state& state, int device, const char* method) {
  if (!state.valid_device(device)) {
    throw error(error_code::invalid_device,
                fmt::format("sim {}: device {} does not exist ({} devices)", method, device, state.devices.size()));
  }
  return state.devices[static_cast<std::size_t>(device)];
}

}  // namespace

sim_driver::sim_driver(sim_config config) {
  check_config(config);
  state_ = std::make_unique<detail::sim_state>(std::move(config));
}

sim_driver::~sim_driver() = default;

std::string sim_driver::name() const { return "sim"; }

int sim_driver::device_count() {
  std::lock_guard lock(state_->mutex);
  return static_cast<int>(state_->devices.size());
}

bool sim_driver::has_context(int device) {
  std::lock_guard lock(state_->mutex);
  return state_->valid_device(device) && state_->devices[static_cast<std::size_t>(device)].context;
}

driver_status sim_driver::open_context(int device) {
  std::lock_guard lock(state_->mutex);
  if (!state_->valid_device(device)) return driver_status::invalid_value;
  return state_->open_context(state_->devices[static_cast<std::size_t>(device)]);
}

bool sim_driver::supports_virtual_memory(int device) {
  std::lock_guard lock(state_->mutex);
  return state_->valid_device(device) && state_->config.virtual_memory;
}

std::size_t sim_driver::granularity(int device) {
  std::lock_guard lock(state_->mutex);
  return state_->valid_device(device) ? state_->config.granularity : 0;
}

device_memory_info sim_driver::memory_info(int device) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  // Like cuMemGetInfo through NVML: needs no context of ours, and opens none.
  state.count(driver_call::mem_get_info, detail::sim_call_cost_us(driver_call::mem_get_info, 0));
  if (!state.valid_device(device)) return {};
  const detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  return {state.config.capacity, state.free_bytes(target), target.physical_bytes()};
}

driver_status sim_driver::device_uuid(int device, device_uuid_bytes* out) {
  std::lock_guard lock(state_->mutex);
  if (!state_->valid_device(device) || out == nullptr) return driver_status::invalid_value;
  *out = state_->devices[static_cast<std::size_t>(device)].uuid;
  return driver_status::success;
}

std::size_t sim_driver::trim_async_pools(int device) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::async_pool_trim,
                                       detail::sim_call_cost_us(driver_call::async_pool_trim, 0), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return 0;
  detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const std::size_t trimmed = target.async_pool_bytes;
  target.async_pool_bytes = 0;
  target.publish();
  return trimmed;
}

driver_call_counts sim_driver::call_counts() const {
  std::lock_guard lock(state_->mutex);
  return state_->counts;
}

double sim_driver::modelled_cost_us(driver_call call, std::size_t bytes) const {
  return detail::sim_call_cost_us(call, bytes);
}

void sim_driver::park_in_async_pool(int device, std::size_t bytes) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  detail::sim_device& target = device_or_throw(state, device, "park_in_async_pool");
  if (!target.context) {
    throw error(error_code::driver_failure, fmt::format("sim park_in_async_pool: device {} has no context", device));
  }
  if (bytes > state.free_bytes(target)) {
    throw error(error_code::invalid_size,
                fmt::format("sim park_in_async_pool: {} bytes do not fit in the {} free on device {}", bytes,
                            state.free_bytes(target), device));
  }
  target.async_pool_bytes += bytes;
  target.publish();
}

std::size_t sim_driver::async_pool_bytes(int device) const {
  std::lock_guard lock(state_->mutex);
  return device_or_throw(*state_, device, "async_pool_bytes").async_pool_bytes;
}

void sim_driver::fail_nth(driver_call call, std::uint64_t nth, driver_status status) {
  if (call >= driver_call::count_) {
    throw error(error_code::invalid_argument,
                fmt::format("sim fail_nth: call kind {} does not exist", static_cast<unsigned>(call)));
  }
  if (nth == 0) throw error(error_code::invalid_argument, "sim fail_nth: nth is 1-based, 0 names no call");
  if (status == driver_status::success) {
    throw error(error_code::invalid_argument, "sim fail_nth: an injected failure cannot be success");
  }
  std::lock_guard lock(state_->mutex);
  state_->inject_failure(call, nth, status);
}

void sim_driver::set_capacity_limit(int device, std::size_t bytes) {
  std::lock_guard lock(state_->mutex);
  device_or_throw(*state_, device, "set_capacity_limit").capacity_limit = bytes;
}

void sim_driver::set_other_processes_bytes(int device, std::size_t bytes) {
  std::lock_guard lock(state_->mutex);
  device_or_throw(*state_, device, "set_other_processes_bytes").other_processes_bytes = bytes;
}

std::uint64_t sim_driver::unsafe_unmap_count() const {
  std::lock_guard lock(state_->mutex);
  return state_->unsafe_unmaps;
}

std::uint64_t sim_driver::unmapped_access_count() const {
  std::lock_guard lock(state_->mutex);
  return state_->unmapped_accesses;
}

std::size_t sim_driver::physical_bytes(int device) const {
  std::lock_guard lock(state_->mutex);
  return device_or_throw(*state_, device, "physical_bytes").physical_bytes();
}

std::size_t sim_driver::mapped_bytes(int device) const {
  std::lock_guard lock(state_->mutex);
  return device_or_throw(*state_, device, "mapped_bytes").mapped_bytes;
}

std::vector<std::pair<device_address, std::size_t>> sim_driver::mappings(int device) const {
  std::lock_guard lock(state_->mutex);
  std::vector<std::pair<device_address, std::size_t>> out;
  for (const auto& [address, m] : device_or_throw(*state_, device, "mappings").mappings) out.emplace_back(address, m.size);
  return out;
}

std::byte* sim_driver::host_view(int device, device_address address, std::size_t bytes) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  if (!state.config.back_with_host_memory || !state.valid_device(device) || bytes == 0 || address + bytes < address) {
    return nullptr;
  }
  const detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const device_address end = address + bytes;
  const auto as_bytes = [address] { return reinterpret_cast<std::byte*>(address); };
  // Inside one plain allocation?
  if (auto after = target.allocations.upper_bound(address); after != target.allocations.begin()) {
    const auto holder = std::prev(after);
    if (end <= holder->first + holder->second.size) return as_bytes();
  }
  // Covered by mappings that follow one another with no gap?
  auto next = target.mappings.upper_bound(address);
  if (next == target.mappings.begin()) return nullptr;
  --next;
  device_address covered = next->first;
  while (next != target.mappings.end() && next->first == covered && covered < end) {
    covered += next->second.size;
    ++next;
  }
  return covered >= end ? as_bytes() : nullptr;
}

bool sim_driver::has_access(int device, device_address address, int peer_device) const {
  std::lock_guard lock(state_->mutex);
  const detail::sim_device& target = device_or_throw(*state_, device, "has_access");
  auto after = target.mappings.upper_bound(address);
  if (after == target.mappings.begin()) return false;
  const auto holder = std::prev(after);
  if (address >= holder->first + holder->second.size) return false;
  const auto& access = holder->second.access;
  return std::find(access.begin(), access.end(), peer_device) != access.end();
}

void sim_driver::reset_call_counts() {
  std::lock_guard lock(state_->mutex);
  state_->counts = {};
}

}  // namespace tidepool
