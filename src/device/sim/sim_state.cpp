// The bookkeeping shared by every call of the simulated GPU: counting, faults, device checks,
// capacity, stream tails and the check for memory that queued work still touches.
#include "device/sim/sim_state.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <iterator>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "device/sim/host_backing.hpp"

namespace tidepool::detail {
namespace {

// FNV-1a, 64 bits, from `seed`: two of them make a deterministic 16-byte UUID.
std::uint64_t fnv1a(std::string_view text, std::uint64_t seed) noexcept {
  std::uint64_t hash = seed;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

device_uuid_bytes uuid_of(const std::string& key, int device) {
  const std::string text = fmt::format("tidepool-sim/{}/{}", key, device);
  const std::uint64_t halves[2] = {fnv1a(text, 0xcbf29ce484222325ULL), fnv1a(text, 0x84222325cbf29ce4ULL)};
  device_uuid_bytes uuid{};
  for (std::size_t i = 0; i < uuid.size(); ++i) uuid[i] = static_cast<std::uint8_t>(halves[i / 8] >> (8 * (i % 8)));
  return uuid;
}

// A key no other sim_driver has: this process's pid and a counter.
std::string private_key() {
  static std::atomic<std::uint64_t> serial{0};
  return fmt::format("private-{}-{}", ::getpid(), serial.fetch_add(1, std::memory_order_relaxed));
}

}  // namespace

sim_state::sim_state(sim_config settings) : config(std::move(settings)) {
  const int count = std::max(config.device_count, 0);
  devices.reserve(static_cast<std::size_t>(count));
  const std::string key = config.uuid_key.empty() ? private_key() : config.uuid_key;
  for (int d = 0; d < count; ++d) {
    devices.emplace_back(d);
    sim_device& device = devices.back();
    device.other_processes_bytes = config.other_processes_bytes;
    device.uuid = uuid_of(key, d);
    if (!config.shared_capacity_directory.empty()) {
      device.shared = std::make_unique<sim_shared_capacity>(config.shared_capacity_directory, to_string(device.uuid));
    }
  }
  for (const int d : config.devices_with_context) {
    // A context held from the start holds its memory like one opened later.
    if (valid_device(d) && !devices[static_cast<std::size_t>(d)].context) {
      sim_device& device = devices[static_cast<std::size_t>(d)];
      device.context = true;
      device.context_bytes = config.context_bytes;
      device.publish();
    }
  }
}

sim_state::~sim_state() {
  if (!config.back_with_host_memory) return;
  for (const auto& [host, bytes] : host_allocations) std::free(host);  // host_alloc's, never freed
  for (sim_device& device : devices) {
    // Giving back a reservation drops every mapping inside it.
    for (const auto& [address, reservation] : device.reservations) host_release_range(address, reservation.size);
    for (const auto& [address, allocation] : device.allocations) host_release_range(address, allocation.host_bytes);
    for (const auto& [address, page] : device.shared_pages) host_release_range(address, page.host_bytes);
    for (const auto& [id, handle] : device.handles) host_destroy_memory(handle.memfd);
  }
}

void sim_state::count(driver_call call, double cost_us) noexcept {
  const auto kind = static_cast<std::size_t>(call);
  counts.calls[kind] += 1;
  counts.microseconds[kind] += cost_us;
}

driver_status sim_state::begin_call(driver_call call, double cost_us, int device, call_needs needs) {
  count(call, cost_us);
  const auto kind = static_cast<std::size_t>(call);
  const std::uint64_t seen = ++calls_seen_[kind];
  auto& failures = injected_failures_[kind];
  if (auto injected = failures.find(seen); injected != failures.end()) {
    const driver_status status = injected->second;
    failures.erase(injected);
    return status;
  }
  if (!valid_device(device)) return driver_status::invalid_value;
  const sim_device& target = devices[static_cast<std::size_t>(device)];
  if (!target.context) return driver_status::error;
  if (needs == call_needs::virtual_memory && !config.virtual_memory) return driver_status::not_supported;
  return driver_status::success;
}

void sim_state::inject_failure(driver_call call, std::uint64_t nth, driver_status status) {
  const auto kind = static_cast<std::size_t>(call);
  injected_failures_[kind][calls_seen_[kind] + nth] = status;
}

bool sim_state::valid_device(int device) const noexcept {
  return device >= 0 && static_cast<std::size_t>(device) < devices.size();
}

std::size_t sim_state::free_bytes(const sim_device& device) const noexcept {
  std::size_t taken = device.other_processes_bytes + device.physical_bytes();
  if (device.shared) {
    const std::size_t others = device.shared->others_bytes();
    taken = others > SIZE_MAX - taken ? SIZE_MAX : taken + others;
  }
  return taken >= config.capacity ? 0 : config.capacity - taken;
}

bool sim_state::fits(const sim_device& device, std::size_t bytes) const noexcept {
  if (bytes > free_bytes(device)) return false;
  const std::size_t limited = device.handle_bytes + device.allocation_bytes;
  return device.capacity_limit >= limited && bytes <= device.capacity_limit - limited;
}

double* sim_state::stream_tail(sim_device& device, stream_t stream) {
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  if (handle == 0 || handle == legacy_stream_handle) return &device.default_stream_tail;
  if (handle == per_thread_stream_handle) return &device.per_thread_tails[std::this_thread::get_id()];
  const auto found = device.stream_tails.find(stream);
  return found == device.stream_tails.end() ? nullptr : &found->second;
}

bool sim_state::queued_work_touches(sim_device& device, device_address address, std::size_t bytes) {
  std::erase_if(device.queued_work, [this](const sim_queued_work& work) { return work.completes_at <= now; });
  return std::any_of(device.queued_work.begin(), device.queued_work.end(), [&](const sim_queued_work& work) {
    return work.address < address + bytes && address < work.address + work.bytes;
  });
}

bool sim_state::wholly_mapped(const sim_device& device, device_address address, std::size_t bytes) {
  const device_address end = address + bytes;
  if (bytes == 0 || end < address) return false;
  if (auto after = device.allocations.upper_bound(address); after != device.allocations.begin()) {
    const auto holder = std::prev(after);
    if (end <= holder->first + holder->second.size) return true;
  }
  auto next = device.mappings.upper_bound(address);
  if (next == device.mappings.begin()) return false;
  --next;
  if (next->first + next->second.size <= address) return false;
  device_address covered = next->first;
  while (next != device.mappings.end() && next->first == covered && covered < end) {
    covered += next->second.size;
    ++next;
  }
  return covered >= end;
}

std::uintptr_t sim_state::make_token(int device) noexcept {
  constexpr unsigned device_bits = 20;
  return (next_token_serial_++ << device_bits) | static_cast<std::uintptr_t>(device + 1);
}

driver_status sim_state::open_context(sim_device& device) noexcept {
  if (device.context) return driver_status::success;
  const auto shared = device.hold_shared();
  if (config.context_bytes > free_bytes(device)) return driver_status::out_of_memory;
  device.context = true;
  device.context_bytes = config.context_bytes;
  device.publish();
  return driver_status::success;
}

}  // namespace tidepool::detail
