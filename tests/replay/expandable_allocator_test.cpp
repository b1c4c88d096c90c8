// The `expandable` baseline (PyTorch with expandable segments): pages of 20 MiB (large pool) or
// 2 MiB (small pool) mapped as the segment grows, blocks placed contiguously, and release()
// unmapping the free whole pages even while the segment is in use.
#include "baseline_fixture.hpp"

namespace tidepool::replay::testing {
namespace {

TEST(ExpandableAllocator, SmallPoolGrowsInTwoMiBPages) {
  baseline b("expandable");
  const auto a = b.alloc(1000);
  EXPECT_EQ(b.held(), 2 * MiB);
  const auto c = b.alloc(1000);
  EXPECT_EQ(c, a + 1024);
  EXPECT_EQ(b.held(), 2 * MiB);
}

TEST(ExpandableAllocator, LargePoolGrowsInTwentyMiBPagesAtTheSegmentEnd) {
  baseline b("expandable");
  const auto a = b.alloc(3 * MiB);
  EXPECT_EQ(b.held(), 20 * MiB);
  const auto c = b.alloc(30 * MiB);  // the free 17 MiB at the end plus one more page
  EXPECT_EQ(c, a + 3 * MiB);
  EXPECT_EQ(b.held(), 40 * MiB);
  const auto d = b.alloc(7 * MiB);  // exactly the 7 MiB left in the second page
  EXPECT_EQ(d, c + 30 * MiB);
  EXPECT_EQ(b.held(), 40 * MiB);
}

TEST(ExpandableAllocator, ReleaseUnmapsFreeWholePagesBesideLiveBlocks) {
  baseline b("expandable");
  const auto a = b.alloc(3 * MiB);
  const auto c = b.alloc(30 * MiB);
  b.free(c, 30 * MiB);
  // Free: [3 MiB, 40 MiB). Page 0 holds `a`; page 1 is wholly free and goes back.
  EXPECT_EQ(b.allocator->release(), 20 * MiB);
  EXPECT_EQ(b.held(), 20 * MiB);
  // The range can be mapped again later.
  const auto again = b.alloc(30 * MiB);
  EXPECT_EQ(again, a + 3 * MiB);
  EXPECT_EQ(b.held(), 40 * MiB);
  b.free(again, 30 * MiB);
  b.free(a, 3 * MiB);
  EXPECT_EQ(b.allocator->release(), 40 * MiB);
  EXPECT_EQ(b.held(), 0u);
}

TEST(ExpandableAllocator, SplitsLargeBlocksWheneverHalfAKiBRemains) {
  baseline b("expandable");
  const auto a = b.alloc(12 * MiB);
  b.free(a, 12 * MiB);
  const auto whole = b.alloc(11 * MiB + 512 * KiB);
  const auto next = b.alloc(512 * KiB + 2 * MiB);  // large pool, placed right after
  EXPECT_EQ(whole, a);
  EXPECT_EQ(next, a + 11 * MiB + 512 * KiB);
}

TEST(ExpandableAllocator, CountsVirtualMemoryCallsOfEachPage) {
  baseline b("expandable");
  b.sim->reset_call_counts();
  (void)b.alloc(50 * MiB);  // three 20 MiB pages: reserve once, then create + map + access each
  const driver_call_counts counts = b.sim->call_counts();
  EXPECT_EQ(counts.of(driver_call::address_reserve), 1u);
  EXPECT_EQ(counts.of(driver_call::mem_create), 3u);
  EXPECT_EQ(counts.of(driver_call::mem_map), 3u);
  EXPECT_EQ(b.held(), 60 * MiB);
}

}  // namespace
}  // namespace tidepool::replay::testing
