// nvml_process_memory.cpp: NVML loaded with dlopen; only the few calls the cuda driver needs.
// nvml.h is not part of every toolkit install, so the handful of types used are declared here,
// as NVML's ABI defines them (nvmlProcessInfo_v2_t is what the _v3 process query fills).
#include "device/cuda/nvml_process_memory.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <fmt/format.h>

namespace tidepool::detail {
namespace {

using nvml_return = int;
constexpr nvml_return nvml_success = 0;
constexpr nvml_return nvml_error_insufficient_size = 7;
constexpr unsigned long long nvml_value_not_available = ~0ULL;

struct nvml_device_st;
using nvml_device = nvml_device_st*;

struct nvml_process_info {  // nvmlProcessInfo_v2_t
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct nvml_pci_info {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

struct nvml_memory_info {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

}  // namespace

struct nvml_process_memory::entry_points {
  nvml_return (*init)() = nullptr;
  nvml_return (*device_count)(unsigned int*) = nullptr;
  nvml_return (*handle_by_index)(unsigned int, nvml_device*) = nullptr;
  nvml_return (*handle_by_pci_bus_id)(const char*, nvml_device*) = nullptr;
  nvml_return (*pci_info)(nvml_device, nvml_pci_info*) = nullptr;
  nvml_return (*compute_processes)(nvml_device, unsigned int*, nvml_process_info*) = nullptr;
  nvml_return (*memory_info)(nvml_device, nvml_memory_info*) = nullptr;
};

nvml_process_memory& nvml_process_memory::instance() {
  static nvml_process_memory nvml;  // never destroyed before exit; NVML is not shut down
  return nvml;
}

nvml_process_memory::nvml_process_memory() {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return;
  static entry_points api;
  const auto bind = [library](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(library, name));
    return slot != nullptr;
  };
  const bool complete = bind(api.init, "nvmlInit_v2") && bind(api.device_count, "nvmlDeviceGetCount_v2") &&
                        bind(api.handle_by_index, "nvmlDeviceGetHandleByIndex_v2") &&
                        bind(api.handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") &&
                        bind(api.pci_info, "nvmlDeviceGetPciInfo_v3") &&
                        bind(api.compute_processes, "nvmlDeviceGetComputeRunningProcesses_v3") &&
                        bind(api.memory_info, "nvmlDeviceGetMemoryInfo");
  if (!complete || api.init() != nvml_success) return;
  api_ = &api;
  available_ = true;
}

void* nvml_process_memory::handle_of(const pci_location& where) {
  std::lock_guard lock(mutex_);
  for (const auto& [location, handle] : handles_) {
    if (location == where) return handle;
  }
  nvml_device found = nullptr;
  const std::string bus_id = fmt::format("{:08x}:{:02x}:{:02x}.0", where.domain, where.bus, where.device);
  if (api_->handle_by_pci_bus_id(bus_id.c_str(), &found) != nvml_success) {
    // Some NVML versions want another spelling of the bus id: match the numbers instead.
    found = nullptr;
    unsigned int count = 0;
    if (api_->device_count(&count) == nvml_success) {
      for (unsigned int i = 0; i < count && found == nullptr; ++i) {
        nvml_device candidate = nullptr;
        nvml_pci_info info{};
        if (api_->handle_by_index(i, &candidate) == nvml_success &&
            api_->pci_info(candidate, &info) == nvml_success && info.domain == where.domain &&
            info.bus == where.bus && info.device == where.device) {
          found = candidate;
        }
      }
    }
  }
  if (found != nullptr) handles_.emplace_back(where, found);
  return found;
}

std::optional<std::size_t> nvml_process_memory::process_used(const pci_location& where) {
  if (!available_) return std::nullopt;
  auto* device = static_cast<nvml_device>(handle_of(where));
  if (device == nullptr) return std::nullopt;
  std::vector<nvml_process_info> processes(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto count = static_cast<unsigned int>(processes.size());
    const nvml_return result = api_->compute_processes(device, &count, processes.data());
    if (result == nvml_error_insufficient_size) {
      processes.resize(count + 16);  // processes came and went: ask again with room to spare
      continue;
    }
    if (result != nvml_success) return std::nullopt;
    const auto self = static_cast<unsigned int>(getpid());
    for (unsigned int i = 0; i < count; ++i) {
      if (processes[i].pid != self) continue;
      if (processes[i].used_gpu_memory == nvml_value_not_available) return std::nullopt;
      return static_cast<std::size_t>(processes[i].used_gpu_memory);
    }
    return std::nullopt;  // not listed: no context here, or another PID namespace
  }
  return std::nullopt;
}

std::optional<nvml_memory> nvml_process_memory::memory(const pci_location& where) {
  if (!available_) return std::nullopt;
  auto* device = static_cast<nvml_device>(handle_of(where));
  nvml_memory_info info{};
  if (device == nullptr || api_->memory_info(device, &info) != nvml_success) return std::nullopt;
  return nvml_memory{static_cast<std::size_t>(info.total), static_cast<std::size_t>(info.free)};
}

}  // namespace tidepool::detail
