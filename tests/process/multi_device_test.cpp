// Tests of several GPUs in one process (issue 6, on sim): one pool per device; memory of device 1
// freed from a thread working on device 0; release only on GPUs with a context, never opening
// one; available_bytes per device; peer access granted only where asked.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "process/process_fixture.hpp"

namespace tidepool::testing {
namespace {

using MultiDevice = process_test;

TEST_F(MultiDevice, OnePoolPerDeviceEachHoldingItsOwnMemory) {
  auto& sim = use_small_sim(3);
  void* on0 = device_pool(0).allocate(8 * MiB);
  void* on2 = device_pool(2).allocate(16 * MiB);
  EXPECT_NE(&device_pool(0), &device_pool(2));
  EXPECT_TRUE(device_pool(0).owns(on0));
  EXPECT_FALSE(device_pool(0).owns(on2));
  EXPECT_TRUE(device_pool(2).owns(on2));
  EXPECT_EQ(device_pool(0).stats().live_allocations, 1u);
  EXPECT_EQ(device_pool(2).stats().requested_bytes, 16 * MiB);
  EXPECT_GE(sim.mapped_bytes(0), 8 * MiB);
  EXPECT_GE(sim.mapped_bytes(2), 16 * MiB);
  EXPECT_EQ(sim.mapped_bytes(1), 0u);
  EXPECT_FALSE(sim.has_context(1));
  device_pool(0).deallocate(on0);
  device_pool(2).deallocate(on2);
}

TEST_F(MultiDevice, MemoryOfDevice1FreedFromAThreadWorkingOnDevice0) {
  auto& sim = use_small_sim(2);
  void* on1 = device_pool(1).allocate(32 * MiB);
  std::thread worker([&] {
    // This thread works on device 0 (its allocations go there) and frees device 1's block.
    void* own = device_pool(0).allocate(4 * MiB);
    device_pool(1).deallocate(on1);
    device_pool(0).deallocate(own);
  });
  worker.join();
  EXPECT_EQ(device_pool(1).stats().live_allocations, 0u);
  EXPECT_EQ(device_pool(1).stats().deallocations, 1u);
  EXPECT_EQ(device_pool(0).stats().deallocations, 1u);
  EXPECT_GT(release_cached_memory(), 0u);
  EXPECT_EQ(sim.mapped_bytes(1), 0u);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u);
}

TEST_F(MultiDevice, ReleaseVisitsOnlyGpusWithAContextAndOpensNone) {
  sim_config config;
  config.device_count = 4;
  config.capacity = GiB;
  config.devices_with_context = {2};  // opened by someone else in this process (a framework)
  auto& sim = use_sim(config);
  void* block = device_pool(0).allocate(64 * MiB);
  device_pool(0).deallocate(block);
  // Only a GPU with a context can have memory parked in its async pool.
  sim.park_in_async_pool(0, 4 * MiB);
  sim.park_in_async_pool(2, 4 * MiB);
  sim.reset_call_counts();
  std::set<int> hooked;
  scoped_hook hook([&](int device, std::size_t) {
    hooked.insert(device);
    return std::size_t{0};
  });
  const std::size_t pool_released_before = device_pool(0).stats().released_bytes;

  const std::size_t released = release_cached_memory();

  EXPECT_EQ(released, device_pool(0).stats().released_bytes - pool_released_before + 2 * 4 * MiB);
  EXPECT_EQ(hooked, (std::set<int>{0, 2}));
  EXPECT_EQ(sim.async_pool_bytes(0), 0u);
  EXPECT_EQ(sim.async_pool_bytes(2), 0u);
  EXPECT_EQ(sim.call_counts().of(driver_call::async_pool_trim), 2u);  // 1 and 3 never visited
  EXPECT_FALSE(sim.has_context(1));
  EXPECT_FALSE(sim.has_context(3));
  EXPECT_EQ(existing_pools()[2], nullptr);  // a context alone makes no pool
}

TEST_F(MultiDevice, AvailableBytesPerDevice) {
  auto& sim = use_small_sim(3);
  sim.set_other_processes_bytes(0, 100 * MiB);
  sim.set_other_processes_bytes(1, 300 * MiB);
  void* on2 = device_pool(2).allocate(512 * MiB);
  EXPECT_EQ(available_bytes(0), GiB - 100 * MiB);
  EXPECT_EQ(available_bytes(1), GiB - 300 * MiB);
  EXPECT_EQ(available_bytes(2), device_pool(2).available_bytes());
  EXPECT_LE(available_bytes(2), GiB - 512 * MiB);
  EXPECT_FALSE(sim.has_context(0));
  EXPECT_FALSE(sim.has_context(1));
  device_pool(2).deallocate(on2);
}

TEST_F(MultiDevice, PeerAccessGrantedOnlyWhereAsked) {
  auto& sim = use_small_sim(3);
  pool& p0 = device_pool(0);
  void* before = p0.allocate(8 * MiB);
  p0.enable_peer_access(1);
  void* after = p0.allocate(64 * MiB);  // pages mapped later get the access too
  void* on2 = device_pool(2).allocate(8 * MiB);
  for (void* ptr : {before, after}) {
    const auto address = reinterpret_cast<device_address>(ptr);
    EXPECT_TRUE(sim.has_access(0, address, 0));
    EXPECT_TRUE(sim.has_access(0, address, 1));
    EXPECT_FALSE(sim.has_access(0, address, 2));
  }
  const auto address2 = reinterpret_cast<device_address>(on2);
  EXPECT_TRUE(sim.has_access(2, address2, 2));
  EXPECT_FALSE(sim.has_access(2, address2, 0));
  EXPECT_FALSE(sim.has_access(2, address2, 1));
  p0.deallocate(before);
  p0.deallocate(after);
  device_pool(2).deallocate(on2);
}

}  // namespace
}  // namespace tidepool::testing
