// Allocations another process shared with cudaIpcGetMemHandle (its cuMemAlloc memory: what
// PyTorch's own allocator sends for a CUDA tensor), opened here: so that a process whose CUDA
// memory is tidepool's can receive tensors from one that runs PyTorch's allocator, whose
// pluggable interface cannot (python/tidepool/_torch_ipc_receive.py).
//
// The driver maps a handle once per context and counts its opens; the registry counts them too,
// by pointer and device, so that a close is checked against what was opened and the device is
// known to close on.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "process/process_state.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

namespace tidepool {
namespace {

struct open_allocation {
  int device = 0;
  std::size_t opens = 0;
};

struct open_registry {
  std::mutex mutex;
  std::map<device_address, open_allocation> by_pointer;
};

open_registry& registry() {
  static auto* opens = new open_registry;  // never destroyed: a close may come during exit
  return *opens;
}

}  // namespace

void* open_cuda_ipc_memory(int device, const ipc_memory_handle& handle) {
  const auto drv = default_driver();
  detail::check_device(*drv, device);
  if (const driver_status opened = drv->open_context(device); opened != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("cannot open a CUDA IPC memory handle: device {}'s context ({})", device,
                            to_string(opened)));
  }
  device_address at = 0;
  const driver_status status = drv->ipc_open(device, handle, &at);
  if (status == driver_status::not_supported) {
    throw error(error_code::unavailable,
                fmt::format("cannot open a CUDA IPC memory handle on device {}: this driver has no cudaIpc "
                            "memory handles",
                            device));
  }
  if (status == driver_status::invalid_value) {
    throw error(error_code::invalid_argument,
                fmt::format("cannot open a CUDA IPC memory handle on device {}: the driver refuses it (not a "
                            "cudaIpcGetMemHandle of a live allocation on that GPU?)",
                            device));
  }
  if (status != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("cannot open a CUDA IPC memory handle on device {}: ipc_open failed ({})", device,
                            to_string(status)));
  }
  std::lock_guard lock(registry().mutex);
  open_allocation& entry = registry().by_pointer[at];
  entry.device = device;
  ++entry.opens;
  return reinterpret_cast<void*>(at);
}

void close_cuda_ipc_memory(void* ptr) {
  const auto at = reinterpret_cast<device_address>(ptr);
  int device = 0;
  {
    std::lock_guard lock(registry().mutex);
    const auto found = registry().by_pointer.find(at);
    if (found == registry().by_pointer.end()) {
      throw error(error_code::invalid_pointer,
                  fmt::format("close_cuda_ipc_memory: {} is not memory opened from a CUDA IPC handle (or it "
                              "was closed as often as it was opened)",
                              ptr));
    }
    device = found->second.device;
    if (--found->second.opens == 0) registry().by_pointer.erase(found);
  }
  // A kernel may still read the memory: the last close unmaps it (as close_imported_memory).
  const auto drv = default_driver();
  (void)drv->device_synchronize(device);
  if (const driver_status status = drv->ipc_close(device, at); status != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("close_cuda_ipc_memory: ipc_close of {} failed ({})", ptr, to_string(status)));
  }
}

}  // namespace tidepool
