// Samples along a replay (replay_options::sample_every, what `tidepool view` charts) and the
// tidepool allocator's description of itself before the final release.
#include <gtest/gtest.h>

#include <algorithm>

#include "baseline_fixture.hpp"
#include "bundled_trace.hpp"
#include "replay/loader_workload.hpp"
#include "replay/replay_engine.hpp"

namespace tidepool::replay::testing {
namespace {

trace loader_trace() {
  return read_bundled_trace("loader.csv.gz");
}

TEST(ReplaySampling, SamplesMissNoPeakAndEndAtTheLastRow) {
  const trace t = loader_trace();
  for (const char* allocator : {"tidepool", "caching"}) {
    SCOPED_TRACE(allocator);
    replay_options options;
    options.passes = 2;
    options.sample_every = 97;
    const replay_result r = replay_trace(t, allocator, std::make_shared<sim_driver>(), options);
    const std::size_t rows = 2 * t.events.size();
    ASSERT_EQ(r.samples.size(), 1 + (rows + 96) / 97);
    EXPECT_EQ(r.samples.front().row, 0u);
    EXPECT_EQ(r.samples.back().row, rows);
    std::size_t most_live = 0;
    std::size_t most_held = 0;
    for (std::size_t i = 1; i < r.samples.size(); ++i) {
      EXPECT_GT(r.samples[i].row, r.samples[i - 1].row);
      EXPECT_GE(r.samples[i].driver_calls, r.samples[i - 1].driver_calls);
      most_live = std::max(most_live, r.samples[i].live_bytes);
      most_held = std::max(most_held, r.samples[i].held_bytes);
    }
    EXPECT_EQ(most_live, r.peak_live_bytes);
    EXPECT_EQ(most_held, r.peak_held_bytes);
    EXPECT_LE(r.samples.back().driver_calls, r.driver_calls);  // the final release comes after
  }
}

TEST(ReplaySampling, NoSamplesUnlessAsked) {
  EXPECT_TRUE(replay_trace(loader_trace(), "exact", std::make_shared<sim_driver>()).samples.empty());
}

TEST(ReplaySampling, TidepoolSaysWhatReleaseWillReturn) {
  const replay_result r = replay_trace(loader_trace(), "tidepool", std::make_shared<sim_driver>());
  ASSERT_TRUE(r.releasable_end_bytes.has_value());
  EXPECT_EQ(*r.releasable_end_bytes, r.released_bytes);
  EXPECT_GT(r.released_bytes, 0u);
  EXPECT_LT(*r.cached_end_bytes, r.own_held_end_bytes);  // in use (the live end, rounded) holds the rest
  EXPECT_GE(r.own_held_end_bytes - *r.cached_end_bytes, r.live_end_bytes);
  EXPECT_GT(*r.largest_free_end_bytes, 0u);
  EXPECT_LE(*r.largest_free_end_bytes, *r.cached_end_bytes);
  const replay_result caching = replay_trace(loader_trace(), "caching", std::make_shared<sim_driver>());
  EXPECT_FALSE(caching.releasable_end_bytes.has_value());
}

}  // namespace
}  // namespace tidepool::replay::testing
