// The loader workload generator: the shape of DESIGN 1.1 and one trace per seed.
#include <gtest/gtest.h>

#include "replay/loader_workload.hpp"

namespace tidepool::replay::testing {
namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

TEST(LoaderWorkload, HasTheShapeOfDesignOnePointOne) {
  const trace t = make_loader_trace(1);
  const trace_summary s = summarize(t);
  EXPECT_NEAR(static_cast<double>(s.peak_live_bytes) / GiB, 15.1, 0.15);
  EXPECT_NEAR(static_cast<double>(s.live_bytes_at_end) / GiB, 5.5, 0.1);
  // 7 x 16 chunks of 6 scratch + 55 kept arrays, 62 regions of 5 scratch + 21 kept arrays.
  EXPECT_EQ(s.allocations, 7u * 16u * (6u + 55u) + 62u * (5u + 21u));
  EXPECT_EQ(s.live_allocations_at_end, 62u * 21u);
}

TEST(LoaderWorkload, TheSameSeedGivesTheSameTrace) {
  EXPECT_EQ(make_loader_trace(7).events, make_loader_trace(7).events);
  EXPECT_NE(make_loader_trace(7).events, make_loader_trace(8).events);
}

}  // namespace
}  // namespace tidepool::replay::testing
