// torch_allocator.cpp: PyTorch's CUDA caching allocator called from C++ (raw_alloc /
// raw_delete), built against the libtorch of the machine's python3 (TIDEPOOL_TORCH_BENCH=ON).
// raw_alloc allocates on the runtime's current device, so each thread sets its device first
// (enter_thread); one object per device, all over the one process-wide allocator.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <mutex>

#include "compare_allocator.hpp"

namespace tidepool::bench {
namespace {

namespace caching = c10::cuda::CUDACachingAllocator;

class torch_allocator final : public compare_allocator {
 public:
  explicit torch_allocator(int device) : device_(static_cast<c10::DeviceIndex>(device)) {
    // A Python program initialises the allocator on first CUDA use; from C++ we do it here, once
    // for the process: the benchmark makes an object per device and per table, and init() is for
    // a fresh allocator, not one whose devices already hold caches.
    static std::once_flag initialised;
    std::call_once(initialised, [] { caching::init(static_cast<int>(c10::cuda::device_count())); });
  }
  [[nodiscard]] std::string name() const override { return "PyTorch caching"; }
  void enter_thread() override { c10::cuda::set_device(device_); }
  void* allocate(std::size_t bytes) override { return caching::raw_alloc(bytes); }
  void deallocate(void* ptr, std::size_t) override { caching::raw_delete(ptr); }
  void release_cache() override { caching::emptyCache(); }

 private:
  c10::DeviceIndex device_;
};

const register_allocator registered(2, [](int device) { return std::make_unique<torch_allocator>(device); });

}  // namespace
}  // namespace tidepool::bench
