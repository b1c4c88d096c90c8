// memory_resource_gpu_test.cpp: tidepool::memory_resource on a real GPU with real streams, through
// both spellings of the interface and CCCL's type-erased reference: memory written on one stream
// through the resource reads back; memory freed stream-ordered is not handed to another stream
// while the work queued before the free still runs. Skipped where no GPU is present.
#include "tidepool/memory_resource.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "gpu_test.hpp"
#include "tidepool/pool.hpp"

namespace tidepool {
namespace {

using gpu_test::check;
using gpu_test::cu;
using gpu_test::first_mismatch;

constexpr std::size_t MiB = std::size_t{1} << 20;

CUdeviceptr dev(void* p) { return reinterpret_cast<CUdeviceptr>(p); }
CUstream raw(stream_t s) { return reinterpret_cast<CUstream>(s); }

#if CCCL_VERSION >= 3001000
using any_ref = cuda::mr::resource_ref<cuda::mr::device_accessible>;
#else
using any_ref = cuda::mr::async_resource_ref<cuda::mr::device_accessible>;
#endif

TEST(MemoryResourceOnGpu, BothFormsAndTheReferenceGiveWritableDeviceMemory) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  stream_t s = nullptr;
  ASSERT_EQ(drv->stream_create(0, &s), driver_status::success);
  {
    pool p(drv, 0);
    memory_resource mr{p};
    any_ref r{mr};
    const std::size_t bytes = 64 * MiB;
    void* a = mr.allocate(cuda::stream_ref{s}, bytes);           // RMM 26.06 / CCCL 3.1
    void* b = mr.allocate_async(bytes, 256, cuda::stream_ref{s}); // CCCL 3.0
    void* c = mr.allocate_sync(bytes);
#if CCCL_VERSION >= 3001000
    void* d = r.allocate(cuda::stream_ref{s}, bytes, 256);
#else
    void* d = r.allocate_async(bytes, 256, cuda::stream_ref{s});
#endif
    check(cu().cuMemsetD8Async(dev(a), 0xa1, bytes, raw(s)), "memset a");
    check(cu().cuMemsetD8Async(dev(b), 0xb2, bytes, raw(s)), "memset b");
    check(cu().cuMemsetD8(dev(c), 0xc3, bytes), "memset c");
    check(cu().cuMemsetD8Async(dev(d), 0xd4, bytes, raw(s)), "memset d");
    check(cu().cuStreamSynchronize(raw(s)), "cuStreamSynchronize");
    EXPECT_EQ(first_mismatch(dev(a), bytes, 0xa1), -1);
    EXPECT_EQ(first_mismatch(dev(b), bytes, 0xb2), -1);
    EXPECT_EQ(first_mismatch(dev(c), bytes, 0xc3), -1);
    EXPECT_EQ(first_mismatch(dev(d), bytes, 0xd4), -1);
    mr.deallocate(cuda::stream_ref{s}, a, bytes);
    mr.deallocate_async(b, bytes, 256, cuda::stream_ref{s});
    mr.deallocate_sync(c, bytes);
#if CCCL_VERSION >= 3001000
    r.deallocate(cuda::stream_ref{s}, d, bytes, 256);
#else
    r.deallocate_async(d, bytes, 256, cuda::stream_ref{s});
#endif
    EXPECT_EQ(p.stats().live_allocations, 0u);
    p.release();
  }
  EXPECT_EQ(drv->stream_destroy(0, s), driver_status::success);
}

TEST(MemoryResourceOnGpu, MemoryFreedOnAStreamWaitsForItsWorkBeforeAnotherStreamGetsIt) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  gpu_test::stream_occupier busy;
  stream_t s = nullptr;
  stream_t other = nullptr;
  ASSERT_EQ(drv->stream_create(0, &s), driver_status::success);
  ASSERT_EQ(drv->stream_create(0, &other), driver_status::success);
  {
    pool p(drv, 0);
    memory_resource mr{p};
    const std::size_t bytes = 256 * MiB;
    CUdeviceptr witness = 0;
    check(cu().cuMemAlloc(&witness, bytes), "cuMemAlloc");
    void* block = mr.allocate(cuda::stream_ref{s}, bytes);
    busy.occupy(raw(s), 300);  // the copy below runs after ~300 ms
    check(cu().cuMemsetD8Async(dev(block), 0x7e, bytes, raw(s)), "memset block");
    check(cu().cuMemcpyDtoDAsync(witness, dev(block), bytes, raw(s)), "copy block to witness");
    mr.deallocate(cuda::stream_ref{s}, block, bytes);  // stream-ordered: after the copy
    const bool busy_at_free = cu().cuStreamQuery(raw(s)) == CUDA_ERROR_NOT_READY;
    // Another stream asks for the same size at once: it must not get memory the copy still reads,
    // or its memset would reach the witness.
    void* elsewhere = mr.allocate_async(bytes, 256, cuda::stream_ref{other});
    check(cu().cuMemsetD8Async(dev(elsewhere), 0x11, bytes, raw(other)), "memset elsewhere");
    check(cu().cuStreamSynchronize(raw(other)), "sync other");
    check(cu().cuStreamSynchronize(raw(s)), "sync s");
    std::printf("[figure] memory_resource: stream busy at the free: %s (%s); same block given to the other stream: %s\n",
                busy_at_free ? "yes" : "no", busy.method(), elsewhere == block ? "yes" : "no");
    EXPECT_TRUE(busy_at_free) << "the test needs the stream busy when the block is freed";
    EXPECT_EQ(first_mismatch(witness, bytes, 0x7e), -1) << "another stream wrote memory queued work still read";
    EXPECT_EQ(first_mismatch(dev(elsewhere), bytes, 0x11), -1);
    mr.deallocate_async(elsewhere, bytes, 256, cuda::stream_ref{other});
    p.release();
    check(cu().cuMemFree(witness), "cuMemFree");
  }
  EXPECT_EQ(drv->stream_destroy(0, s), driver_status::success);
  EXPECT_EQ(drv->stream_destroy(0, other), driver_status::success);
}

}  // namespace
}  // namespace tidepool
