// The stress workload of tests/core/stress_workload.hpp against the real CUDA driver (issue 10):
// 8 threads x 4 streams, 256 B to 64 MiB, a 320 MiB byte cap, the reclaim hook, handed-over frees,
// record_stream behind a kernel on another stream, streams destroyed and recreated, release() and
// stats() every few milliseconds. Every block's pattern (a word every 1/16 of it, first and last)
// is copied in at allocation and checked at its free (about 17 copies of 8 bytes each way, each a
// synchronous cuMemcpy: the copies, not the pool, set the pace). TIDEPOOL_STRESS_OPS (operations
// per thread, default 1500) and TIDEPOOL_STRESS_SECONDS (a time limit, then every check) make it
// the soak of scripts/gpu.sh's `soak` step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "core/stress_workload.hpp"
#include "gpu_test.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::gpu_test {
namespace {

class cuda_stress_backend final : public testing::stress_backend {
 public:
  explicit cuda_stress_backend(CUcontext context) : context_(context) {}
  void write(void* ptr, std::size_t bytes, std::uint64_t tag) override {
    check(cu().cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    for_each_word(bytes, stride(bytes), [&](std::size_t offset) {
      const std::uint64_t w = word(tag, offset);
      check(cu().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(ptr) + offset, &w, 8), "cuMemcpyHtoD");
    });
  }
  bool intact(void* ptr, std::size_t bytes, std::uint64_t tag) override {
    check(cu().cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    bool ok = true;
    for_each_word(bytes, stride(bytes), [&](std::size_t offset) {
      std::uint64_t w = 0;
      check(cu().cuMemcpyDtoH(&w, reinterpret_cast<CUdeviceptr>(ptr) + offset, 8), "cuMemcpyDtoH");
      ok = ok && w == word(tag, offset);
    });
    return ok;
  }
  void queue_work(stream_t stream, void*, std::size_t) override {
    check(cu().cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    std::lock_guard lock(occupier_mutex_);
    if (!occupier_) occupier_ = std::make_unique<stream_occupier>();
    occupier_->occupy(reinterpret_cast<CUstream>(stream), 0);  // a kernel of a few microseconds
  }

 private:
  static std::size_t stride(std::size_t bytes) { return std::max<std::size_t>(bytes / 16 / 8 * 8, 8); }
  CUcontext context_;
  std::mutex occupier_mutex_;
  std::unique_ptr<stream_occupier> occupier_;
};

TEST(PoolStressGpu, EightThreadsFourStreamsEach) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  make_current(*drv);
  auto& cuda = dynamic_cast<detail::cuda_driver&>(*drv);
  pool_options options;
  options.byte_cap = std::size_t{320} << 20;
  pool p(drv, 0, options);
  cuda_stress_backend backend(cuda.primary_context(0));
  const testing::stress_options so = testing::stress_options_from_environment(testing::stress_options{});
  {
    testing::stress_workload w(p, backend, so);
    const testing::stress_result r = w.run();
    testing::print_stress_result("on the GPU", so, r);
    EXPECT_EQ(r.corrupted, 0u);
    EXPECT_EQ(r.bad_errors, 0u);
    EXPECT_EQ(w.observer_errors(), 0u);
    EXPECT_LE(r.peak_live_blocks, w.live_bound());
    const pool_stats s = p.stats();
    EXPECT_EQ(s.allocations, r.allocations);
    EXPECT_EQ(s.deallocations, r.deallocations);
    EXPECT_EQ(s.live_allocations, w.live_blocks());
    EXPECT_EQ(s.requested_bytes, w.live_requested_bytes());
    EXPECT_LE(s.peak_mapped_bytes, options.byte_cap);
    EXPECT_GT(r.out_of_memory, 0u);
    EXPECT_TRUE(w.free_all());
  }
  EXPECT_EQ(p.stats().live_allocations, 0u);
  p.release();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  const device_memory_info info = drv->memory_info(0);
  std::printf("after release: pool maps %zu bytes; NVML says this process holds %zu bytes\n", p.stats().mapped_bytes,
              info.process_used);
}

}  // namespace
}  // namespace tidepool::gpu_test
