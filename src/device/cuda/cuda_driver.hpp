// cuda_driver.hpp: tidepool::driver over the CUDA driver API (loaded at run time, cuda_api.hpp).
//
// Pages go through the virtual memory API (reserve, create, map + set access, unmap, release);
// plain cuMemAlloc is there for devices without it. Every call runs with the device's primary
// context current (pushed only when another one is), so a pool works from any thread, whatever
// context the program left current. The process's own memory comes from NVML.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "device/cuda/call_counter.hpp"
#include "device/cuda/cuda_api.hpp"
#include "device/cuda/nvml_process_memory.hpp"
#include "tidepool/driver.hpp"

namespace tidepool::detail {

class cuda_driver final : public driver {
 public:
  /// Binds to the loaded driver table; throws tidepool::error (unavailable) when there is no
  /// device.
  explicit cuda_driver(const cuda_api& api);
  // The primary contexts this driver retained are not released: pools may hand memory back
  // during static destruction, and a released primary context would free everything in it.
  ~cuda_driver() override = default;

  [[nodiscard]] std::string name() const override { return "cuda"; }
  [[nodiscard]] int device_count() override;
  [[nodiscard]] bool has_context(int device) override;
  driver_status open_context(int device) override;
  [[nodiscard]] bool supports_virtual_memory(int device) override;
  [[nodiscard]] std::size_t granularity(int device) override;

  driver_status address_reserve(int device, std::size_t size, std::size_t alignment,
                                device_address* out) override;
  driver_status address_free(int device, device_address address, std::size_t size) override;
  driver_status mem_create(int device, std::size_t size, physical_handle* out) override;
  driver_status mem_release(int device, physical_handle handle) override;
  driver_status mem_map(int device, device_address address, std::size_t size,
                        physical_handle handle) override;
  driver_status mem_set_access(int device, device_address address, std::size_t size,
                               int peer_device) override;
  driver_status mem_unmap(int device, device_address address, std::size_t size) override;
  driver_status mem_alloc(int device, std::size_t size, device_address* out) override;
  driver_status mem_free(int device, device_address address) override;
  [[nodiscard]] device_memory_info memory_info(int device) override;
  [[nodiscard]] std::size_t free_bytes(int device) override;
  driver_status device_uuid(int device, device_uuid_bytes* out) override;

  driver_status stream_create(int device, stream_t* out) override;
  driver_status stream_destroy(int device, stream_t stream) override;
  [[nodiscard]] bool stream_on_device(stream_t stream, int device) override;
  driver_status event_create(int device, event_t* out) override;
  driver_status event_destroy(int device, event_t event) override;
  driver_status event_record(int device, event_t event, stream_t stream) override;
  driver_status event_query(int device, event_t event) override;
  driver_status event_synchronize(int device, event_t event) override;
  driver_status stream_wait_event(int device, stream_t stream, event_t event) override;
  driver_status stream_synchronize(int device, stream_t stream) override;
  driver_status device_synchronize(int device) override;
  std::size_t trim_async_pools(int device) override;
  driver_status host_alloc(int device, std::size_t bytes, void** out) override;
  driver_status host_free(int device, void* host) override;
  driver_status copy_to_host(int device, void* destination, device_address source, std::size_t bytes,
                             stream_t stream) override;
  driver_status copy_to_device(int device, device_address destination, const void* source, std::size_t bytes,
                               stream_t stream) override;
  driver_status mem_export(int device, physical_handle handle, int* fd) override;
  driver_status mem_import(int device, int fd, physical_handle* out) override;
  driver_status ipc_open(int device, const ipc_memory_handle& handle, device_address* out) override;
  driver_status ipc_close(int device, device_address address) override;
  driver_status capture_of(int device, stream_t stream, stream_capture* out) override;
  driver_status watch_graph(int device, void* graph, graph_gone_fn gone, void* context) override;

  [[nodiscard]] driver_call_counts call_counts() const override { return counter_.snapshot(); }
  [[nodiscard]] mem_map_times last_mem_map_times() const override;

  /// The primary context of `device`, retained by open_context (nullptr until then).
  [[nodiscard]] CUcontext primary_context(int device) const;

 private:
  // What is known of one GPU; fixed at construction except the retained primary context.
  struct device_state {
    CUdevice handle = 0;
    bool virtual_memory = false;
    // Handles are made exportable as POSIX file descriptors (mem_export) while this holds; cleared
    // for good the first time the driver refuses to make one so (a container without the
    // capability, an old driver), after which handles are made as before and cannot be exported.
    std::atomic<bool> exportable{false};
    std::size_t granularity = 0;
    std::size_t total_bytes = 0;
    pci_location pci{};
    std::atomic<CUcontext> primary{nullptr};
  };

  // Free memory on a valid `device`, and its total where the query gives one (else `total` is kept).
  std::size_t free_of(int device, std::size_t& total);

  [[nodiscard]] bool valid(int device) const noexcept {
    return device >= 0 && static_cast<std::size_t>(device) < devices_.size();
  }
  device_state& state(int device) { return *devices_[static_cast<std::size_t>(device)]; }
  // The primary context of `device`, retained on first need (memory calls need a context).
  CUresult ensure_context(int device, CUcontext* out);
  // Runs `call` with `device`'s primary context current, counted as `kind` (its time also to
  // `*elapsed_us` when given).
  template <class Call>
  driver_status in_context(int device, driver_call kind, Call&& call, double* elapsed_us = nullptr);

  const cuda_api& api_;
  std::vector<std::unique_ptr<device_state>> devices_;
  std::mutex open_mutex_;  // serialises cuDevicePrimaryCtxRetain per driver
  call_counter counter_;
};

}  // namespace tidepool::detail
