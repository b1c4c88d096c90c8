// The rules the simulated GPU enforces, as the CUDA driver does: aligned sizes, whole-handle maps,
// no double map, no partial unmap, known handles, valid devices, and no call on a device whose
// context this process has not opened.
#include <gtest/gtest.h>

#include "device/sim_test_support.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::test {
namespace {

TEST(SimErrors, SizesMustBeGranuleMultiples) {
  sim_driver sim(small_machine());
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(0, 3 * mib, &handle), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_create(0, 0, &handle), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_create(0, 2 * mib, nullptr), driver_status::invalid_value);
  device_address address = 0;
  EXPECT_EQ(sim.address_reserve(0, 3 * mib, 0, &address), driver_status::invalid_value);
  EXPECT_EQ(sim.address_reserve(0, 4 * mib, 1 * mib, &address), driver_status::invalid_value);
  EXPECT_EQ(sim.address_reserve(0, 0, 0, &address), driver_status::invalid_value);
  EXPECT_EQ(sim.physical_bytes(0), 0u);
}

TEST(SimErrors, MapTakesAWholeHandleAtAnAlignedAddressInsideOneReservation) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 8 * mib);
  const physical_handle handle = create(sim, 0, 4 * mib);
  EXPECT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::invalid_value) << "part of a handle";
  EXPECT_EQ(sim.mem_map(0, base + 1 * mib, 4 * mib, handle), driver_status::invalid_value) << "unaligned";
  EXPECT_EQ(sim.mem_map(0, base + 6 * mib, 4 * mib, handle), driver_status::invalid_value) << "past the reservation";
  EXPECT_EQ(sim.mem_map(0, base - 2 * mib, 4 * mib, handle), driver_status::invalid_value) << "before it";
  EXPECT_EQ(sim.mem_map(0, base, 4 * mib, handle + 100), driver_status::invalid_value) << "unknown handle";
  EXPECT_EQ(sim.mapped_bytes(0), 0u);
  ASSERT_EQ(sim.mem_map(0, base, 4 * mib, handle), driver_status::success);
  const physical_handle other = create(sim, 0, 4 * mib);
  EXPECT_EQ(sim.mem_map(0, base, 4 * mib, other), driver_status::invalid_value) << "double map";
  EXPECT_EQ(sim.mem_map(0, base + 2 * mib, 4 * mib, other), driver_status::invalid_value) << "overlap";
  EXPECT_EQ(sim.mem_map(0, base + 4 * mib, 4 * mib, other), driver_status::success);
  EXPECT_EQ(sim.mapped_bytes(0), 8 * mib);
}

TEST(SimErrors, TwoReservationsSideBySideDoNotMakeOneRange) {
  sim_driver sim(small_machine());
  const device_address first = reserve(sim, 0, 2 * mib);
  const device_address second = reserve(sim, 0, 2 * mib);
  ASSERT_EQ(second, first + 2 * mib) << "the synthetic space hands out ranges in order";
  const physical_handle handle = create(sim, 0, 4 * mib);
  EXPECT_EQ(sim.mem_map(0, first, 4 * mib, handle), driver_status::invalid_value);
}

TEST(SimErrors, UnmapMustCoverWholeContiguousMappings) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 16 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 4 * mib, create(sim, 0, 4 * mib)), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 4 * mib, 4 * mib, create(sim, 0, 4 * mib)), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 10 * mib, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  EXPECT_EQ(sim.mem_unmap(0, base, 2 * mib), driver_status::invalid_value) << "half a mapping";
  EXPECT_EQ(sim.mem_unmap(0, base + 2 * mib, 4 * mib), driver_status::invalid_value) << "two halves";
  EXPECT_EQ(sim.mem_unmap(0, base, 12 * mib), driver_status::invalid_value) << "a gap inside";
  EXPECT_EQ(sim.mem_unmap(0, base + 8 * mib, 2 * mib), driver_status::invalid_value) << "nothing mapped";
  EXPECT_EQ(sim.mapped_bytes(0), 10 * mib) << "refused unmaps change nothing";
  EXPECT_EQ(sim.mem_unmap(0, base, 8 * mib), driver_status::success);
  EXPECT_EQ(sim.mapped_bytes(0), 2 * mib);
}

TEST(SimErrors, AddressFreeNeedsTheExactReservationWithNothingMapped) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 8 * mib);
  EXPECT_EQ(sim.address_free(0, base, 4 * mib), driver_status::invalid_value);
  EXPECT_EQ(sim.address_free(0, base + 2 * mib, 6 * mib), driver_status::invalid_value);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  EXPECT_EQ(sim.address_free(0, base, 8 * mib), driver_status::invalid_value) << "still mapped";
  ASSERT_EQ(sim.mem_unmap(0, base, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.address_free(0, base, 8 * mib), driver_status::success);
  EXPECT_EQ(sim.address_free(0, base, 8 * mib), driver_status::invalid_value) << "freed twice";
}

TEST(SimErrors, HandlesBelongToTheirDevice) {
  sim_driver sim(small_machine(2));
  const physical_handle on_zero = create(sim, 0, 2 * mib);
  const device_address on_one = reserve(sim, 1, 2 * mib);
  EXPECT_EQ(sim.mem_map(1, on_one, 2 * mib, on_zero), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_release(1, on_zero), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_release(0, on_zero), driver_status::success);
}

TEST(SimErrors, EveryMemoryStreamAndEventCallFailsWithoutAContext) {
  sim_config config = small_machine(2);
  config.devices_with_context = {0};
  sim_driver sim(config);
  device_address address = 0;
  physical_handle handle = 0;
  stream_t stream = nullptr;
  event_t event = nullptr;
  EXPECT_EQ(sim.address_reserve(1, 2 * mib, 0, &address), driver_status::error);
  EXPECT_EQ(sim.address_free(1, address, 2 * mib), driver_status::error);
  EXPECT_EQ(sim.mem_create(1, 2 * mib, &handle), driver_status::error);
  EXPECT_EQ(sim.mem_release(1, handle), driver_status::error);
  EXPECT_EQ(sim.mem_map(1, address, 2 * mib, handle), driver_status::error);
  EXPECT_EQ(sim.mem_set_access(1, address, 2 * mib, 0), driver_status::error);
  EXPECT_EQ(sim.mem_unmap(1, address, 2 * mib), driver_status::error);
  EXPECT_EQ(sim.mem_alloc(1, 512, &address), driver_status::error);
  EXPECT_EQ(sim.mem_free(1, address), driver_status::error);
  EXPECT_EQ(sim.stream_create(1, &stream), driver_status::error);
  EXPECT_EQ(sim.stream_destroy(1, stream), driver_status::error);
  EXPECT_EQ(sim.event_create(1, &event), driver_status::error);
  EXPECT_EQ(sim.event_destroy(1, event), driver_status::error);
  EXPECT_EQ(sim.event_record(1, event, nullptr), driver_status::error);
  EXPECT_EQ(sim.event_query(1, event), driver_status::error);
  EXPECT_EQ(sim.event_synchronize(1, event), driver_status::error);
  EXPECT_EQ(sim.stream_wait_event(1, nullptr, event), driver_status::error);
  EXPECT_EQ(sim.stream_synchronize(1, nullptr), driver_status::error);
  EXPECT_EQ(sim.trim_async_pools(1), 0u);
  EXPECT_THROW(sim.launch(1, nullptr, 10.0), error);
  // The queries a pool may make before deciding to touch a GPU open nothing.
  EXPECT_EQ(sim.device_count(), 2);
  EXPECT_EQ(sim.granularity(1), granule);
  EXPECT_TRUE(sim.supports_virtual_memory(1));
  EXPECT_EQ(sim.memory_info(1).total, 1 * gib);
  EXPECT_TRUE(sim.stream_on_device(nullptr, 1));
  EXPECT_FALSE(sim.has_context(1));
  EXPECT_EQ(sim.physical_bytes(1), 0u);
  // Every refused call was still counted.
  EXPECT_EQ(sim.call_counts().of(driver_call::mem_create), 1u);
  EXPECT_EQ(sim.call_counts().of(driver_call::async_pool_trim), 1u);
}

TEST(SimErrors, InvalidDeviceOrdinals) {
  sim_driver sim(small_machine(2));
  physical_handle handle = 0;
  stream_t stream = nullptr;
  EXPECT_EQ(sim.mem_create(2, 2 * mib, &handle), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_create(-1, 2 * mib, &handle), driver_status::invalid_value);
  EXPECT_EQ(sim.stream_create(5, &stream), driver_status::invalid_value);
  EXPECT_EQ(sim.open_context(2), driver_status::invalid_value);
  EXPECT_FALSE(sim.has_context(2));
  EXPECT_FALSE(sim.supports_virtual_memory(-1));
  EXPECT_EQ(sim.granularity(7), 0u);
  EXPECT_FALSE(sim.stream_on_device(nullptr, 2));
  EXPECT_EQ(sim.memory_info(2).total, 0u);
  EXPECT_THROW((void)sim.physical_bytes(2), error);
  EXPECT_THROW(sim.set_capacity_limit(-1, 0), error);
  physical_handle ok = create(sim, 0, 2 * mib);
  const device_address base = reserve(sim, 0, 2 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, ok), driver_status::success);
  EXPECT_EQ(sim.mem_set_access(0, base, 2 * mib, 2), driver_status::invalid_value) << "peer out of range";
}

TEST(SimErrors, BadConfigurationsAreRefusedWithTheValue) {
  sim_config config;
  config.device_count = -1;
  EXPECT_THROW(sim_driver{config}, error);
  config = {};
  config.granularity = 0;
  EXPECT_THROW(sim_driver{config}, error);
  config = {};
  config.devices_with_context = {1};
  try {
    sim_driver sim(config);
    FAIL() << "a context on a device that does not exist was accepted";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_device);
    EXPECT_NE(std::string(e.what()).find("device 1"), std::string::npos) << e.what();
  }
}

TEST(SimErrors, WithoutVirtualMemoryTheVirtualMemoryCallsAreNotSupported) {
  sim_config config = small_machine();
  config.virtual_memory = false;
  sim_driver sim(config);
  EXPECT_FALSE(sim.supports_virtual_memory(0));
  device_address address = 0;
  physical_handle handle = 0;
  EXPECT_EQ(sim.address_reserve(0, 2 * mib, 0, &address), driver_status::not_supported);
  EXPECT_EQ(sim.mem_create(0, 2 * mib, &handle), driver_status::not_supported);
  EXPECT_EQ(sim.mem_map(0, address, 2 * mib, handle), driver_status::not_supported);
  EXPECT_EQ(sim.mem_unmap(0, address, 2 * mib), driver_status::not_supported);
  EXPECT_EQ(sim.mem_alloc(0, 4096, &address), driver_status::success) << "plain allocations still work";
}

TEST(SimErrors, PeerAccessIsRecordedPerMapping) {
  sim_driver sim(small_machine(3));
  const device_address base = reserve(sim, 0, 8 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 2 * mib, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  EXPECT_TRUE(sim.has_access(0, base + 100, 0));
  EXPECT_FALSE(sim.has_access(0, base + 100, 1));
  EXPECT_EQ(sim.mem_set_access(0, base, 1 * mib, 1), driver_status::invalid_value) << "part of a mapping";
  ASSERT_EQ(sim.mem_set_access(0, base, 4 * mib, 1), driver_status::success);
  EXPECT_TRUE(sim.has_access(0, base + 3 * mib, 1));
  EXPECT_FALSE(sim.has_access(0, base + 3 * mib, 2));
  EXPECT_FALSE(sim.has_access(0, base + 5 * mib, 0)) << "nothing mapped there";
}

}  // namespace
}  // namespace tidepool::test
