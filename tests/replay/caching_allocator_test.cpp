// The `caching` baseline (PyTorch's default policy) on hand-made sequences whose answer follows
// from the policy: segment sizes, best fit, split thresholds, coalescing, release of whole segments.
#include "baseline_fixture.hpp"
#include "replay/torch_caching_allocator.hpp"

namespace tidepool::replay::testing {
namespace {

TEST(CachingAllocator, RoundsAndSizesSegmentsLikePyTorch) {
  EXPECT_EQ(torch_caching_allocator::round_size(1), 512u);
  EXPECT_EQ(torch_caching_allocator::round_size(513), 1024u);
  EXPECT_EQ(torch_caching_allocator::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(torch_caching_allocator::segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(torch_caching_allocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(torch_caching_allocator::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(torch_caching_allocator::segment_size(10 * MiB + 1), 12 * MiB);
}

TEST(CachingAllocator, SmallRequestsShareOneTwoMiBSegment) {
  baseline b("caching");
  const auto first = b.alloc(1000);
  const auto second = b.alloc(1000);
  EXPECT_EQ(b.held(), 2 * MiB);
  EXPECT_EQ(second, first + 1024);  // split off the same segment, next to the first
  b.free(first, 1000);
  b.free(second, 1000);
  EXPECT_EQ(b.allocator->release(), 2 * MiB);  // merged back whole, so it goes
  EXPECT_EQ(b.held(), 0u);
}

TEST(CachingAllocator, MidSizedRequestsAreCarvedFromTwentyMiBSegments) {
  baseline b("caching");
  const auto a = b.alloc(3 * MiB);
  const auto c = b.alloc(3 * MiB);
  EXPECT_EQ(b.held(), 20 * MiB);
  EXPECT_EQ(c, a + 3 * MiB);
  b.free(a, 3 * MiB);
  b.free(c, 3 * MiB);
  b.allocator->release();
  EXPECT_EQ(b.held(), 0u);
}

TEST(CachingAllocator, BestFitTakesTheSmallestFreeBlockThatFits) {
  baseline b("caching");
  const auto big = b.alloc(40 * MiB);
  const auto smaller = b.alloc(30 * MiB);
  b.free(big, 40 * MiB);
  b.free(smaller, 30 * MiB);
  EXPECT_EQ(b.alloc(25 * MiB), smaller);
  EXPECT_EQ(b.alloc(35 * MiB), big);
  EXPECT_EQ(b.held(), 70 * MiB);
}

TEST(CachingAllocator, LargeBlockSplitOnlyWhenMoreThanOneMiBRemains) {
  baseline b("caching");
  const auto a = b.alloc(12 * MiB);
  b.free(a, 12 * MiB);
  const auto whole = b.alloc(11 * MiB + 512 * KiB);  // 512 KiB would remain: not split
  EXPECT_EQ(whole, a);
  b.free(whole, 11 * MiB + 512 * KiB);
  EXPECT_EQ(b.allocator->release(), 12 * MiB);  // never split, so released
}

TEST(CachingAllocator, ASmallPieceOfAFreedLargeBlockKeepsTheWholeBlock) {
  baseline b("caching");
  const auto scratch = b.alloc(100 * MiB);
  b.free(scratch, 100 * MiB);
  const auto kept = b.alloc(30 * MiB);  // best fit: carved out of the freed 100 MiB
  EXPECT_EQ(kept, scratch);
  EXPECT_EQ(b.allocator->release(), 0u);  // the segment is split: nothing can go back
  EXPECT_EQ(b.held(), 100 * MiB);
  b.free(kept, 30 * MiB);
  EXPECT_EQ(b.allocator->release(), 100 * MiB);
}

TEST(CachingAllocator, FreeBlocksAreNotSharedAcrossStreams) {
  baseline b("caching");
  stream_t other = nullptr;
  ASSERT_EQ(b.sim->stream_create(0, &other), driver_status::success);
  const auto a = b.alloc(50 * MiB);
  b.free(a, 50 * MiB);
  const auto on_other = b.alloc(50 * MiB, other);
  EXPECT_NE(on_other, a);
  EXPECT_EQ(b.held(), 100 * MiB);
  b.free(on_other, 50 * MiB, other);
}

TEST(CachingAllocator, OutOfMemoryReleasesCachedSegmentsAndRetries) {
  baseline b("caching");
  b.sim->set_capacity_limit(0, 100 * MiB);
  const auto a = b.alloc(60 * MiB);
  b.free(a, 60 * MiB);
  const auto c = b.alloc(80 * MiB);  // fits only once the cached 60 MiB goes back
  EXPECT_NE(c, 0u);
  EXPECT_EQ(b.held(), 80 * MiB);
  EXPECT_FALSE(b.allocator->allocate(40 * MiB, nullptr).has_value());
}

}  // namespace
}  // namespace tidepool::replay::testing
