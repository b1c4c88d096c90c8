// pool_options::alias_free_handles (experimental) on a host-backed sim, where two mappings of one
// handle really share bytes: past the budget growth maps free handles a second time instead of
// making new ones, no two live blocks ever share physical memory (every live byte keeps its
// pattern, pool_checker.hpp), release() hands everything back, and sleep is refused while a handle
// has aliases.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "pool_checker.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

pool_options aliasing(double slack = 0.0) {
  pool_options options;
  options.alias_free_handles = true;
  options.alias_slack = slack;
  return options;
}

std::uint64_t maps_beyond_creates(const sim_driver& sim) {
  const driver_call_counts c = sim.call_counts();
  return c.of(driver_call::mem_map) - c.of(driver_call::mem_create);
}

// A (64 MiB) freed below B (32 MiB), then C (96 MiB): the 64 MiB hole is too small, so growth
// passes the budget (0) and maps A's handle again under C. Returns {B, C}.
std::pair<void*, void*> alias_a_freed_handle(sim_driver& sim, pool_checker& checker) {
  void* a = checker.allocate(64 * MiB);
  void* b = checker.allocate(32 * MiB);
  checker.free(a);
  sim.run_until_idle();
  return {b, checker.allocate(96 * MiB)};
}

TEST(PoolAliases, PastTheBudgetAFreedHandleIsMappedAgainNotMadeAnew) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0, aliasing());
  pool_checker checker(*sim, p);
  const auto [b, c] = alias_a_freed_handle(*sim, checker);
  checker.check();
  EXPECT_GT(maps_beyond_creates(*sim), 0u) << "no handle was mapped a second time";
  EXPECT_LE(sim->physical_bytes(0), 128 * MiB) << "held more than the peak in use (128 MiB)";
  // A's old addresses are free, but their handle now backs C: a block placed there would share
  // C's bytes, which the checker's patterns would show.
  void* d = checker.allocate(32 * MiB);
  checker.check();
  checker.check_patterns();
  for (void* ptr : {b, c, d}) checker.free(ptr);
  sim->run_until_idle();
  p.release();
  checker.check();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
}

TEST(PoolAliases, SleepIsRefusedWhileALiveBlockIsOnAnAliasedHandleAndWorksOnceNoneIs) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0, aliasing());
  pool_checker checker(*sim, p);
  const auto [b, c] = alias_a_freed_handle(*sim, checker);
  ASSERT_GT(maps_beyond_creates(*sim), 0u);
  try {
    p.sleep();
    ADD_FAILURE() << "sleep with aliases did not throw";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::unavailable);
  }
  void* d = checker.allocate(8 * MiB);  // still awake
  checker.check();
  checker.free(c);  // C held A's handle through its second mapping
  sim->run_until_idle();
  p.sleep();  // no live block on an aliased handle: sleep unmaps the idle mapping itself
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  p.wake();
  checker.check();
  checker.check_patterns();  // B and D came back with their contents
  for (void* ptr : {b, d}) checker.free(ptr);
  p.release();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
}

// Random loops of large blocks (1-256 MiB) on three streams with work queued before frees; every
// invariant checked after every step. The alias budget at 0 (growth aliases whenever it can) or at
// the growth budget (aliasing only past 1.5x peak in use).
class PoolAliasesRandom : public ::testing::TestWithParam<std::tuple<unsigned, double>> {};

TEST_P(PoolAliasesRandom, NoTwoLiveBlocksShareMemory) {
  const auto [seed, slack] = GetParam();
  auto sim = std::make_shared<sim_driver>(small_device(4096 * MiB));
  pool_options options = aliasing(slack);
  options.growth_slack = std::max(options.growth_slack, slack);
  pool p(sim, 0, options);
  pool_checker checker(*sim, p);
  std::vector<stream_t> streams = {nullptr};
  for (int i = 0; i < 2; ++i) {
    stream_t s = nullptr;
    ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
    streams.push_back(s);
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(std::log(1.0 * MiB), std::log(256.0 * MiB));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<void*> live;
  for (int op = 0; op < 1500; ++op) {
    const double r = unit(rng);
    if ((r < 0.5 && live.size() < 12) || live.empty()) {
      const auto bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
      live.push_back(checker.allocate(bytes, streams[rng() % streams.size()]));
    } else if (r < 0.93) {
      const std::size_t i = rng() % live.size();
      checker.free_after_work(live[i], unit(rng) < 0.6 ? 20.0 + 200.0 * unit(rng) : 0.0);
      live[i] = live.back();
      live.pop_back();
    } else if (r < 0.99) {
      sim->advance(50.0 + 300.0 * unit(rng));
    } else {
      const std::size_t returned = p.release();
      EXPECT_LE(returned, p.stats().released_bytes);
    }
    checker.check();
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "seed " << seed << ", alias slack " << slack << " failed at operation " << op;
      return;
    }
  }
  EXPECT_GT(maps_beyond_creates(*sim), 0u) << "the loop never aliased: the test tests nothing";
  checker.check_patterns();
  for (void* ptr : live) checker.free_after_work(ptr, 5.0);
  p.release();
  checker.check();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, PoolAliasesRandom,
                         ::testing::Combine(::testing::Values(1u, 2u, 3u, 4u), ::testing::Values(0.0, 0.5)));

}  // namespace
}  // namespace tidepool::testing
