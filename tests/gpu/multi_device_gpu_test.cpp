// multi_device_gpu_test.cpp: issue 6's several-GPU tests (tests/process/multi_device_test.cpp on
// sim) on real GPUs: one pool per device, each holding bytes written and read back on its own
// device; memory of device 1 freed from a thread whose current context is device 0's;
// release_cached_memory() on a process that opened only device 0 never opens device 1;
// available_bytes per device; peer access granted by pool::enable_peer_access, then a copy
// through the mapping. Each test skips itself where the CUDA driver or a second GPU is missing.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/process.hpp"

/// Skips the current test unless the CUDA driver is present and sees at least two devices.
#define TIDEPOOL_REQUIRE_TWO_GPUS()                                                           \
  do {                                                                                        \
    TIDEPOOL_REQUIRE_GPU();                                                                   \
    const int tidepool_devices = tidepool::make_cuda_driver()->device_count();                \
    if (tidepool_devices < 2) GTEST_SKIP() << "needs two GPUs, found " << tidepool_devices; \
  } while (0)

namespace tidepool {
namespace {

using gpu_test::check;
using gpu_test::cu;
using gpu_test::first_mismatch;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

CUdeviceptr to_cu(const void* ptr) { return reinterpret_cast<CUdeviceptr>(ptr); }

// The primary context of `device`, opened through `drv`.
CUcontext context_of(driver& drv, int device) {
  return dynamic_cast<detail::cuda_driver&>(drv).primary_context(device);
}

// A driver entry point the shared table does not carry, looked up in libcuda.so.1 (already
// loaded by the table; these two have one ABI only); nullptr where the driver lacks it.
template <class Fn>
Fn entry_point(const char* name) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return nullptr;
  return reinterpret_cast<Fn>(dlsym(library, name));
}

// The access `device` has to the mapped page at `ptr` (CU_MEM_ACCESS_FLAGS_PROT_*).
unsigned long long access_of(const void* ptr, CUdevice device) {
  using get_access_fn = CUresult (*)(unsigned long long*, const CUmemLocation*, CUdeviceptr);
  static const auto get_access = entry_point<get_access_fn>("cuMemGetAccess");
  if (get_access == nullptr) throw std::runtime_error("libcuda.so.1 has no cuMemGetAccess");
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  unsigned long long flags = 0;
  check(get_access(&flags, &location, to_cu(ptr)), "cuMemGetAccess");
  return flags;
}

TEST(MultiDeviceOnGpu, OnePoolPerDeviceEachHoldingItsOwnBytes) {
  TIDEPOOL_REQUIRE_TWO_GPUS();
  auto drv = make_cuda_driver();
  const int devices = drv->device_count();
  std::vector<pool> pools;
  for (int d = 0; d < devices; ++d) pools.emplace_back(drv, d);
  struct block {
    int device;
    void* ptr;
    std::size_t bytes;
    std::uint8_t value;
  };
  std::vector<block> blocks;
  // Sizes from a small block to several huge ones, so every size class lands on every device.
  const std::size_t sizes[] = {512, 3 * MiB + 17, 64 * MiB, 1 * GiB + 4096};
  for (int d = 0; d < devices; ++d) {
    for (std::size_t s = 0; s < std::size(sizes); ++s) {
      const auto value = static_cast<std::uint8_t>(d * 16 + static_cast<int>(s) + 1);
      blocks.push_back({d, pools[static_cast<std::size_t>(d)].allocate(sizes[s]), sizes[s], value});
    }
  }
  for (const block& b : blocks) {
    for (int d = 0; d < devices; ++d) EXPECT_EQ(pools[static_cast<std::size_t>(d)].owns(b.ptr), d == b.device);
  }
  for (const block& b : blocks) {
    gpu_test::make_current(*drv, b.device);
    check(cu().cuMemsetD8(to_cu(b.ptr), b.value, b.bytes), "cuMemsetD8");
  }
  for (const block& b : blocks) {
    gpu_test::make_current(*drv, b.device);
    EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(b.ptr), b.bytes, b.value), -1)
        << "device " << b.device << ", block of " << b.bytes << " bytes at " << b.ptr;
  }
  // Each device's memory is held on that device: NVML sees this process on every one of them.
  for (int d = 0; d < devices; ++d) {
    const std::size_t used = drv->memory_info(d).process_used;
    if (used != device_memory_info::unknown_bytes) {
      EXPECT_GE(used, GiB + 64 * MiB) << "device " << d;
      std::printf("[figure] device %d: process holds %.1f MiB (NVML)\n", d,
                  static_cast<double>(used) / static_cast<double>(MiB));
    }
  }
  for (const block& b : blocks) pools[static_cast<std::size_t>(b.device)].deallocate(b.ptr);
  for (int d = 0; d < devices; ++d) EXPECT_EQ(pools[static_cast<std::size_t>(d)].stats().live_allocations, 0u);
}

TEST(MultiDeviceOnGpu, MemoryOfDevice1FreedFromAThreadWorkingOnDevice0) {
  TIDEPOOL_REQUIRE_TWO_GPUS();
  auto drv = make_cuda_driver();
  pool p0(drv, 0);
  pool p1(drv, 1);
  void* on1 = p1.allocate(96 * MiB);
  gpu_test::make_current(*drv, 1);
  check(cu().cuMemsetD8(to_cu(on1), 0x5a, 96 * MiB), "cuMemsetD8 on device 1");

  bool context_kept = false;
  std::thread worker([&] {
    // This thread works on device 0 (its context current, its allocations there) and frees
    // device 1's block; the free must not change which context is current here.
    gpu_test::make_current(*drv, 0);
    void* own = p0.allocate(8 * MiB);
    check(cu().cuMemsetD8(to_cu(own), 0x11, 8 * MiB), "cuMemsetD8 on device 0");
    p1.deallocate(on1);
    CUcontext current = nullptr;
    check(cu().cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    context_kept = current == context_of(*drv, 0);
    p0.deallocate(own);
  });
  worker.join();
  EXPECT_TRUE(context_kept) << "freeing device 1's memory changed the thread's current context";
  EXPECT_EQ(p1.stats().live_allocations, 0u);
  EXPECT_EQ(p1.stats().deallocations, 1u);
  EXPECT_EQ(p0.stats().deallocations, 1u);

  // The freed memory is device 1's again: reused there, and it holds what is written to it.
  void* again = p1.allocate(96 * MiB);
  gpu_test::make_current(*drv, 1);
  check(cu().cuMemsetD8(to_cu(again), 0xc3, 96 * MiB), "cuMemsetD8 on device 1");
  EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(again), 96 * MiB, 0xc3), -1);
  p1.deallocate(again);
  EXPECT_GE(p1.release(), 96 * MiB) << "device 1's pool did not get its memory back";
}

// Primary contexts stay open for the life of a process once opened (cuda_driver never releases
// them), and other tests here open device 1: so this one runs its body in a fresh process (a
// death test re-executed with only this test) that opens device 0 and nothing else.
TEST(MultiDeviceOnGpu, ReleaseOnAProcessThatOpenedOnlyDevice0LeavesDevice1WithoutAContext) {
  TIDEPOOL_REQUIRE_TWO_GPUS();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto in_fresh_process = [] {
    auto fail = [](const char* what) {
      std::fprintf(stderr, "FAILED: %s\n", what);
      std::_Exit(1);
    };
    auto drv = make_cuda_driver();
    if (drv->has_context(0) || drv->has_context(1)) fail("a context was open before the test began");
    set_default_driver(drv);
    void* block = device_pool(0).allocate(256 * MiB);
    gpu_test::make_current(*drv, 0);
    check(cu().cuMemsetD8(to_cu(block), 0x7e, 256 * MiB), "cuMemsetD8");
    device_pool(0).deallocate(block);
    if (!drv->has_context(0)) fail("device 0's pool left device 0 without a context");
    if (drv->has_context(1)) fail("device 0's pool opened device 1");
    const std::size_t device1_available = available_bytes(1);
    if (drv->has_context(1)) fail("available_bytes(1) opened device 1");
    const std::size_t released = release_cached_memory();
    if (released < 256 * MiB) fail("release_cached_memory handed back less than the 256 MiB cached");
    if (drv->has_context(1)) fail("release_cached_memory opened device 1");
    if (existing_pools().size() > 1 && existing_pools()[1] != nullptr) fail("a pool was made for device 1");
    std::fprintf(stderr, "released %zu bytes; device 1 available %zu bytes, no context\n", released,
                 device1_available);
    std::_Exit(0);
  };
  EXPECT_EXIT(in_fresh_process(), ::testing::ExitedWithCode(0), "no context");
}

TEST(MultiDeviceOnGpu, AvailableBytesPerDevice) {
  TIDEPOOL_REQUIRE_TWO_GPUS();
  auto drv = make_cuda_driver();
  pool p0(drv, 0);
  pool p1(drv, 1);
  const std::size_t before0 = p0.available_bytes();
  const std::size_t before1 = p1.available_bytes();
  ASSERT_GT(before0, 8 * GiB) << "device 0 has too little free memory for this test";
  void* big = p0.allocate(4 * GiB);
  const std::size_t after0 = p0.available_bytes();
  const std::size_t after1 = p1.available_bytes();
  std::printf("[figure] available: device 0 %.2f -> %.2f GiB, device 1 %.2f -> %.2f GiB\n",
              static_cast<double>(before0) / GiB, static_cast<double>(after0) / GiB,
              static_cast<double>(before1) / GiB, static_cast<double>(after1) / GiB);
  // 4 GiB live on device 0 leaves device 0 about 4 GiB poorer (the pool rounds to pages) and
  // device 1 as it was (within what other processes may do meanwhile).
  EXPECT_LE(after0, before0 - 4 * GiB + 64 * MiB);
  EXPECT_GE(after0 + 4 * GiB + 64 * MiB, before0);
  EXPECT_LE(after1 > before1 ? after1 - before1 : before1 - after1, 64 * MiB);
  p0.deallocate(big);
  // Freed memory is cached by device 0's pool and still counts as available there.
  EXPECT_GE(p0.available_bytes() + 64 * MiB, before0);
}

TEST(MultiDeviceOnGpu, PeerAccessThenACopyThroughTheMapping) {
  TIDEPOOL_REQUIRE_TWO_GPUS();
  auto drv = make_cuda_driver();
  CUdevice dev0 = 0;
  CUdevice dev1 = 0;
  check(cu().cuDeviceGet(&dev0, 0), "cuDeviceGet");
  check(cu().cuDeviceGet(&dev1, 1), "cuDeviceGet");
  using can_access_fn = CUresult (*)(int*, CUdevice, CUdevice);
  const auto can_access_peer = entry_point<can_access_fn>("cuDeviceCanAccessPeer");
  ASSERT_NE(can_access_peer, nullptr);
  int can = 0;
  check(can_access_peer(&can, dev1, dev0), "cuDeviceCanAccessPeer");
  if (can == 0) GTEST_SKIP() << "device 1 cannot access device 0's memory (no peer path)";

  pool p0(drv, 0);
  pool p1(drv, 1);
  constexpr std::size_t bytes = 48 * MiB;
  void* before = p0.allocate(bytes);
  EXPECT_EQ(access_of(before, dev1), static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE))
      << "device 1 could reach device 0's pages before access was asked for";
  p0.enable_peer_access(1);
  void* after = p0.allocate(256 * MiB);  // pages mapped after the call get the access too
  void* target = p1.allocate(bytes);
  for (void* ptr : {before, after}) {
    EXPECT_EQ(access_of(ptr, dev0), static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
    EXPECT_EQ(access_of(ptr, dev1), static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  }
  EXPECT_EQ(access_of(target, dev0), static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE))
      << "device 1's pool granted access nobody asked for";

  gpu_test::make_current(*drv, 0);
  check(cu().cuMemsetD8(to_cu(before), 0xa7, bytes), "cuMemsetD8 on device 0");
  check(cu().cuMemsetD8(to_cu(after), 0x3c, bytes), "cuMemsetD8 on device 0");
  check(cu().cuCtxSynchronize(), "cuCtxSynchronize on device 0");
  // Device 1 copies from device 0's pages into its own, on its own stream, through the mapping.
  gpu_test::make_current(*drv, 1);
  check(cu().cuMemsetD8(to_cu(target), 0, bytes), "cuMemsetD8 on device 1");
  check(cu().cuMemcpyDtoDAsync(to_cu(target), to_cu(before), bytes, nullptr), "cuMemcpyDtoDAsync 0 -> 1");
  check(cu().cuCtxSynchronize(), "cuCtxSynchronize on device 1");
  EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(target), bytes, 0xa7), -1);
  check(cu().cuMemcpyDtoDAsync(to_cu(target), to_cu(after), bytes, nullptr), "cuMemcpyDtoDAsync 0 -> 1");
  check(cu().cuCtxSynchronize(), "cuCtxSynchronize on device 1");
  EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(target), bytes, 0x3c), -1);

  p0.deallocate(before);
  p0.deallocate(after);
  p1.deallocate(target);
}

}  // namespace
}  // namespace tidepool
