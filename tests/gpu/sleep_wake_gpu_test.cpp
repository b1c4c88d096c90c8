// Sleep and wake on a real GPU (issue 13): the bytes come back at the same addresses, NVML sees
// exactly the bytes sleep returned go and come back, and sleep waits for work queued on the
// block's stream (an event, not a device-wide wait) before unmapping.
#include <gtest/gtest.h>

#include <cstdio>

#include "gpu_test.hpp"
#include "tidepool/pool.hpp"

namespace tidepool {
namespace {

using gpu_test::check;
using gpu_test::cu;
using gpu_test::first_mismatch;

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(SleepWakeOnGpu, ContentsComeBackAndNvmlSeesTheBytesGo) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  gpu_test::stream_occupier busy;
  stream_t s = nullptr;
  ASSERT_EQ(drv->stream_create(0, &s), driver_status::success);
  {
    pool p(drv, 0);
    const std::size_t start = drv->memory_info(0).process_used;
    if (start == device_memory_info::unknown_bytes) GTEST_SKIP() << "NVML absent or hides this process";
    const std::size_t big = 512 * MiB + 4096;
    void* a = p.allocate(big, s);
    void* b = p.allocate(3000, s);
    void* gone = p.allocate(64 * MiB, s);
    const auto cs = reinterpret_cast<CUstream>(s);
    // The last write to `a` is queued behind 300 ms of work: sleep must wait for it.
    busy.occupy(cs, 300);
    check(cu().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(a), 0x5a, big, cs), "cuMemsetD8Async");
    check(cu().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(b), 0xc3, 3000, cs), "cuMemsetD8Async");
    p.deallocate(gone, s);
    const std::size_t held = drv->memory_info(0).process_used;
    const auto syncs_before = drv->call_counts().of(driver_call::device_synchronize);
    const std::size_t returned = p.sleep(sleep_keep::contents);
    const std::size_t asleep = drv->memory_info(0).process_used;
    std::printf("[figure] sleep returned %zu bytes, NVML dropped %zu bytes\n", returned, held - asleep);
    // The first sleep makes the pool's copy stream, which costs the driver a little device memory
    // (2 MiB on the H200); the exact comparison is the second sleep's, below.
    EXPECT_LE(returned - (held - asleep), 4 * MiB) << "NVML sees what sleep handed back, less the copy stream";
    EXPECT_LE(asleep, start + 4 * MiB) << "what is left is the driver's own (a stream), not the pool's";
    EXPECT_EQ(drv->call_counts().of(driver_call::device_synchronize), syncs_before) << "an event, not a device-wide wait";
    p.wake();
    const std::size_t awake = drv->memory_info(0).process_used;
    EXPECT_EQ(awake - asleep, p.stats().mapped_bytes);
    EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(a), big, 0x5a), -1) << "the queued write and the copy";
    EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(b), 3000, 0xc3), -1);
    // Keep nothing: the memory is mapped again and writable.
    const std::size_t held_again = drv->memory_info(0).process_used;
    const std::size_t returned_again = p.sleep(sleep_keep::nothing);
    const std::size_t asleep_again = drv->memory_info(0).process_used;
    std::printf("[figure] second sleep returned %zu bytes, NVML dropped %zu bytes\n", returned_again,
                held_again - asleep_again);
    EXPECT_EQ(held_again - asleep_again, returned_again) << "NVML sees exactly what sleep handed back";
    p.wake();
    check(cu().cuMemsetD8(reinterpret_cast<CUdeviceptr>(a), 0x11, big), "cuMemsetD8");
    EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(a), big, 0x11), -1);
    p.deallocate(a, s);
    p.deallocate(b, s);
    (void)p.release();
  }
  EXPECT_EQ(drv->stream_destroy(0, s), driver_status::success);
}

}  // namespace
}  // namespace tidepool
