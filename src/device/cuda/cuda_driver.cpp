// cuda_driver.cpp: the cuda driver's calls, each a thin, counted wrapper over one driver entry
// point run in the device's primary context.
#include "device/cuda/cuda_driver.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <tuple>

#include "device/cuda/cuda_status.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::detail {
namespace {

// Makes `context` current for the life of the guard, and puts back what the thread had: its own
// context, or none. A pool call must not leave the primary context current on a thread that had
// none (a later cudaSetDevice-free CUDA call there would silently run on it, and a thread meant
// to stay off the GPU would look as if it used one), so it is pushed and popped, never set.
class context_guard {
 public:
  context_guard(const cuda_api& api, CUcontext context) : api_(api) {
    CUcontext current = nullptr;
    api_.cuCtxGetCurrent(&current);
    if (current == context) return;
    pushed_ = api_.cuCtxPushCurrent(context) == CUDA_SUCCESS;
  }
  ~context_guard() {
    if (!pushed_) return;
    CUcontext popped = nullptr;
    api_.cuCtxPopCurrent(&popped);
  }
  context_guard(const context_guard&) = delete;
  context_guard& operator=(const context_guard&) = delete;

 private:
  const cuda_api& api_;
  bool pushed_ = false;
};

CUdeviceptr to_cu(device_address address) { return static_cast<CUdeviceptr>(address); }
CUstream to_cu(stream_t stream) { return reinterpret_cast<CUstream>(stream); }
CUevent to_cu(event_t event) { return reinterpret_cast<CUevent>(event); }

// The calling thread's latest mem_map: the driver that made it and what its two calls took
// (last_mem_map_times). Per thread, so pools on other threads never see each other's times.
struct latest_mem_map {
  const cuda_driver* by = nullptr;
  mem_map_times times;
};
thread_local latest_mem_map latest_map;

// Puts the calling thread's stream capture mode to relaxed for the life of the guard, and back.
// A pool's calls may come while this thread, or any thread in global mode, captures a graph (an
// allocation in the capture that grows the pool, a slow path querying events): in the default
// mode such "potentially unsafe" calls would invalidate the capture; relaxed, they are made as
// PyTorch makes its cudaMalloc in a capture. Calls that conflict with capture itself still fail.
class relaxed_capture_mode {
 public:
  explicit relaxed_capture_mode(const cuda_api& api) : api_(api) {
    if (api_.cuThreadExchangeStreamCaptureMode == nullptr) return;
    exchanged_ = api_.cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
  }
  ~relaxed_capture_mode() {
    if (exchanged_) api_.cuThreadExchangeStreamCaptureMode(&mode_);
  }
  relaxed_capture_mode(const relaxed_capture_mode&) = delete;
  relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;

 private:
  const cuda_api& api_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged_ = false;
};

// A graph's user object's destructor (watch_graph): the driver calls it on a thread of its own.
struct graph_watch_call {
  graph_gone_fn gone;
  void* context;
};
void CUDA_CB run_graph_gone(void* raw) {
  const auto* call = static_cast<graph_watch_call*>(raw);
  call->gone(call->context);
  delete call;
}

bool is_special_stream(stream_t stream) {
  const auto raw = reinterpret_cast<CUstream>(stream);
  return raw == nullptr || raw == CU_STREAM_LEGACY || raw == CU_STREAM_PER_THREAD;
}

}  // namespace

cuda_driver::cuda_driver(const cuda_api& api) : api_(api) {
  int count = 0;
  if (const CUresult result = api_.cuDeviceGetCount(&count); result != CUDA_SUCCESS || count <= 0) {
    throw error(error_code::unavailable,
                fmt::format("the CUDA driver reports no device (cuDeviceGetCount: {}, count {})",
                            cuda_error_name(result), count));
  }
  // Everything read here is a property of the device: none of these calls opens a context.
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    auto dev = std::make_unique<device_state>();
    if (api_.cuDeviceGet(&dev->handle, ordinal) != CUDA_SUCCESS) {
      throw error(error_code::unavailable, fmt::format("cuDeviceGet({}) failed", ordinal));
    }
    int vmm = 0;
    api_.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev->handle);
    dev->virtual_memory = vmm != 0;
    const CUmemAllocationProp prop = pinned_on(dev->handle);
    std::size_t granularity = 0;
    // The minimum granularity is what cuMemCreate and cuMemMap require; the recommended one is
    // also 2 MiB on Hopper (DESIGN 2a), and the pool chooses its own, larger handle sizes anyway.
    if (dev->virtual_memory &&
        api_.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS) {
      dev->granularity = granularity;
    } else {
      dev->granularity = std::size_t{2} << 20;  // cuMemAlloc segments: keep the pool's page size
    }
    int posix_fd_handles = 0;
    api_.cuDeviceGetAttribute(&posix_fd_handles, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                              dev->handle);
    dev->exportable = dev->virtual_memory && posix_fd_handles != 0 && api_.cuMemExportToShareableHandle != nullptr &&
                      api_.cuMemImportFromShareableHandle != nullptr;
    api_.cuDeviceTotalMem(&dev->total_bytes, dev->handle);
    int domain = 0;
    int bus = 0;
    int slot = 0;
    api_.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev->handle);
    api_.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev->handle);
    api_.cuDeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev->handle);
    dev->pci = pci_location{static_cast<unsigned>(domain), static_cast<unsigned>(bus), static_cast<unsigned>(slot)};
    devices_.push_back(std::move(dev));
  }
}

int cuda_driver::device_count() { return static_cast<int>(devices_.size()); }

bool cuda_driver::has_context(int device) {
  if (!valid(device)) return false;
  unsigned int flags = 0;
  int active = 0;
  // Reads the primary context's state; never creates one (DESIGN 2a: 0.04 us).
  if (api_.cuDevicePrimaryCtxGetState(state(device).handle, &flags, &active) != CUDA_SUCCESS) return false;
  return active != 0;
}

CUresult cuda_driver::ensure_context(int device, CUcontext* out) {
  device_state& dev = state(device);
  CUcontext context = dev.primary.load(std::memory_order_acquire);
  if (context == nullptr) {
    std::lock_guard lock(open_mutex_);
    context = dev.primary.load(std::memory_order_acquire);
    if (context == nullptr) {
      if (const CUresult result = api_.cuDevicePrimaryCtxRetain(&context, dev.handle); result != CUDA_SUCCESS) {
        return result;
      }
      dev.primary.store(context, std::memory_order_release);
    }
  }
  *out = context;
  return CUDA_SUCCESS;
}

driver_status cuda_driver::open_context(int device) {
  if (!valid(device)) return driver_status::invalid_value;
  CUcontext context = nullptr;
  return to_driver_status(ensure_context(device, &context));
}

CUcontext cuda_driver::primary_context(int device) const {
  if (!valid(device)) return nullptr;
  return devices_[static_cast<std::size_t>(device)]->primary.load(std::memory_order_acquire);
}

template <class Call>
driver_status cuda_driver::in_context(int device, driver_call kind, Call&& call, double* elapsed_us) {
  if (!valid(device)) return driver_status::invalid_value;
  CUcontext context = nullptr;
  if (const CUresult result = ensure_context(device, &context); result != CUDA_SUCCESS) {
    return to_driver_status(result);
  }
  const context_guard guard(api_, context);
  const relaxed_capture_mode relaxed(api_);
  return to_driver_status(counter_.timed(kind, call, elapsed_us));
}

bool cuda_driver::supports_virtual_memory(int device) { return valid(device) && state(device).virtual_memory; }

std::size_t cuda_driver::granularity(int device) { return valid(device) ? state(device).granularity : 0; }

driver_status cuda_driver::address_reserve(int device, std::size_t size, std::size_t alignment,
                                           device_address* out) {
  if (out == nullptr) return driver_status::invalid_value;
  CUdeviceptr address = 0;
  const driver_status status = in_context(device, driver_call::address_reserve, [&] {
    return api_.cuMemAddressReserve(&address, size, alignment, 0, 0);
  });
  if (status == driver_status::success) *out = static_cast<device_address>(address);
  return status;
}

driver_status cuda_driver::address_free(int device, device_address address, std::size_t size) {
  return in_context(device, driver_call::address_free,
                    [&] { return api_.cuMemAddressFree(to_cu(address), size); });
}

driver_status cuda_driver::mem_create(int device, std::size_t size, physical_handle* out) {
  if (out == nullptr || !valid(device)) return driver_status::invalid_value;
  device_state& dev = state(device);
  CUmemAllocationProp prop = pinned_on(dev.handle);
  CUmemGenericAllocationHandle handle = 0;
  CUresult result = CUDA_SUCCESS;
  const auto create = [&] {
    result = api_.cuMemCreate(&handle, size, &prop, 0);
    return result;
  };
  if (dev.exportable.load(std::memory_order_relaxed)) {
    // Exportable handles cost nothing more to make (docs/RESULTS.md, "Memory shared between
    // processes"), so every handle is made so and any allocation can be shared later.
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    const driver_status status = in_context(device, driver_call::mem_create, create);
    if (status == driver_status::success) {
      *out = static_cast<physical_handle>(handle);
      return status;
    }
    if (result != CUDA_ERROR_NOT_SUPPORTED && result != CUDA_ERROR_NOT_PERMITTED) return status;
    dev.exportable.store(false, std::memory_order_relaxed);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  }
  const driver_status status = in_context(device, driver_call::mem_create, create);
  if (status == driver_status::success) *out = static_cast<physical_handle>(handle);
  return status;
}

driver_status cuda_driver::mem_export(int device, physical_handle handle, int* fd) {
  if (fd == nullptr || !valid(device)) return driver_status::invalid_value;
  if (!state(device).exportable.load(std::memory_order_relaxed)) return driver_status::not_supported;
  int exported = -1;
  const driver_status status = in_context(device, driver_call::mem_export, [&] {
    return api_.cuMemExportToShareableHandle(&exported, static_cast<CUmemGenericAllocationHandle>(handle),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  });
  if (status == driver_status::success) *fd = exported;
  return status;
}

driver_status cuda_driver::mem_import(int device, int fd, physical_handle* out) {
  if (out == nullptr || fd < 0 || !valid(device)) return driver_status::invalid_value;
  if (api_.cuMemImportFromShareableHandle == nullptr) return driver_status::not_supported;
  CUmemGenericAllocationHandle handle = 0;
  // The driver takes the descriptor's number passed as the pointer itself.
  void* shareable = reinterpret_cast<void*>(static_cast<std::intptr_t>(fd));  // NOLINT(performance-no-int-to-ptr)
  const driver_status status = in_context(device, driver_call::mem_import, [&] {
    return api_.cuMemImportFromShareableHandle(&handle, shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  });
  if (status == driver_status::success) *out = static_cast<physical_handle>(handle);
  return status;
}

driver_status cuda_driver::ipc_open(int device, const ipc_memory_handle& handle, device_address* out) {
  if (out == nullptr || !valid(device)) return driver_status::invalid_value;
  if (api_.cuIpcOpenMemHandle == nullptr) return driver_status::not_supported;
  CUipcMemHandle cu_handle{};
  static_assert(sizeof(cu_handle.reserved) == std::tuple_size_v<ipc_memory_handle>);
  std::memcpy(cu_handle.reserved, handle.data(), handle.size());
  CUdeviceptr opened = 0;
  const driver_status status = in_context(device, driver_call::ipc_open, [&] {
    return api_.cuIpcOpenMemHandle(&opened, cu_handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  });
  if (status == driver_status::success) *out = static_cast<device_address>(opened);
  return status;
}

driver_status cuda_driver::ipc_close(int device, device_address address) {
  if (!valid(device)) return driver_status::invalid_value;
  if (api_.cuIpcCloseMemHandle == nullptr) return driver_status::not_supported;
  return in_context(device, driver_call::ipc_close, [&] { return api_.cuIpcCloseMemHandle(to_cu(address)); });
}

driver_status cuda_driver::mem_release(int device, physical_handle handle) {
  return in_context(device, driver_call::mem_release,
                    [&] { return api_.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle)); });
}

driver_status cuda_driver::mem_map(int device, device_address address, std::size_t size,
                                   physical_handle handle) {
  mem_map_times times{0.0, 0.0};
  const driver_status mapped = in_context(
      device, driver_call::mem_map,
      [&] { return api_.cuMemMap(to_cu(address), size, 0, static_cast<CUmemGenericAllocationHandle>(handle), 0); },
      &times.map_us);
  if (mapped != driver_status::success) {
    latest_map = {this, times};
    return mapped;
  }
  const CUmemAccessDesc access = read_write_on(state(device).handle);
  const driver_status granted =
      in_context(device, driver_call::mem_set_access,
                 [&] { return api_.cuMemSetAccess(to_cu(address), size, &access, 1); }, &times.set_access_us);
  latest_map = {this, times};
  if (granted != driver_status::success) {
    // Leave nothing half done: a mapping nobody may access would only leak address space.
    in_context(device, driver_call::mem_unmap, [&] { return api_.cuMemUnmap(to_cu(address), size); });
  }
  return granted;
}

mem_map_times cuda_driver::last_mem_map_times() const {
  return latest_map.by == this ? latest_map.times : mem_map_times{0.0, 0.0};
}

driver_status cuda_driver::mem_set_access(int device, device_address address, std::size_t size,
                                          int peer_device) {
  if (!valid(peer_device)) return driver_status::invalid_value;
  const CUmemAccessDesc access = read_write_on(state(peer_device).handle);
  return in_context(device, driver_call::mem_set_access,
                    [&] { return api_.cuMemSetAccess(to_cu(address), size, &access, 1); });
}

driver_status cuda_driver::mem_unmap(int device, device_address address, std::size_t size) {
  return in_context(device, driver_call::mem_unmap, [&] { return api_.cuMemUnmap(to_cu(address), size); });
}

driver_status cuda_driver::mem_alloc(int device, std::size_t size, device_address* out) {
  if (out == nullptr) return driver_status::invalid_value;
  CUdeviceptr address = 0;
  const driver_status status =
      in_context(device, driver_call::mem_alloc, [&] { return api_.cuMemAlloc(&address, size); });
  if (status == driver_status::success) *out = static_cast<device_address>(address);
  return status;
}

driver_status cuda_driver::mem_free(int device, device_address address) {
  return in_context(device, driver_call::mem_free, [&] { return api_.cuMemFree(to_cu(address)); });
}

driver_status cuda_driver::device_uuid(int device, device_uuid_bytes* out) {
  if (!valid(device) || out == nullptr) return driver_status::invalid_value;
  // Optional in the table (cuGetProcAddress gives cuDeviceGetUuid_v2 for CUDA 12.0); it needs
  // no context, so naming the ledger of a GPU opens nothing.
  if (api_.cuDeviceGetUuid == nullptr) return driver_status::not_supported;
  CUuuid uuid{};
  const CUresult result = api_.cuDeviceGetUuid(&uuid, state(device).handle);
  if (result != CUDA_SUCCESS) return to_driver_status(result);
  for (std::size_t i = 0; i < out->size(); ++i) (*out)[i] = static_cast<std::uint8_t>(uuid.bytes[i]);
  return driver_status::success;
}

std::size_t cuda_driver::free_of(int device, std::size_t& total) {
  if (has_context(device)) {
    std::size_t free = 0;
    std::size_t reported_total = 0;
    if (in_context(device, driver_call::mem_get_info, [&] { return api_.cuMemGetInfo(&free, &reported_total); }) ==
        driver_status::success) {
      total = reported_total;
      return free;
    }
    return 0;
  }
  // No context here, and none is opened just to read free memory: NVML tells without one.
  if (const auto figures = nvml_process_memory::instance().memory(state(device).pci)) return figures->free;
  return total;  // neither source: nothing of ours is there, others unknown
}

device_memory_info cuda_driver::memory_info(int device) {
  device_memory_info info;
  if (!valid(device)) return info;
  device_state& dev = state(device);
  info.total = dev.total_bytes;
  info.free = free_of(device, info.total);
  if (const auto used = nvml_process_memory::instance().process_used(dev.pci)) {
    info.process_used = *used;
  } else {
    // Not listed: without a context the process holds nothing there; with one, NVML either is
    // absent or hides our pid (another PID namespace), so the figure is unknown.
    info.process_used = has_context(device) ? device_memory_info::unknown_bytes : 0;
  }
  return info;
}

std::size_t cuda_driver::free_bytes(int device) {
  if (!valid(device)) return 0;
  std::size_t total = state(device).total_bytes;
  return free_of(device, total);
}

driver_status cuda_driver::stream_create(int device, stream_t* out) {
  if (out == nullptr) return driver_status::invalid_value;
  CUstream stream = nullptr;
  const driver_status status = in_context(device, driver_call::stream_create,
                                          [&] { return api_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING); });
  if (status == driver_status::success) *out = reinterpret_cast<stream_t>(stream);
  return status;
}

driver_status cuda_driver::stream_destroy(int device, stream_t stream) {
  if (is_special_stream(stream)) return driver_status::invalid_value;
  return in_context(device, driver_call::stream_destroy, [&] { return api_.cuStreamDestroy(to_cu(stream)); });
}

bool cuda_driver::stream_on_device(stream_t stream, int device) {
  if (!valid(device)) return false;
  if (is_special_stream(stream)) return true;
  if (api_.cuStreamGetDevice != nullptr) {
    CUdevice owner = 0;
    return api_.cuStreamGetDevice(to_cu(stream), &owner) == CUDA_SUCCESS && owner == state(device).handle;
  }
  // Drivers before CUDA 12.8: compare the stream's context with the device's primary context.
  CUcontext owner = nullptr;
  if (api_.cuStreamGetCtx(to_cu(stream), &owner) != CUDA_SUCCESS) return false;
  CUcontext primary = state(device).primary.load(std::memory_order_acquire);
  if (primary == nullptr && has_context(device) && ensure_context(device, &primary) != CUDA_SUCCESS) return false;
  return primary != nullptr && owner == primary;
}

driver_status cuda_driver::event_create(int device, event_t* out) {
  if (out == nullptr) return driver_status::invalid_value;
  CUevent event = nullptr;
  // Timing off: the pool only asks "has the work before it completed", and such events are cheaper.
  const driver_status status = in_context(device, driver_call::event_create,
                                          [&] { return api_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING); });
  if (status == driver_status::success) *out = reinterpret_cast<event_t>(event);
  return status;
}

driver_status cuda_driver::event_destroy(int device, event_t event) {
  if (event == nullptr) return driver_status::invalid_value;
  return in_context(device, driver_call::event_destroy, [&] { return api_.cuEventDestroy(to_cu(event)); });
}

driver_status cuda_driver::event_record(int device, event_t event, stream_t stream) {
  if (event == nullptr) return driver_status::invalid_value;
  return in_context(device, driver_call::event_record,
                    [&] { return api_.cuEventRecord(to_cu(event), to_cu(stream)); });
}

driver_status cuda_driver::event_query(int device, event_t event) {
  if (event == nullptr) return driver_status::invalid_value;
  return in_context(device, driver_call::event_query, [&] { return api_.cuEventQuery(to_cu(event)); });
}

driver_status cuda_driver::event_synchronize(int device, event_t event) {
  if (event == nullptr) return driver_status::invalid_value;
  return in_context(device, driver_call::event_synchronize,
                    [&] { return api_.cuEventSynchronize(to_cu(event)); });
}

driver_status cuda_driver::stream_wait_event(int device, stream_t stream, event_t event) {
  if (event == nullptr) return driver_status::invalid_value;
  return in_context(device, driver_call::stream_wait_event,
                    [&] { return api_.cuStreamWaitEvent(to_cu(stream), to_cu(event), 0); });
}

driver_status cuda_driver::stream_synchronize(int device, stream_t stream) {
  return in_context(device, driver_call::stream_synchronize,
                    [&] { return api_.cuStreamSynchronize(to_cu(stream)); });
}

driver_status cuda_driver::device_synchronize(int device) {
  return in_context(device, driver_call::device_synchronize, [&] { return api_.cuCtxSynchronize(); });
}

// Host copies for sleep and wake: pinned memory (cuMemHostAlloc, portable so any context may copy
// from it) and asynchronous copies on the caller's stream, which the caller synchronizes.
driver_status cuda_driver::host_alloc(int device, std::size_t bytes, void** out) {
  if (out == nullptr || bytes == 0) return driver_status::invalid_value;
  return in_context(device, driver_call::host_alloc,
                    [&] { return api_.cuMemHostAlloc(out, bytes, CU_MEMHOSTALLOC_PORTABLE); });
}

driver_status cuda_driver::host_free(int device, void* host) {
  return in_context(device, driver_call::host_free, [&] { return api_.cuMemFreeHost(host); });
}

driver_status cuda_driver::copy_to_host(int device, void* destination, device_address source, std::size_t bytes,
                                        stream_t stream) {
  return in_context(device, driver_call::copy_to_host,
                    [&] { return api_.cuMemcpyDtoHAsync(destination, to_cu(source), bytes, to_cu(stream)); });
}

driver_status cuda_driver::copy_to_device(int device, device_address destination, const void* source,
                                          std::size_t bytes, stream_t stream) {
  return in_context(device, driver_call::copy_to_device,
                    [&] { return api_.cuMemcpyHtoDAsync(to_cu(destination), source, bytes, to_cu(stream)); });
}

std::size_t cuda_driver::trim_async_pools(int device) {
  // Memory parked in a stream-ordered pool needs a context; without one there is nothing to trim,
  // and opening one (about half a GiB of device memory) to find that out is what this layer must
  // never do.
  if (!valid(device) || !has_context(device)) return 0;
  const CUdevice handle = state(device).handle;
  CUmemoryPool pools[2] = {nullptr, nullptr};
  if (api_.cuDeviceGetDefaultMemPool(&pools[0], handle) != CUDA_SUCCESS) pools[0] = nullptr;
  if (api_.cuDeviceGetMemPool(&pools[1], handle) != CUDA_SUCCESS || pools[1] == pools[0]) pools[1] = nullptr;
  std::size_t handed_back = 0;
  for (CUmemoryPool pool : pools) {
    if (pool == nullptr) continue;
    cuuint64_t before = 0;
    cuuint64_t after = 0;
    const driver_status status = in_context(device, driver_call::async_pool_trim, [&] {
      CUresult result = api_.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &before);
      if (result == CUDA_SUCCESS) result = api_.cuMemPoolTrimTo(pool, 0);
      if (result == CUDA_SUCCESS) result = api_.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &after);
      return result;
    });
    if (status == driver_status::success && before > after) handed_back += static_cast<std::size_t>(before - after);
  }
  return handed_back;
}

}  // namespace tidepool::detail

namespace tidepool {

std::shared_ptr<driver> make_cuda_driver() {
  const detail::cuda_api* api = detail::cuda();
  if (api == nullptr) throw error(error_code::unavailable, detail::cuda_load_failure());
  return std::make_shared<detail::cuda_driver>(*api);
}

std::string cuda_driver_unavailable_reason() {
  const detail::cuda_api* api = detail::cuda();
  if (api == nullptr) return detail::cuda_load_failure();
  int count = 0;
  if (const CUresult result = api->cuDeviceGetCount(&count); result != CUDA_SUCCESS) {
    return fmt::format("cuDeviceGetCount failed: {}", detail::cuda_error_name(result));
  }
  if (count <= 0) return "the CUDA driver reports no device";
  return {};
}

}  // namespace tidepool

namespace tidepool::detail {

driver_status cuda_driver::capture_of(int device, stream_t stream, stream_capture* out) {
  *out = stream_capture{};
  if (!valid(device)) return driver_status::invalid_value;
  // The legacy default stream cannot be captured; a driver without the query has no graphs to say.
  const auto raw = reinterpret_cast<CUstream>(stream);
  if (raw == nullptr || raw == CU_STREAM_LEGACY || api_.cuStreamGetCaptureInfo == nullptr) {
    return driver_status::success;
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  // No context is made current: the stream names its own, and this runs on every allocation of
  // a non-default stream, so it stays one call.
  const CUresult result = api_.cuStreamGetCaptureInfo(raw, &status, &id, &graph, nullptr, nullptr, nullptr);
  if (result != CUDA_SUCCESS) return to_driver_status(result);
  // An invalidated capture still ends in cuStreamEndCapture, which destroys what was built: its
  // blocks are kept like an active one's until the driver says the graph is gone (where it gives
  // no graph to watch, until the pool goes).
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return driver_status::success;
  out->active = true;
  out->id = static_cast<std::uint64_t>(id);
  out->graph = graph;
  return driver_status::success;
}

driver_status cuda_driver::watch_graph(int device, void* graph, graph_gone_fn gone, void* context) {
  if (!valid(device) || graph == nullptr || gone == nullptr) return driver_status::invalid_value;
  if (api_.cuUserObjectCreate == nullptr || api_.cuGraphRetainUserObject == nullptr ||
      api_.cuUserObjectRelease == nullptr) {
    return driver_status::not_supported;
  }
  auto* call = new graph_watch_call{gone, context};
  CUuserObject object = nullptr;
  const relaxed_capture_mode relaxed(api_);
  if (const CUresult made =
          api_.cuUserObjectCreate(&object, call, run_graph_gone, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
      made != CUDA_SUCCESS) {
    delete call;
    return to_driver_status(made);
  }
  // The graph takes the one reference; it drops it once the graph, the executable graphs made
  // from it and their launches are gone, and the destructor runs.
  if (const CUresult retained =
          api_.cuGraphRetainUserObject(static_cast<CUgraph>(graph), object, 1, CU_GRAPH_USER_OBJECT_MOVE);
      retained != CUDA_SUCCESS) {
    // Ours still: releasing it runs the destructor, which would say the graph is gone. The caller
    // is told it failed instead, so the call is taken back first.
    call->gone = [](void*) {};
    api_.cuUserObjectRelease(object, 1);
    return to_driver_status(retained);
  }
  return driver_status::success;
}

}  // namespace tidepool::detail
