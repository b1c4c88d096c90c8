// Stream-ordered reuse: a block freed on stream A is reused at once on A, reaches stream B only
// after the work queued on A before the free has completed, and record_stream() holds a block
// back until the work of every recorded stream is done. release() waits for pending frees rather
// than unmap memory under queued work.
#include <gtest/gtest.h>

#include <memory>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

class PoolStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sim->stream_create(0, &a), driver_status::success);
    ASSERT_EQ(sim->stream_create(0, &b), driver_status::success);
  }
  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p{sim, 0};
  stream_t a = nullptr;
  stream_t b = nullptr;
};

TEST_F(PoolStreams, SameStreamReusesAtOnce) {
  void* x = p.allocate(2 * MiB, a);
  sim->launch(0, a, 100.0, reinterpret_cast<device_address>(x), 2 * MiB);
  p.deallocate(x, a);
  void* y = p.allocate(2 * MiB, a);
  EXPECT_EQ(y, x) << "a block freed on a stream is reused at once on the same stream";
  p.deallocate(y, a);
}

TEST_F(PoolStreams, OtherStreamWaitsForTheEvent) {
  void* x = p.allocate(2 * MiB, a);
  const auto address = reinterpret_cast<device_address>(x);
  sim->launch(0, a, 100.0, address, 2 * MiB);
  p.deallocate(x, a);

  void* y = p.allocate(2 * MiB, b);  // A's work is still queued: must not be x
  EXPECT_NE(y, x);
  const auto y_address = reinterpret_cast<device_address>(y);
  EXPECT_TRUE(y_address + 2 * MiB <= address || address + 2 * MiB <= y_address);

  sim->advance(150.0);  // A's work is done
  void* z = p.allocate(2 * MiB, b);
  EXPECT_EQ(z, x) << "once A's event completed, B reuses the block";
  p.deallocate(y, b);
  p.deallocate(z, b);
  p.release();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST_F(PoolStreams, RecordStreamHoldsTheBlockUntilTheOtherStreamIsDone) {
  void* x = p.allocate(2 * MiB, a);
  const auto address = reinterpret_cast<device_address>(x);
  p.record_stream(x, b);
  sim->launch(0, b, 100.0, address, 2 * MiB);
  p.deallocate(x, a);  // nothing queued on A: only B's work holds it

  void* y = p.allocate(2 * MiB, a);
  EXPECT_NE(y, x) << "B still uses the block: not even A may reuse it";
  sim->advance(150.0);
  void* z = p.allocate(2 * MiB, a);
  EXPECT_EQ(z, x);
  p.deallocate(y, a);
  p.deallocate(z, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST_F(PoolStreams, ReleaseWaitsForPendingFrees) {
  void* x = p.allocate(8 * MiB, a);
  sim->launch(0, a, 1000.0, reinterpret_cast<device_address>(x), 8 * MiB);
  p.deallocate(x, a);
  const std::size_t returned = p.release();
  EXPECT_EQ(returned, 8 * MiB);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_GE(sim->now(), 1000.0) << "release() waited for A's work";
}

TEST_F(PoolStreams, FreesOfDifferentStreamsDoNotMerge) {
  // Two neighbours freed on different streams with work queued: a request for both together
  // must not get their union while either stream is busy.
  void* x = p.allocate(2 * MiB, a);
  void* y = p.allocate(2 * MiB, a);
  sim->launch(0, a, 100.0, reinterpret_cast<device_address>(x), 2 * MiB);
  sim->launch(0, b, 100.0, reinterpret_cast<device_address>(y), 2 * MiB);
  p.deallocate(x, a);
  p.deallocate(y, b);
  void* z = p.allocate(4 * MiB, a);
  const auto lo = reinterpret_cast<device_address>(std::min(x, y));
  const auto zz = reinterpret_cast<device_address>(z);
  EXPECT_TRUE(zz + 4 * MiB <= lo || lo + 4 * MiB <= zz) << "the union of two streams' frees was handed out";
  p.deallocate(z, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

}  // namespace
}  // namespace tidepool::testing
