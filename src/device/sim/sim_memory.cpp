// The memory calls of the simulated GPU: virtual ranges, physical handles, mapping and access, and
// plain allocations. Each call is counted (failed ones too) at its modelled cost, checked against
// the rules the CUDA driver enforces, and then applied to the exact accounting of its device.
// Plain allocations hold what cuMemAlloc holds on the H200 (cuda_malloc_rule.hpp): up to 1 MiB in
// 2 MiB pages shared with allocations that fit the same number to a page, above it whole pages.
#include <algorithm>
#include <iterator>
#include <optional>
#include <set>
#include <vector>

#include "device/sim/cost_model.hpp"
#include "device/sim/cuda_malloc_rule.hpp"
#include "device/sim/host_backing.hpp"
#include "device/sim/sim_state.hpp"
#include "tidepool/sim.hpp"

namespace tidepool {
namespace {

using detail::sim_device;
using detail::sim_mapping;
using mapping_iterator = std::map<device_address, sim_mapping>::iterator;

// Pages taken for plain allocations: where they are, and the host memory behind them.
struct plain_pages {
  device_address address = 0;
  std::size_t host_bytes = 0;
};

// `bytes` of whole 2 MiB pages for mem_alloc, counted as held; nullopt when the device has no room.
// cudaMalloc was seen (driver 580) to reclaim the stream-ordered pools before failing.
std::optional<plain_pages> new_pages(detail::sim_state& state, sim_device& target, std::size_t bytes) {
  const auto shared = target.hold_shared();
  if (!state.fits(target, bytes) && target.async_pool_bytes > 0) {
    target.async_pool_bytes = 0;
    target.publish();
  }
  if (!state.fits(target, bytes)) return std::nullopt;
  plain_pages pages;
  if (state.config.back_with_host_memory) {
    pages.address = detail::host_allocate(bytes);
    if (pages.address == 0) return std::nullopt;
    pages.host_bytes = detail::host_page_round(bytes);
  } else {
    const auto taken = target.addresses.take(bytes, detail::cuda_malloc_page);
    if (!taken) return std::nullopt;
    pages.address = *taken;
  }
  target.allocation_bytes += bytes;
  target.publish();
  return pages;
}

void give_back_pages(detail::sim_state& state, sim_device& target, device_address address, std::size_t bytes,
                     std::size_t host_bytes) {
  if (state.config.back_with_host_memory) {
    detail::host_release_range(address, host_bytes);
  } else {
    target.addresses.give_back(address);
  }
  target.allocation_bytes -= bytes;
  target.publish();
}

// The mappings that cover [address, address + size) exactly, one after another with no gap and
// none cut; empty when the range is not such a run of whole mappings.
std::vector<mapping_iterator> whole_mappings_covering(sim_device& device, device_address address, std::size_t size) {
  std::vector<mapping_iterator> run;
  if (size == 0 || address + size < address) return {};
  const device_address end = address + size;
  auto it = device.mappings.find(address);
  device_address next = address;
  while (it != device.mappings.end() && it->first == next && next < end) {
    run.push_back(it);
    next = it->first + it->second.size;
    ++it;
  }
  if (next != end) return {};
  return run;
}

// Cost of a per-handle call (unmap, set access) over a range: the sum over the mappings that start
// in it, or one call on `size` when there are none (a call the driver refuses costs one call).
double per_handle_cost_over(detail::sim_state& state, driver_call call, int device, device_address address,
                            std::size_t size) {
  if (!state.valid_device(device)) return detail::sim_call_cost_us(call, size);
  const sim_device& target = state.devices[static_cast<std::size_t>(device)];
  double cost = 0;
  bool any = false;
  for (auto it = target.mappings.lower_bound(address); it != target.mappings.end() && it->first - address < size; ++it) {
    cost += detail::sim_call_cost_us(call, it->second.size);
    any = true;
  }
  return any ? cost : detail::sim_call_cost_us(call, size);
}

// The reservation that holds all of [address, address + size), or end().
std::map<device_address, detail::sim_reservation>::iterator reservation_holding(sim_device& device,
                                                                               device_address address,
                                                                               std::size_t size) {
  auto after = device.reservations.upper_bound(address);
  if (after == device.reservations.begin()) return device.reservations.end();
  const auto holder = std::prev(after);
  const device_address reservation_end = holder->first + holder->second.size;
  if (address + size < address || address + size > reservation_end) return device.reservations.end();
  return holder;
}

// Whether [address, address + size) overlaps a mapping already there.
bool overlaps_a_mapping(const sim_device& device, device_address address, std::size_t size) {
  auto after = device.mappings.lower_bound(address);
  if (after != device.mappings.end() && after->first < address + size) return true;
  if (after == device.mappings.begin()) return false;
  const auto before = std::prev(after);
  return before->first + before->second.size > address;
}

// Gives a handle's memory back: its bytes stop counting against the device.
void destroy_handle(sim_device& device, std::unordered_map<physical_handle, detail::sim_handle>::iterator handle) {
  if (!handle->second.imported) device.handle_bytes -= handle->second.size;
  detail::host_destroy_memory(handle->second.memfd);
  device.handles.erase(handle);
  device.publish();
}

}  // namespace

driver_status sim_driver::address_reserve(int device, std::size_t size, std::size_t alignment, device_address* out) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::address_reserve, detail::sim_call_cost_us(driver_call::address_reserve, size),
                                       device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  const std::size_t granule = state.config.granularity;
  if (alignment == 0) alignment = granule;
  if (out == nullptr || size == 0 || size % granule != 0 || alignment % granule != 0) return driver_status::invalid_value;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  device_address address = 0;
  if (state.config.back_with_host_memory) {
    address = detail::host_reserve(size, alignment);
    if (address == 0) return driver_status::out_of_memory;
  } else {
    const auto taken = target.addresses.take(size, alignment);
    if (!taken) return driver_status::out_of_memory;
    address = *taken;
  }
  target.reservations.emplace(address, detail::sim_reservation{size, 0});
  *out = address;
  return driver_status::success;
}

driver_status sim_driver::address_free(int device, device_address address, std::size_t size) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::address_free, detail::sim_call_cost_us(driver_call::address_free, size),
                                       device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const auto reservation = target.reservations.find(address);
  // The whole reservation goes at once, and only once nothing is mapped in it.
  if (reservation == target.reservations.end() || reservation->second.size != size || reservation->second.mappings != 0) {
    return driver_status::invalid_value;
  }
  if (state.config.back_with_host_memory) {
    detail::host_release_range(address, size);
  } else {
    target.addresses.give_back(address);
  }
  target.reservations.erase(reservation);
  return driver_status::success;
}

driver_status sim_driver::mem_create(int device, std::size_t size, physical_handle* out) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::mem_create, detail::sim_call_cost_us(driver_call::mem_create, size),
                                       device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  if (out == nullptr || size == 0 || size % state.config.granularity != 0) return driver_status::invalid_value;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  // Unlike cudaMalloc, cuMemCreate does not reclaim the stream-ordered pools: the pool must trim.
  const auto shared = target.hold_shared();
  if (!state.fits(target, size)) return driver_status::out_of_memory;
  int memfd = -1;
  if (state.config.back_with_host_memory) {
    memfd = detail::host_create_memory(size);
    if (memfd < 0) return driver_status::out_of_memory;
  }
  const physical_handle handle = state.next_handle++;
  target.handles.emplace(handle, detail::sim_handle{size, 0, false, memfd});
  target.handle_bytes += size;
  target.publish();
  *out = handle;
  return driver_status::success;
}

driver_status sim_driver::mem_release(int device, physical_handle handle) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  std::size_t handle_size = 0;
  if (state.valid_device(device)) {
    const auto& handles = state.devices[static_cast<std::size_t>(device)].handles;
    if (const auto found = handles.find(handle); found != handles.end()) handle_size = found->second.size;
  }
  const auto status = state.begin_call(driver_call::mem_release, detail::sim_call_cost_us(driver_call::mem_release, handle_size),
                                       device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const auto found = target.handles.find(handle);
  if (found == target.handles.end() || found->second.released) return driver_status::invalid_value;
  // As in CUDA, a handle still mapped keeps its memory until its last mapping goes.
  if (found->second.mappings > 0) {
    found->second.released = true;
  } else {
    destroy_handle(target, found);
  }
  return driver_status::success;
}

// An exported handle is a memory file: with host backing the handle's own (a process that imports
// it maps the same bytes), else a sparse one of the handle's size that stands for it. Imports
// take any memory file of a granularity multiple, from this process or another.
driver_status sim_driver::mem_export(int device, physical_handle handle, int* fd) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::mem_export, detail::sim_call_cost_us(driver_call::mem_export, 0),
                                       device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  if (fd == nullptr) return driver_status::invalid_value;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const auto found = target.handles.find(handle);
  if (found == target.handles.end() || found->second.released) return driver_status::invalid_value;
  const int exported = found->second.memfd >= 0 ? detail::host_share_memory(found->second.memfd)
                                                : detail::host_create_memory(found->second.size);
  if (exported < 0) return driver_status::error;
  *fd = exported;
  return driver_status::success;
}

driver_status sim_driver::mem_import(int device, int fd, physical_handle* out) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::mem_import, detail::sim_call_cost_us(driver_call::mem_import, 0),
                                       device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  if (out == nullptr || fd < 0) return driver_status::invalid_value;
  const std::size_t size = detail::host_memory_size(fd);
  if (size == 0 || size % state.config.granularity != 0) return driver_status::invalid_value;
  const int memfd = detail::host_share_memory(fd);
  if (memfd < 0) return driver_status::error;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const physical_handle handle = state.next_handle++;
  target.handles.emplace(handle, detail::sim_handle{size, 0, false, memfd, true});
  *out = handle;
  return driver_status::success;
}

driver_status sim_driver::mem_map(int device, device_address address, std::size_t size, physical_handle handle) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  auto status = state.begin_call(driver_call::mem_map, detail::sim_call_cost_us(driver_call::mem_map, size), device,
                                 detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const auto found = target.handles.find(handle);
  // A handle is mapped whole (cuMemMap refuses an offset), at a granule-aligned address, inside one
  // reservation, over nothing already mapped.
  if (found == target.handles.end() || found->second.released || found->second.size != size ||
      address % state.config.granularity != 0) {
    return driver_status::invalid_value;
  }
  const auto reservation = reservation_holding(target, address, size);
  if (reservation == target.reservations.end() || overlaps_a_mapping(target, address, size)) {
    return driver_status::invalid_value;
  }
  // cuMemSetAccess follows: counted as its own call; when it fails, the map is undone and the
  // whole mem_map fails, so a failed mem_map never leaves anything mapped.
  status = state.begin_call(driver_call::mem_set_access, detail::sim_call_cost_us(driver_call::mem_set_access, size),
                            device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  if (state.config.back_with_host_memory && !detail::host_map(address, size, found->second.memfd)) {
    return driver_status::error;
  }
  target.mappings.emplace(address, sim_mapping{size, handle, reservation->first, {device}});
  found->second.mappings += 1;
  reservation->second.mappings += 1;
  target.mapped_bytes += size;
  return driver_status::success;
}

driver_status sim_driver::mem_set_access(int device, device_address address, std::size_t size, int peer_device) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const double cost = per_handle_cost_over(state, driver_call::mem_set_access, device, address, size);
  const auto status = state.begin_call(driver_call::mem_set_access, cost, device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  if (!state.valid_device(peer_device)) return driver_status::invalid_value;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const auto run = whole_mappings_covering(target, address, size);
  if (run.empty()) return driver_status::invalid_value;
  for (const auto& mapping : run) {
    auto& access = mapping->second.access;
    if (std::find(access.begin(), access.end(), peer_device) == access.end()) access.push_back(peer_device);
  }
  return driver_status::success;
}

driver_status sim_driver::mem_unmap(int device, device_address address, std::size_t size) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const double cost = per_handle_cost_over(state, driver_call::mem_unmap, device, address, size);
  const auto status = state.begin_call(driver_call::mem_unmap, cost, device, detail::call_needs::virtual_memory);
  if (status != driver_status::success) return status;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const auto run = whole_mappings_covering(target, address, size);
  if (run.empty()) return driver_status::invalid_value;
  // cuMemUnmap does not wait for the GPU: unmapping what queued work still touches is the pool's
  // bug, counted here (and the unmap still happens, as it would on the device).
  if (state.queued_work_touches(target, address, size)) state.unsafe_unmaps += 1;
  if (state.config.back_with_host_memory) detail::host_unmap(address, size);
  for (const auto& mapping : run) {
    const auto handle = target.handles.find(mapping->second.handle);
    handle->second.mappings -= 1;
    target.reservations.at(mapping->second.reservation).mappings -= 1;
    target.mapped_bytes -= mapping->second.size;
    if (handle->second.released && handle->second.mappings == 0) destroy_handle(target, handle);
    target.mappings.erase(mapping);
  }
  return driver_status::success;
}

driver_status sim_driver::mem_alloc(int device, std::size_t size, device_address* out) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::mem_alloc, detail::sim_call_cost_us(driver_call::mem_alloc, size),
                                       device, detail::call_needs::context);
  if (status != driver_status::success) return status;
  if (out == nullptr || size == 0 || size + detail::cuda_malloc_page < size) return driver_status::invalid_value;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  if (detail::cuda_malloc_shares_pages(size)) {
    const std::size_t per_page = detail::cuda_malloc_per_page(size);
    std::set<device_address>& open = target.open_shared_pages[per_page];
    if (open.empty()) {
      const auto page = new_pages(state, target, detail::cuda_malloc_page);
      if (!page) return driver_status::out_of_memory;
      detail::sim_shared_page shared;
      shared.per_page = per_page;
      // The slots lie at multiples of 512 B: floor(2 MiB / per_page) rounded down to 512 is at
      // least the rounded size, since per_page = floor(2 MiB / rounded size).
      shared.stride = detail::cuda_malloc_page / per_page / detail::cuda_malloc_alignment * detail::cuda_malloc_alignment;
      shared.free_slots.resize(per_page);
      for (std::size_t i = 0; i < per_page; ++i) shared.free_slots[i] = static_cast<std::uint32_t>(per_page - 1 - i);
      shared.host_bytes = page->host_bytes;
      target.shared_pages.emplace(page->address, std::move(shared));
      open.insert(page->address);
    }
    const device_address page = *open.begin();
    detail::sim_shared_page& shared = target.shared_pages.at(page);
    const std::uint32_t slot = shared.free_slots.back();
    shared.free_slots.pop_back();
    if (shared.free_slots.empty()) open.erase(page);
    const device_address address = page + slot * shared.stride;
    target.allocations.emplace(address, detail::sim_allocation{size, 0, 0, page});
    *out = address;
    return driver_status::success;
  }
  const auto pages = new_pages(state, target, detail::cuda_malloc_whole_pages(size));
  if (!pages) return driver_status::out_of_memory;
  target.allocations.emplace(pages->address,
                             detail::sim_allocation{size, detail::cuda_malloc_whole_pages(size), pages->host_bytes, 0});
  *out = pages->address;
  return driver_status::success;
}

driver_status sim_driver::mem_free(int device, device_address address) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  std::size_t allocation_size = 0;
  if (state.valid_device(device)) {
    const auto& allocations = state.devices[static_cast<std::size_t>(device)].allocations;
    if (const auto found = allocations.find(address); found != allocations.end()) allocation_size = found->second.size;
  }
  const auto status = state.begin_call(driver_call::mem_free, detail::sim_call_cost_us(driver_call::mem_free, allocation_size),
                                       device, detail::call_needs::context);
  if (status != driver_status::success) return status;
  sim_device& target = state.devices[static_cast<std::size_t>(device)];
  const auto found = target.allocations.find(address);
  if (found == target.allocations.end()) return driver_status::invalid_value;
  // cuMemFree was measured to wait for all queued work of the device, even unrelated work.
  state.now = std::max(state.now, target.busy_until);
  const detail::sim_allocation allocation = found->second;
  target.allocations.erase(found);
  if (allocation.page == 0) {
    give_back_pages(state, target, address, allocation.held, allocation.host_bytes);
    return driver_status::success;
  }
  // A slot of a shared page: the page goes back with its last allocation.
  const auto page = target.shared_pages.find(allocation.page);
  detail::sim_shared_page& shared = page->second;
  shared.free_slots.push_back(static_cast<std::uint32_t>((address - allocation.page) / shared.stride));
  std::set<device_address>& open = target.open_shared_pages[shared.per_page];
  if (shared.free_slots.size() < shared.per_page) {
    open.insert(allocation.page);
    return driver_status::success;
  }
  open.erase(allocation.page);
  give_back_pages(state, target, allocation.page, detail::cuda_malloc_page, shared.host_bytes);
  target.shared_pages.erase(page);
  return driver_status::success;
}

}  // namespace tidepool
