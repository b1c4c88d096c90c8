// The `exact` baseline: one driver allocation per request, of cudaMalloc's measured footprint.
#include "baseline_fixture.hpp"
#include "replay/exact_allocator.hpp"

namespace tidepool::replay::testing {
namespace {

TEST(ExactAllocator, FootprintFollowsTheH200Measurements) {
  // Above 1 MiB: whole 2 MiB pages, as measured.
  EXPECT_EQ(cuda_malloc_footprint(1'200'000), 2 * MiB);
  EXPECT_EQ(cuda_malloc_footprint(4'700'000), 6 * MiB);
  EXPECT_EQ(cuda_malloc_footprint(70 * MiB), 70 * MiB);
  // Up to 1 MiB: a share of a page. Within 2% of the measured averages, which include a
  // partly empty last page (41,943 and 713,032 bytes).
  EXPECT_EQ(cuda_malloc_footprint(36 * KiB), 41'472u);
  EXPECT_EQ(cuda_malloc_footprint(600 * KiB), 699'392u);
  EXPECT_NEAR(static_cast<double>(cuda_malloc_footprint(36 * KiB)), 41'943.0, 0.02 * 41'943.0);
  EXPECT_NEAR(static_cast<double>(cuda_malloc_footprint(600 * KiB)), 713'032.0, 0.02 * 713'032.0);
  // The page counts of the measurements themselves: 1000 x 36 KiB in 20 pages, 100 x 600 KiB in 34.
  EXPECT_EQ((1000 + (2 * MiB / (40 * KiB)) - 1) / (2 * MiB / (40 * KiB)), 20u);
  EXPECT_EQ((100 + 2) / 3, 34u);
}

TEST(ExactAllocator, HoldsTheFootprintOfEachLiveAllocationAndNothingMore) {
  baseline b("exact");
  const auto a = b.alloc(36 * KiB);
  const auto c = b.alloc(4'700'000);
  EXPECT_EQ(b.held(), 41'472u + 6 * MiB);
  b.free(a, 36 * KiB);
  EXPECT_EQ(b.held(), 6 * MiB);
  EXPECT_EQ(b.allocator->release(), 0u);
  b.free(c, 4'700'000);
  EXPECT_EQ(b.held(), 0u);
  const driver_call_counts counts = b.sim->call_counts();
  EXPECT_EQ(counts.of(driver_call::mem_alloc), 2u);
  EXPECT_EQ(counts.of(driver_call::mem_free), 2u);
}

}  // namespace
}  // namespace tidepool::replay::testing
