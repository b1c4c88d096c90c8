// The `exact` baseline: one driver allocation per request, holding what cudaMalloc holds on the
// H200: the simulated driver's held bytes after N allocations of one size against the pages the
// H200 took for the same N (docs/RESULTS.md, section 5), and pages that go back with their last
// allocation.
#include <vector>

#include "baseline_fixture.hpp"

namespace tidepool::replay::testing {
namespace {

struct measured {
  std::size_t size;   // bytes asked (tools/measure_cudamalloc_footprint.py rounds down to 512 B)
  std::size_t count;  // allocations made
  std::size_t held;   // bytes the H200's free memory dropped by
};

// Every row of docs/RESULTS.md, section 5 (driver 580.159.04).
constexpr measured h200[] = {
    {512, 1000, 1 * 2 * MiB},
    {4 * KiB, 1000, 2 * 2 * MiB},
    {8 * KiB, 1000, 4 * 2 * MiB},
    {32 * KiB, 1000, 16 * 2 * MiB},
    {33 * KiB, 1000, 17 * 2 * MiB},
    {36 * KiB, 1000, 18 * 2 * MiB},
    {37 * KiB, 1000, 19 * 2 * MiB},
    {40448, 1000, 20 * 2 * MiB},  // 39.5 KiB
    {40 * KiB, 1000, 20 * 2 * MiB},
    {41 * KiB, 1000, 21 * 2 * MiB},
    {64 * KiB, 1000, 32 * 2 * MiB},
    {128 * KiB, 300, 19 * 2 * MiB},
    {256 * KiB, 300, 38 * 2 * MiB},
    {500 * KiB, 300, 75 * 2 * MiB},
    {540 * KiB, 300, 100 * 2 * MiB},
    {600 * KiB, 300, 100 * 2 * MiB},
    {640 * KiB, 300, 100 * 2 * MiB},
    {660 * KiB, 300, 100 * 2 * MiB},
    {680 * KiB, 300, 100 * 2 * MiB},
    {700 * KiB, 300, 150 * 2 * MiB},
    {1000 * KiB, 300, 150 * 2 * MiB},
    {1 * MiB, 300, 150 * 2 * MiB},
    {1 * MiB + 512, 300, 300 * 2 * MiB},
    {1079808, 300, 300 * 2 * MiB},  // 1.03 MiB
    {1199616, 300, 300 * 2 * MiB},  // 1.2 MB
    {2 * MiB, 300, 300 * 2 * MiB},
    {2 * MiB + 512, 30, 30 * 4 * MiB},
    {4699648, 30, 30 * 6 * MiB},  // 4.7 MB
    {63 * MiB, 30, 30 * 64 * MiB},
    {70 * MiB, 30, 30 * 70 * MiB},
    {77 * MiB + 512, 30, 30 * 78 * MiB},
};

TEST(ExactAllocator, HoldsWhatTheH200HeldForEachMeasuredSize) {
  for (const measured& m : h200) {
    SCOPED_TRACE(::testing::Message() << m.count << " x " << m.size << " B");
    baseline b("exact");
    std::vector<device_address> addresses;
    for (std::size_t i = 0; i < m.count; ++i) addresses.push_back(b.alloc(m.size));
    EXPECT_EQ(b.held(), m.held);
    for (const device_address a : addresses) b.free(a, m.size);
    EXPECT_EQ(b.held(), 0u);
  }
}

TEST(ExactAllocator, APageIsHeldWhileAnyAllocationInItLives) {
  baseline b("exact");
  const auto a = b.alloc(36 * KiB);
  const auto c = b.alloc(36 * KiB + 512);  // 56 to a page, as 36 KiB: the same page
  const auto big = b.alloc(4'700'000);
  EXPECT_EQ(b.held(), 2 * MiB + 6 * MiB);
  b.free(a, 36 * KiB);
  EXPECT_EQ(b.held(), 2 * MiB + 6 * MiB) << "the page still holds the other allocation";
  EXPECT_EQ(b.allocator->release(), 0u) << "nothing is cached";
  b.free(c, 36 * KiB + 512);
  EXPECT_EQ(b.held(), 6 * MiB);
  b.free(big, 4'700'000);
  EXPECT_EQ(b.held(), 0u);
  const driver_call_counts counts = b.sim->call_counts();
  EXPECT_EQ(counts.of(driver_call::mem_alloc), 3u) << "one cudaMalloc per request";
  EXPECT_EQ(counts.of(driver_call::mem_free), 3u);
}

TEST(ExactAllocator, SizesThatFitADifferentNumberToAPageTakePagesOfTheirOwn) {
  baseline b("exact");
  const auto small = b.alloc(36 * KiB);   // 56 to a page
  const auto medium = b.alloc(600 * KiB);  // 3 to a page
  EXPECT_EQ(b.held(), 2 * 2 * MiB);
  b.free(small, 36 * KiB);
  EXPECT_EQ(b.held(), 2 * MiB);
  b.free(medium, 600 * KiB);
  EXPECT_EQ(b.held(), 0u);
}

TEST(ExactAllocator, AFullPageTakesANewOneAndAFreedSlotIsReused) {
  baseline b("exact");
  std::vector<device_address> third;
  for (int i = 0; i < 3; ++i) third.push_back(b.alloc(600 * KiB));
  EXPECT_EQ(b.held(), 2 * MiB);
  const auto fourth = b.alloc(600 * KiB);
  EXPECT_EQ(b.held(), 4 * MiB) << "a page holds three";
  b.free(third[1], 600 * KiB);
  const auto again = b.alloc(600 * KiB);
  EXPECT_EQ(again, third[1]) << "the freed slot of the lowest open page is filled first";
  EXPECT_EQ(b.held(), 4 * MiB);
  b.free(fourth, 600 * KiB);
  EXPECT_EQ(b.held(), 2 * MiB);
}

}  // namespace
}  // namespace tidepool::replay::testing
