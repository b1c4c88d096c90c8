// The `async` baseline (a cudaMallocAsync-like pool): 2 MiB pages mapped on first touch, kept
// while under the release threshold, trimmed by release().
#include "baseline_fixture.hpp"
#include "replay/async_allocator.hpp"

namespace tidepool::replay::testing {
namespace {

TEST(AsyncAllocator, AllocationsShareTheirPagesAndTrimFreesUntouchedOnes) {
  baseline b("async");
  const auto a = b.alloc(MiB);
  const auto c = b.alloc(MiB);
  EXPECT_EQ(c, a + MiB);
  EXPECT_EQ(b.held(), 2 * MiB);
  const auto d = b.alloc(5 * MiB);  // pages 1 to 3
  EXPECT_EQ(b.held(), 8 * MiB);
  b.free(d, 5 * MiB);
  EXPECT_EQ(b.held(), 8 * MiB);  // the threshold is "keep everything"
  b.free(a, MiB);
  EXPECT_EQ(b.allocator->release(), 6 * MiB);  // page 0 still holds c
  EXPECT_EQ(b.held(), 2 * MiB);
  b.free(c, MiB);
  EXPECT_EQ(b.allocator->release(), 2 * MiB);
  EXPECT_EQ(b.held(), 0u);
}

TEST(AsyncAllocator, AZeroReleaseThresholdTrimsOnEveryFree) {
  auto sim = std::make_shared<sim_driver>();
  ASSERT_EQ(sim->open_context(0), driver_status::success);
  async_allocator pool(sim, 0, /*release_threshold=*/0);
  const auto a = pool.allocate(3 * MiB, nullptr);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(sim->physical_bytes(0), 4 * MiB);
  pool.deallocate(*a, 3 * MiB, nullptr);
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(pool.held_bytes(), 0u);
}

TEST(AsyncAllocator, FreedMemoryIsReusedBestFit) {
  baseline b("async");
  const auto a = b.alloc(10 * MiB);
  const auto c = b.alloc(4 * MiB);
  const auto d = b.alloc(MiB);
  b.free(a, 10 * MiB);
  b.free(c, 4 * MiB);  // merges with a's range: 14 MiB free before d
  EXPECT_EQ(b.alloc(14 * MiB), a);
  EXPECT_EQ(b.held(), 16 * MiB);
  (void)d;
}

}  // namespace
}  // namespace tidepool::replay::testing
