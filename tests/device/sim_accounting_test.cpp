// The simulated GPU's accounting: physical, mapped, free and process-used bytes through create,
// map, unmap and release; other processes; context memory; plain allocations.
#include <gtest/gtest.h>

#include <vector>

#include "device/sim_test_support.hpp"

namespace tidepool::test {
namespace {

TEST(SimAccounting, CreateMapUnmapReleaseAreCountedExactly) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 64 * mib);
  const physical_handle a = create(sim, 0, 4 * mib);
  const physical_handle b = create(sim, 0, 8 * mib);
  EXPECT_EQ(sim.physical_bytes(0), 12 * mib);
  EXPECT_EQ(sim.mapped_bytes(0), 0u);

  ASSERT_EQ(sim.mem_map(0, base, 4 * mib, a), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 4 * mib, 8 * mib, b), driver_status::success);
  EXPECT_EQ(sim.mapped_bytes(0), 12 * mib);

  ASSERT_EQ(sim.mem_unmap(0, base, 12 * mib), driver_status::success);
  EXPECT_EQ(sim.mapped_bytes(0), 0u);
  EXPECT_EQ(sim.physical_bytes(0), 12 * mib);

  ASSERT_EQ(sim.mem_release(0, a), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 8 * mib);
  ASSERT_EQ(sim.mem_release(0, b), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 0u);
  EXPECT_EQ(sim.address_free(0, base, 64 * mib), driver_status::success);
}

TEST(SimAccounting, ReleasedHandleKeepsItsMemoryUntilTheLastMappingGoes) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 8 * mib);
  const physical_handle handle = create(sim, 0, 2 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 4 * mib, 2 * mib, handle), driver_status::success);
  ASSERT_EQ(sim.mem_release(0, handle), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 2 * mib);
  EXPECT_EQ(sim.mem_release(0, handle), driver_status::invalid_value) << "a handle is released once";
  ASSERT_EQ(sim.mem_unmap(0, base, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 2 * mib);
  ASSERT_EQ(sim.mem_unmap(0, base + 4 * mib, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 0u);
  EXPECT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::invalid_value) << "the handle is gone";
}

TEST(SimAccounting, MemoryInfoCountsOtherProcessesAgainstFreeOnly) {
  sim_config config = small_machine(2, 1 * gib);
  config.other_processes_bytes = 100 * mib;
  sim_driver sim(config);
  create(sim, 0, 10 * mib);
  device_memory_info info = sim.memory_info(0);
  EXPECT_EQ(info.total, 1 * gib);
  EXPECT_EQ(info.free, 1 * gib - 100 * mib - 10 * mib);
  EXPECT_EQ(info.process_used, 10 * mib);

  sim.set_other_processes_bytes(1, 1000 * mib);
  info = sim.memory_info(1);
  EXPECT_EQ(info.free, 24 * mib);
  EXPECT_EQ(info.process_used, 0u);
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(1, 26 * mib, &handle), driver_status::out_of_memory);
  EXPECT_EQ(sim.mem_create(1, 24 * mib, &handle), driver_status::success);
  EXPECT_EQ(sim.memory_info(1).free, 0u);

  sim.set_other_processes_bytes(1, 2 * gib);
  EXPECT_EQ(sim.memory_info(1).free, 0u) << "free never wraps below zero";
}

TEST(SimAccounting, ContextMemoryIsHeldOnceAContextIsOpen) {
  sim_config config = small_machine(3, 1 * gib);
  config.devices_with_context = {1};
  config.context_bytes = 550 * mib;
  sim_driver sim(config);
  EXPECT_FALSE(sim.has_context(0));
  EXPECT_TRUE(sim.has_context(1));
  EXPECT_EQ(sim.memory_info(0).process_used, 0u);
  EXPECT_EQ(sim.memory_info(1).process_used, 550 * mib);
  EXPECT_FALSE(sim.has_context(0)) << "memory_info opens no context";

  ASSERT_EQ(sim.open_context(0), driver_status::success);
  EXPECT_TRUE(sim.has_context(0));
  EXPECT_EQ(sim.physical_bytes(0), 550 * mib);
  ASSERT_EQ(sim.open_context(0), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 550 * mib) << "opening twice charges once";

  sim.set_other_processes_bytes(2, 600 * mib);
  EXPECT_EQ(sim.open_context(2), driver_status::out_of_memory);
  EXPECT_FALSE(sim.has_context(2));
}

TEST(SimAccounting, PlainAllocationsHoldWhatCudaMallocHoldsOnTheH200) {
  sim_driver sim(small_machine());
  device_address a = 0;
  device_address b = 0;
  ASSERT_EQ(sim.mem_alloc(0, 1000, &a), driver_status::success);
  ASSERT_EQ(sim.mem_alloc(0, 3 * mib, &b), driver_status::success);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(a % 512, 0u);
  EXPECT_EQ(b % (2 * mib), 0u);
  EXPECT_TRUE(b >= a + 2 * mib || a >= b + 4 * mib) << "plain allocations do not overlap";
  EXPECT_EQ(sim.physical_bytes(0), 2 * mib + 4 * mib) << "a 2 MiB page for 1000 B, 3 MiB in whole pages";
  EXPECT_EQ(sim.mapped_bytes(0), 0u);
  ASSERT_EQ(sim.mem_free(0, a), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 4 * mib);
  EXPECT_EQ(sim.mem_free(0, a), driver_status::invalid_value) << "double free";
  EXPECT_EQ(sim.mem_free(0, b + 512), driver_status::invalid_value) << "interior pointer";
  ASSERT_EQ(sim.mem_free(0, b), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 0u);
}

TEST(SimAccounting, SmallPlainAllocationsSharePagesUntilTheLastOneGoes) {
  sim_driver sim(small_machine());
  // 600 KiB: floor(2 MiB / 600 KiB) = 3 to a page, in slots that never overlap.
  std::vector<device_address> first_page(3);
  for (device_address& a : first_page) ASSERT_EQ(sim.mem_alloc(0, 600 * 1024, &a), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 2 * mib);
  for (std::size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(first_page[i] / (2 * mib), first_page[0] / (2 * mib)) << "one page";
    EXPECT_GE(first_page[i], first_page[i - 1] + 600 * 1024) << "slots do not overlap";
  }
  device_address fourth = 0;
  ASSERT_EQ(sim.mem_alloc(0, 600 * 1024, &fourth), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 4 * mib) << "the page was full";
  device_address tiny = 0;
  ASSERT_EQ(sim.mem_alloc(0, 512, &tiny), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 6 * mib) << "4096 to a page: not with the 600 KiB ones";
  ASSERT_EQ(sim.mem_free(0, first_page[0]), driver_status::success);
  ASSERT_EQ(sim.mem_free(0, first_page[1]), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 6 * mib) << "held while one allocation in it lives";
  ASSERT_EQ(sim.mem_free(0, first_page[2]), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 4 * mib);
  ASSERT_EQ(sim.mem_free(0, fourth), driver_status::success);
  ASSERT_EQ(sim.mem_free(0, tiny), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 0u);
  const driver_call_counts counts = sim.call_counts();
  EXPECT_EQ(counts.of(driver_call::mem_alloc), 5u);
  EXPECT_EQ(counts.of(driver_call::mem_free), 5u);
}

TEST(SimAccounting, ANewSharedPageNeedsRoomForAWholePage) {
  sim_driver sim(small_machine());
  sim.set_capacity_limit(0, 3 * mib);
  device_address big = 0;
  ASSERT_EQ(sim.mem_alloc(0, 2 * mib, &big), driver_status::success);
  device_address small = 0;
  EXPECT_EQ(sim.mem_alloc(0, 512, &small), driver_status::out_of_memory) << "1 MiB left, a page is 2 MiB";
  ASSERT_EQ(sim.mem_free(0, big), driver_status::success);
  ASSERT_EQ(sim.mem_alloc(0, 512, &small), driver_status::success);
  device_address second = 0;
  ASSERT_EQ(sim.mem_alloc(0, 512, &second), driver_status::success) << "the open page has room";
  EXPECT_EQ(sim.physical_bytes(0), 2 * mib);
}

TEST(SimAccounting, DevicesHaveDisjointAddressRegionsAndSeparateAccounts) {
  sim_driver sim(small_machine(3));
  const device_address a0 = reserve(sim, 0, 1 * gib);
  const device_address a1 = reserve(sim, 1, 1 * gib);
  const device_address a2 = reserve(sim, 2, 1 * gib);
  EXPECT_EQ(a0 >> 44, 1u);
  EXPECT_EQ(a1 >> 44, 2u);
  EXPECT_EQ(a2 >> 44, 3u);
  const device_address b0 = reserve(sim, 0, 2 * mib);
  EXPECT_TRUE(b0 >= a0 + 1 * gib || b0 + 2 * mib <= a0) << "reservations never overlap";
  create(sim, 1, 6 * mib);
  EXPECT_EQ(sim.physical_bytes(0), 0u);
  EXPECT_EQ(sim.physical_bytes(1), 6 * mib);
  EXPECT_EQ(sim.physical_bytes(2), 0u);
}

TEST(SimAccounting, FreedAddressSpaceIsReusedOnceTheRegionIsFull) {
  sim_driver sim(small_machine());
  // Two halves of the 16 TiB region; then a free and a reserve of the same size must reuse it.
  const std::size_t half = std::size_t{8} << 40;
  const device_address first = reserve(sim, 0, half);
  const device_address second = reserve(sim, 0, half);
  device_address third = 0;
  EXPECT_EQ(sim.address_reserve(0, 2 * mib, 0, &third), driver_status::out_of_memory);
  ASSERT_EQ(sim.address_free(0, first, half), driver_status::success);
  EXPECT_EQ(reserve(sim, 0, half), first);
  (void)second;
}

TEST(SimAccounting, AlignedReservationsHonourTheAlignment) {
  sim_driver sim(small_machine());
  reserve(sim, 0, 2 * mib);
  device_address aligned = 0;
  ASSERT_EQ(sim.address_reserve(0, 4 * mib, 1 * gib, &aligned), driver_status::success);
  EXPECT_EQ(aligned % gib, 0u);
}

}  // namespace
}  // namespace tidepool::test
