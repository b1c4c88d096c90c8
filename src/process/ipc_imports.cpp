// Memory another process exported (pool::export_allocation there), mapped into this one.
//
// Each import is a virtual range of its own, the exporter's handles imported from their file
// descriptors and mapped side by side in it, so the exported allocation appears at the same
// offset from the range's start as from its first handle's there. Imports are no pool's: their
// memory is the exporter's (the driver charges it there) and comes back to nothing here; closing
// one unmaps it, gives back the imported handles and frees the range. The device is found by its
// UUID, since CUDA_VISIBLE_DEVICES may number the GPU differently in each process.
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <numeric>

#include "process/process_state.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

namespace tidepool {
namespace {

struct imported_range {
  int device = 0;
  device_address base = 0;
  std::size_t size = 0;
  std::vector<physical_handle> handles;  // imported, in address order
  std::vector<std::size_t> handle_sizes;
  std::size_t bytes = 0;                 // the exported allocation's size
};

struct import_registry {
  std::mutex mutex;
  std::map<device_address, imported_range> by_pointer;  // the pointer handed out -> its range
};

import_registry& registry() {
  static auto* imports = new import_registry;  // never destroyed: a close may come during exit
  return *imports;
}

int device_with_uuid(driver& drv, const device_uuid_bytes& uuid) {
  for (int device = 0; device < drv.device_count(); ++device) {
    device_uuid_bytes here{};
    if (drv.device_uuid(device, &here) == driver_status::success && here == uuid) return device;
  }
  throw error(error_code::invalid_device,
              fmt::format("cannot import memory of GPU {}: this process does not see that GPU "
                          "(CUDA_VISIBLE_DEVICES?)", to_string(uuid)));
}

// Unmaps the first `mapped` handles of `r`, gives back all of its handles and frees its range.
void undo(driver& drv, const imported_range& r, std::size_t mapped) {
  device_address at = r.base;
  for (std::size_t i = 0; i < r.handles.size(); ++i) {
    if (i < mapped) (void)drv.mem_unmap(r.device, at, r.handle_sizes[i]);
    (void)drv.mem_release(r.device, r.handles[i]);
    at += r.handle_sizes[i];
  }
  if (r.base != 0) (void)drv.address_free(r.device, r.base, r.size);
}

[[noreturn]] void import_failed(const char* step, driver_status status) {
  if (status == driver_status::out_of_memory) {
    throw error(error_code::driver_failure, fmt::format("cannot import memory: {} ran out of memory", step));
  }
  throw error(status == driver_status::not_supported ? error_code::unavailable : error_code::driver_failure,
              fmt::format("cannot import memory: {} failed ({})", step, to_string(status)));
}

}  // namespace

void* import_memory(const device_uuid_bytes& device_uuid, const std::vector<int>& fds,
                    const std::vector<std::size_t>& handle_sizes, std::size_t offset, std::size_t bytes,
                    int* device) {
  const auto drv = default_driver();
  if (fds.empty() || fds.size() != handle_sizes.size()) {
    throw error(error_code::invalid_argument,
                fmt::format("cannot import memory: {} descriptors for {} handle sizes (one per handle, at least one)",
                            fds.size(), handle_sizes.size()));
  }
  imported_range r;
  r.device = device_with_uuid(*drv, device_uuid);
  if (const driver_status opened = drv->open_context(r.device); opened != driver_status::success) {
    import_failed("opening the device's context", opened);
  }
  if (!drv->supports_virtual_memory(r.device)) {
    throw error(error_code::unavailable, fmt::format("cannot import memory: device {} has no virtual memory API",
                                                     r.device));
  }
  const std::size_t granule = drv->granularity(r.device);
  for (const std::size_t size : handle_sizes) {
    if (size == 0 || size % granule != 0 || r.size + size < r.size) {
      throw error(error_code::invalid_argument,
                  fmt::format("cannot import memory: a handle of {} bytes (handles are multiples of {})", size,
                              granule));
    }
    r.size += size;
  }
  if (bytes == 0 || offset >= r.size || bytes > r.size - offset) {
    throw error(error_code::invalid_argument,
                fmt::format("cannot import memory: {} bytes at offset {} do not lie in the {} bytes of its handles",
                            bytes, offset, r.size));
  }
  r.bytes = bytes;
  r.handle_sizes = handle_sizes;
  for (const int fd : fds) {
    physical_handle handle = 0;
    if (const driver_status status = drv->mem_import(r.device, fd, &handle); status != driver_status::success) {
      undo(*drv, r, 0);
      if (status == driver_status::invalid_value) {
        throw error(error_code::invalid_argument,
                    fmt::format("cannot import memory: descriptor {} is not memory another process exported", fd));
      }
      import_failed("mem_import", status);
    }
    r.handles.push_back(handle);
  }
  if (const driver_status status = drv->address_reserve(r.device, r.size, granule, &r.base);
      status != driver_status::success) {
    r.base = 0;
    undo(*drv, r, 0);
    import_failed("address_reserve", status);
  }
  device_address at = r.base;
  for (std::size_t i = 0; i < r.handles.size(); ++i) {
    // A descriptor for a handle of another size than the exporter said is refused by the map.
    if (const driver_status status = drv->mem_map(r.device, at, r.handle_sizes[i], r.handles[i]);
        status != driver_status::success) {
      undo(*drv, r, i);
      import_failed("mem_map", status);
    }
    at += r.handle_sizes[i];
  }
  const device_address pointer = r.base + offset;
  if (device != nullptr) *device = r.device;
  std::lock_guard lock(registry().mutex);
  registry().by_pointer.emplace(pointer, std::move(r));
  return reinterpret_cast<void*>(pointer);
}

void close_imported_memory(void* ptr) {
  imported_range r;
  {
    std::lock_guard lock(registry().mutex);
    const auto found = registry().by_pointer.find(reinterpret_cast<device_address>(ptr));
    if (found == registry().by_pointer.end()) {
      throw error(error_code::invalid_pointer,
                  fmt::format("close_imported_memory: {} is not memory imported from another process "
                              "(or it was closed already)", ptr));
    }
    r = std::move(found->second);
    registry().by_pointer.erase(found);
  }
  // An unmap under a kernel still reading the memory would fault the context: wait for the
  // device (closes are rare: a received tensor's storage dying).
  const auto drv = default_driver();
  (void)drv->device_synchronize(r.device);
  undo(*drv, r, r.handles.size());
}

std::size_t imported_bytes() {
  std::lock_guard lock(registry().mutex);
  return std::accumulate(registry().by_pointer.begin(), registry().by_pointer.end(), std::size_t{0},
                         [](std::size_t sum, const auto& entry) { return sum + entry.second.size; });
}

}  // namespace tidepool
