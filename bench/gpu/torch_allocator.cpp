// torch_allocator.cpp: PyTorch's CUDA caching allocator called from C++ (raw_alloc /
// raw_delete), built against the libtorch of the machine's python3 (TIDEPOOL_TORCH_BENCH=ON).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "compare_allocator.hpp"

namespace tidepool::bench {
namespace {

namespace caching = c10::cuda::CUDACachingAllocator;

class torch_allocator final : public compare_allocator {
 public:
  torch_allocator() {
    // A Python program initialises the allocator on first CUDA use; from C++ we do it here.
    caching::init(static_cast<int>(c10::cuda::device_count()));
  }
  [[nodiscard]] std::string name() const override { return "PyTorch caching"; }
  void* allocate(std::size_t bytes) override { return caching::raw_alloc(bytes); }
  void deallocate(void* ptr, std::size_t) override { caching::raw_delete(ptr); }
  void release_cache() override { caching::emptyCache(); }
};

const register_allocator registered(2, [] { return std::make_unique<torch_allocator>(); });

}  // namespace
}  // namespace tidepool::bench
