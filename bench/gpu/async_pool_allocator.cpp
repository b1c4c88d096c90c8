// async_pool_allocator.cpp: cudaMallocAsync's pool as the benchmark's baseline, through the
// driver API (cuMemAllocAsync / cuMemFreeAsync on the default memory pool), with the release
// threshold raised so the pool keeps its memory between calls, as users configure it. One per
// device: the device's default pool and a stream of its primary context (current while it is made).
#include <stdexcept>

#include "compare_allocator.hpp"
#include "gpu_support.hpp"

namespace tidepool::bench {
namespace {

using gpu_test::check;
using gpu_test::cu;

class async_pool_allocator final : public compare_allocator {
 public:
  explicit async_pool_allocator(int device) {
    CUdevice dev = 0;
    check(cu().cuDeviceGet(&dev, device), "cuDeviceGet");
    check(cu().cuDeviceGetDefaultMemPool(&pool_, dev), "cuDeviceGetDefaultMemPool");
    cuuint64_t keep = ~cuuint64_t{0};
    check(cu().cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep), "release threshold");
    check(cu().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  ~async_pool_allocator() override { cu().cuStreamDestroy(stream_); }
  [[nodiscard]] std::string name() const override { return "cudaMallocAsync"; }
  void* allocate(std::size_t bytes) override {
    CUdeviceptr p = 0;
    check(cu().cuMemAllocAsync(&p, bytes, stream_), "cuMemAllocAsync");
    return reinterpret_cast<void*>(p);
  }
  void deallocate(void* ptr, std::size_t) override {
    check(cu().cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(ptr), stream_), "cuMemFreeAsync");
  }
  void release_cache() override {
    check(cu().cuStreamSynchronize(stream_), "cuStreamSynchronize");
    check(cu().cuMemPoolTrimTo(pool_, 0), "cuMemPoolTrimTo");
  }

 private:
  CUmemoryPool pool_ = nullptr;
  CUstream stream_ = nullptr;
};

const register_allocator registered(1, [](int device) { return std::make_unique<async_pool_allocator>(device); });

}  // namespace
}  // namespace tidepool::bench
