// nvml_process_memory.hpp: this process's device memory as NVML reports it, loaded at run time.
//
// cuMemGetInfo's "used" counts every process on the GPU (a shared H200 was seen off by 15 GB), so
// the figure a pool reports as handed back comes from NVML's per-process list instead:
// nvmlDeviceGetComputeRunningProcesses_v3, the entry whose pid is ours. libnvidia-ml.so.1 is
// opened with dlopen; where it is absent every answer is "unknown".
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tidepool::detail {

/// Where a GPU sits on the PCI bus: how a CUDA device is matched with an NVML device.
struct pci_location {
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned device = 0;
  friend bool operator==(const pci_location&, const pci_location&) = default;
};

/// Total and free memory of a GPU as NVML reports it (no CUDA context needed).
struct nvml_memory {
  std::size_t total = 0;
  std::size_t free = 0;
};

/// NVML, loaded once per process. Thread safe.
class nvml_process_memory {
 public:
  /// The process's instance (NVML loaded and initialised on first use).
  static nvml_process_memory& instance();
  /// Whether libnvidia-ml.so.1 was loaded and initialised.
  [[nodiscard]] bool available() const noexcept { return available_; }
  /// Device memory used by this process (getpid()) on the GPU at `where`; nullopt when NVML is
  /// absent, withholds the figure, or does not list this process (no context there, or a PID
  /// namespace that hides our pid: the caller tells these apart by whether a context is open).
  [[nodiscard]] std::optional<std::size_t> process_used(const pci_location& where);
  /// Total and free memory of the GPU at `where`; nullopt when NVML cannot tell.
  [[nodiscard]] std::optional<nvml_memory> memory(const pci_location& where);

 private:
  nvml_process_memory();
  struct entry_points;
  // The NVML device handle of `where` (cached), or nullptr.
  void* handle_of(const pci_location& where);

  bool available_ = false;
  const entry_points* api_ = nullptr;
  std::mutex mutex_;
  std::vector<std::pair<pci_location, void*>> handles_;
};

}  // namespace tidepool::detail
