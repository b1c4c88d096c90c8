// Fault injection, capacity limits, and the simulated CUDA async pool (park, trim, and cudaMalloc
// reclaiming it by itself while cuMemCreate does not).
#include <gtest/gtest.h>

#include "device/sim_test_support.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::test {
namespace {

TEST(SimFaults, TheNthNextCallOfAKindFailsAndDoesNothing) {
  sim_driver sim(small_machine());
  sim.fail_nth(driver_call::mem_create, 2);
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(0, 2 * mib, &handle), driver_status::success);
  handle = 0;
  EXPECT_EQ(sim.mem_create(0, 2 * mib, &handle), driver_status::out_of_memory);
  EXPECT_EQ(handle, 0u) << "a failed call writes nothing";
  EXPECT_EQ(sim.physical_bytes(0), 2 * mib);
  EXPECT_EQ(sim.mem_create(0, 2 * mib, &handle), driver_status::success) << "only the one call fails";
  EXPECT_EQ(sim.call_counts().of(driver_call::mem_create), 3u) << "failed calls are counted";
}

TEST(SimFaults, InjectedStatusIsReturned) {
  sim_driver sim(small_machine());
  sim.fail_nth(driver_call::stream_create, 1, driver_status::error);
  stream_t stream = nullptr;
  EXPECT_EQ(sim.stream_create(0, &stream), driver_status::error);
  EXPECT_EQ(stream, nullptr);
  EXPECT_EQ(sim.stream_create(0, &stream), driver_status::success);
}

TEST(SimFaults, CountsFromTheInjectionNotFromTheStart) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 4 * mib);
  const physical_handle handle = create(sim, 0, 2 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::success);
  ASSERT_EQ(sim.mem_unmap(0, base, 2 * mib), driver_status::success);
  sim.reset_call_counts();
  sim.fail_nth(driver_call::mem_map, 1);
  EXPECT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::out_of_memory);
  EXPECT_EQ(sim.mapped_bytes(0), 0u);
  EXPECT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::success);
}

TEST(SimFaults, AFailedSetAccessLeavesNothingMapped) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 4 * mib);
  const physical_handle handle = create(sim, 0, 2 * mib);
  sim.fail_nth(driver_call::mem_set_access, 1, driver_status::error);
  EXPECT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::error);
  EXPECT_EQ(sim.mapped_bytes(0), 0u);
  EXPECT_EQ(sim.call_counts().of(driver_call::mem_map), 1u);
  EXPECT_EQ(sim.call_counts().of(driver_call::mem_set_access), 1u);
  EXPECT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::success);
  EXPECT_EQ(sim.mapped_bytes(0), 2 * mib);
}

TEST(SimFaults, BadInjectionsAreRefused) {
  sim_driver sim(small_machine());
  EXPECT_THROW(sim.fail_nth(driver_call::mem_create, 0), error);
  EXPECT_THROW(sim.fail_nth(driver_call::count_, 1), error);
  EXPECT_THROW(sim.fail_nth(driver_call::mem_create, 1, driver_status::success), error);
}

TEST(SimFaults, CapacityLimitBoundsHandlesAndPlainAllocations) {
  sim_driver sim(small_machine(2));
  sim.set_capacity_limit(0, 8 * mib);
  create(sim, 0, 4 * mib);
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(0, 6 * mib, &handle), driver_status::out_of_memory);
  device_address address = 0;
  EXPECT_EQ(sim.mem_alloc(0, 4 * mib + 1, &address), driver_status::out_of_memory);
  EXPECT_EQ(sim.mem_alloc(0, 4 * mib, &address), driver_status::success);
  EXPECT_EQ(sim.physical_bytes(0), 8 * mib);
  EXPECT_EQ(sim.mem_create(1, 64 * mib, &handle), driver_status::success) << "the limit is per device";
  sim.set_capacity_limit(0, static_cast<std::size_t>(-1));
  EXPECT_EQ(sim.mem_create(0, 6 * mib, &handle), driver_status::success);
}

TEST(SimFaults, CreateFailsPastCapacity) {
  sim_driver sim(small_machine(1, 64 * mib));
  create(sim, 0, 60 * mib);
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(0, 6 * mib, &handle), driver_status::out_of_memory);
  EXPECT_EQ(sim.mem_create(0, 4 * mib, &handle), driver_status::success);
  EXPECT_EQ(sim.memory_info(0).free, 0u);
}

TEST(SimAsyncPool, ParkedBytesCountAsOursUntilTrimmed) {
  sim_driver sim(small_machine(1, 64 * mib));
  sim.park_in_async_pool(0, 40 * mib);
  EXPECT_EQ(sim.async_pool_bytes(0), 40 * mib);
  EXPECT_EQ(sim.physical_bytes(0), 40 * mib);
  EXPECT_EQ(sim.memory_info(0).process_used, 40 * mib);
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(0, 32 * mib, &handle), driver_status::out_of_memory) << "cuMemCreate does not reclaim";
  EXPECT_EQ(sim.async_pool_bytes(0), 40 * mib);
  EXPECT_EQ(sim.trim_async_pools(0), 40 * mib);
  EXPECT_EQ(sim.async_pool_bytes(0), 0u);
  EXPECT_EQ(sim.trim_async_pools(0), 0u);
  EXPECT_EQ(sim.call_counts().of(driver_call::async_pool_trim), 2u);
  EXPECT_EQ(sim.mem_create(0, 32 * mib, &handle), driver_status::success);
  EXPECT_THROW(sim.park_in_async_pool(0, 64 * mib), error) << "more than is free";
}

TEST(SimAsyncPool, PlainAllocationReclaimsTheAsyncPoolByItself) {
  sim_driver sim(small_machine(1, 64 * mib));
  sim.park_in_async_pool(0, 40 * mib);
  device_address small = 0;
  ASSERT_EQ(sim.mem_alloc(0, 8 * mib, &small), driver_status::success);
  EXPECT_EQ(sim.async_pool_bytes(0), 40 * mib) << "it fitted: nothing reclaimed";
  device_address large = 0;
  ASSERT_EQ(sim.mem_alloc(0, 32 * mib, &large), driver_status::success);
  EXPECT_EQ(sim.async_pool_bytes(0), 0u);
  EXPECT_EQ(sim.physical_bytes(0), 40 * mib);
}

TEST(SimAsyncPool, TrimFaultHandsNothingBack) {
  sim_driver sim(small_machine());
  sim.park_in_async_pool(0, 4 * mib);
  sim.fail_nth(driver_call::async_pool_trim, 1, driver_status::error);
  EXPECT_EQ(sim.trim_async_pools(0), 0u);
  EXPECT_EQ(sim.async_pool_bytes(0), 4 * mib);
}

}  // namespace
}  // namespace tidepool::test
