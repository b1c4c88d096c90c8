// The unsafe-unmap check: unmapping (or freeing through the last unmap) memory that queued,
// unfinished work touches is counted, and still performed, as the real driver would.
#include <gtest/gtest.h>

#include "device/sim_test_support.hpp"

namespace tidepool::test {
namespace {

struct SimSafety : ::testing::Test {
  sim_driver sim{small_machine()};
  device_address base = 0;
  stream_t stream = nullptr;

  void SetUp() override {
    base = reserve(sim, 0, 8 * mib);
    ASSERT_EQ(sim.mem_map(0, base, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
    ASSERT_EQ(sim.mem_map(0, base + 2 * mib, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
    ASSERT_EQ(sim.stream_create(0, &stream), driver_status::success);
  }
};

TEST_F(SimSafety, UnmappingMemoryThatQueuedWorkTouchesIsCounted) {
  sim.launch(0, stream, 100.0, base + 2 * mib + 4096, 512);
  ASSERT_EQ(sim.mem_unmap(0, base + 2 * mib, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.unsafe_unmap_count(), 1u);
  EXPECT_EQ(sim.mapped_bytes(0), 2 * mib) << "the unmap still happened";
}

TEST_F(SimSafety, UnmappingUntouchedOrFinishedMemoryIsSafe) {
  sim.launch(0, stream, 100.0, base, 2 * mib);
  ASSERT_EQ(sim.mem_unmap(0, base + 2 * mib, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u) << "the work touches the other mapping";
  sim.advance(100.0);
  ASSERT_EQ(sim.mem_unmap(0, base, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u) << "the work had completed";
}

TEST_F(SimSafety, WaitingForAnEventMakesTheUnmapSafe) {
  event_t done = nullptr;
  ASSERT_EQ(sim.event_create(0, &done), driver_status::success);
  sim.launch(0, stream, 100.0, base, 4 * mib);
  ASSERT_EQ(sim.event_record(0, done, stream), driver_status::success);
  EXPECT_EQ(sim.event_query(0, done), driver_status::not_ready);
  ASSERT_EQ(sim.event_synchronize(0, done), driver_status::success);
  ASSERT_EQ(sim.mem_unmap(0, base, 4 * mib), driver_status::success);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u);
}

TEST_F(SimSafety, WorkQueuedBehindOtherWorkStillCounts) {
  sim.launch(0, stream, 1000.0);                // touches nothing the pool owns
  sim.launch(0, stream, 1.0, base, 16);         // starts only at 1000
  sim.advance(500.0);
  ASSERT_EQ(sim.mem_unmap(0, base, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.unsafe_unmap_count(), 1u);
}

TEST_F(SimSafety, ReleasedHandleFreedByItsLastUnmapIsChecked) {
  // A handle released while mapped is freed by the unmap; queued work on it makes that unsafe.
  physical_handle handle = 0;
  ASSERT_EQ(sim.mem_create(0, 2 * mib, &handle), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 6 * mib, 2 * mib, handle), driver_status::success);
  ASSERT_EQ(sim.mem_release(0, handle), driver_status::success);
  sim.launch(0, nullptr, 10.0, base + 6 * mib, 2 * mib);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u) << "releasing a mapped handle frees nothing yet";
  const std::size_t before = sim.physical_bytes(0);
  ASSERT_EQ(sim.mem_unmap(0, base + 6 * mib, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.unsafe_unmap_count(), 1u);
  EXPECT_EQ(sim.physical_bytes(0), before - 2 * mib);
}

}  // namespace
}  // namespace tidepool::test
