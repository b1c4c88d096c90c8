// pool_options::alias_free_handles on recorded loops replayed on sim, three passes each: a training
// loop whose shapes change every step stays within its alias budget in every pass and stops calling
// the driver, and the loader, whose refusals would cost more than the aliases save (1.075 before
// aliasing stopped by itself), keeps best fit's figure. The figures are in docs/RESULTS.md,
// section 0 ("Aliases with a budget of their own").
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "bundled_trace.hpp"
#include "replay/replay_engine.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::replay::testing {
namespace {

replay_result three_passes(const std::string& name, bool aliases) {
  replay_options options;
  options.passes = 3;
  options.tidepool_options.alias_free_handles = aliases;
  const trace t = read_bundled_trace(name);
  return replay_trace(t, "tidepool", std::make_shared<sim_driver>(), options);
}

TEST(ReplayAliases, AVaryingTrainingLoopStaysNearItsPeakAndStopsCallingTheDriver) {
  const replay_result aliased = three_passes("gpt_vary.csv.gz", true);
  const replay_result plain = three_passes("gpt_vary.csv.gz", false);
  ASSERT_EQ(aliased.passes.size(), 3u);
  EXPECT_EQ(aliased.failures, 0u);
  for (const pass_result& p : aliased.passes) {
    std::printf("gpt_vary with aliases: held / live %.4f, %llu driver calls\n", p.held_ratio(),
                static_cast<unsigned long long>(p.driver_calls));
    EXPECT_LE(p.held_ratio(), 1.0 + pool_options{}.alias_slack + 0.005);
  }
  EXPECT_EQ(aliased.passes[2].driver_calls, 0u) << "a loop that has seen its shapes maps nothing more";
  EXPECT_LT(aliased.passes[2].held_ratio(), plain.passes[2].held_ratio() - 0.03)
      << "aliases should hold the loop well below best fit's figure";
}

TEST(ReplayAliases, WhereRefusalsWouldCostMemoryAliasingStopsAndBestFitsFigureHolds) {
  const replay_result aliased = three_passes("loader.csv.gz", true);
  const replay_result plain = three_passes("loader.csv.gz", false);
  ASSERT_EQ(aliased.passes.size(), 3u);
  EXPECT_EQ(aliased.failures, 0u);
  for (unsigned i = 0; i < 3; ++i) {
    std::printf("loader pass %u: held / live %.4f with aliases, %.4f without\n", i + 1,
                aliased.passes[i].held_ratio(), plain.passes[i].held_ratio());
    EXPECT_LE(aliased.passes[i].held_ratio(), plain.passes[i].held_ratio() + 0.01);
  }
  std::printf("loader after release: %zu MiB with aliases, %zu without\n", aliased.held_after_release_bytes >> 20,
              plain.held_after_release_bytes >> 20);
}

}  // namespace
}  // namespace tidepool::replay::testing
