// tidepool's pool behind the replay interface, on the case that strands memory in caching pools:
// a small array carved while a large block is free must not keep the large block held.
#include "baseline_fixture.hpp"

namespace tidepool::replay::testing {
namespace {

TEST(TidepoolAllocator, ASmallArrayAfterAFreedLargeBlockDoesNotKeepItHeld) {
  baseline b("tidepool");
  const auto scratch = b.alloc(100 * MiB);
  b.free(scratch, 100 * MiB);
  const auto kept = b.alloc(36 * KiB);
  (void)kept;
  b.allocator->release();
  // The freed 100 MiB goes back; only pages under (or beside) the live 36 KiB array stay.
  // caching and cupy keep all 100 MiB here (their tests above).
  EXPECT_LT(b.held(), 10 * MiB);
  EXPECT_GT(b.held(), 0u);
}

TEST(TidepoolAllocator, ReleaseReturnsEverythingOnceNothingIsLive) {
  baseline b("tidepool");
  const auto a = b.alloc(30 * MiB);
  const auto c = b.alloc(1000);
  b.free(a, 30 * MiB);
  b.free(c, 1000);
  b.allocator->release();
  EXPECT_EQ(b.held(), 0u);
}

TEST(TidepoolAllocator, OutOfMemoryIsAFailureNotAnException) {
  baseline b("tidepool");
  b.sim->set_capacity_limit(0, 64 * MiB);
  EXPECT_FALSE(b.allocator->allocate(200 * MiB, nullptr).has_value());
  EXPECT_TRUE(b.allocator->allocate(32 * MiB, nullptr).has_value());
}

}  // namespace
}  // namespace tidepool::replay::testing
