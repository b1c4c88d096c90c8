// Randomized operation sequences on the simulated GPU, with every invariant of pool_checker.hpp
// checked after every step: several seeds, thousands of operations, three streams, sizes from
// 1 B to 64 MiB (log-uniform), both lifetime hints, work queued on blocks before they are freed,
// a fifth of the frees on a random stream (maybe not the block's), record_stream, clock advances
// and release() calls in between; on a device with room for all of it, and on devices too small
// for it, where allocations fail with out_of_memory (the out-of-memory path, the device's limit)
// and every invariant must hold after each failure as after a success.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

struct random_case {
  unsigned seed;
  std::size_t small_threshold;
  std::size_t range_bytes = 0;  // 0: the default ranges (pool_options::address_range_bytes)
  std::size_t device_bytes = 2048 * MiB;  // with room for less than 24 blocks of 64 MiB, some may fail
  double growth_slack = 1.0;              // pool_options::growth_slack
};

class PoolRandom : public ::testing::TestWithParam<random_case> {};

TEST_P(PoolRandom, InvariantsHoldAfterEveryStep) {
  const random_case param = GetParam();
  auto sim = std::make_shared<sim_driver>(small_device(param.device_bytes));
  pool_options options;
  options.small_size_threshold = param.small_threshold;
  options.address_range_bytes = param.range_bytes;
  options.growth_slack = param.growth_slack;
  pool p(sim, 0, options);
  pool_checker checker(*sim, p);

  std::vector<stream_t> streams = {nullptr};
  for (int i = 0; i < 2; ++i) {
    stream_t s = nullptr;
    ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
    streams.push_back(s);
  }
  std::mt19937_64 rng(param.seed);
  std::uniform_real_distribution<double> log_size(0.0, std::log(64.0 * MiB));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<void*> live;
  constexpr int operations = 2500;
  constexpr std::size_t max_live = 24;
  int failures = 0;

  for (int op = 0; op < operations; ++op) {
    const double r = unit(rng);
    if ((r < 0.55 && live.size() < max_live) || live.empty()) {
      const auto bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
      const stream_t stream = streams[rng() % streams.size()];
      const lifetime hint = unit(rng) < 0.25 ? lifetime::persistent : lifetime::scratch;
      try {
        void* ptr = checker.allocate(std::max<std::size_t>(bytes, 1), stream, hint);
        if (unit(rng) < 0.05) p.record_stream(ptr, streams[rng() % streams.size()]);
        live.push_back(ptr);
      } catch (const out_of_memory&) {
        // Only where the live set and the request cannot fit the device with room to spare.
        std::size_t live_bytes = bytes;
        for (void* q : live) live_bytes += p.allocation_size(q);
        EXPECT_GT(2 * live_bytes, param.device_bytes) << "out of memory with the device at most half full";
        ++failures;
      }
    } else if (r < 0.95) {
      const std::size_t i = rng() % live.size();
      const double work_us = unit(rng) < 0.7 ? 10.0 + 200.0 * unit(rng) : 0.0;
      if (unit(rng) < 0.2) {
        checker.free_on_after_work(live[i], streams[rng() % streams.size()], work_us);  // maybe another stream
      } else {
        checker.free_after_work(live[i], work_us);
      }
      live[i] = live.back();
      live.pop_back();
    } else if (r < 0.985) {
      sim->advance(50.0 + 300.0 * unit(rng));
    } else {
      const pool_stats before = p.stats();
      const std::size_t returned = p.release();
      const pool_stats after = p.stats();
      EXPECT_EQ(before.mapped_bytes - after.mapped_bytes, returned);
      EXPECT_EQ(after.released_bytes - before.released_bytes, returned);
      EXPECT_EQ(sim->physical_bytes(0), checker.live_handle_bytes()) << "release() keeps exactly the handles live blocks touch";
    }
    checker.check();
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "seed " << param.seed << " failed at operation " << op;
      return;
    }
  }
  checker.check_patterns();
  for (void* ptr : live) checker.free_after_work(ptr, 5.0);
  p.release();
  checker.check();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  // Room for 24 blocks of 64 MiB: nothing fails; a quarter of that or less: the out-of-memory path ran.
  if (param.device_bytes >= max_live * 64 * MiB) {
    EXPECT_EQ(failures, 0);
  } else if (param.device_bytes <= 256 * MiB) {
    EXPECT_GT(failures, 0);
  }
}

// Exact release with large handles: requests from 1 MiB to 256 MiB (the large regions map handles
// of up to 64 MiB, split where a block would pin a small part of one), freed on two streams with
// work queued, the growth budget tight or loose. After every release() the driver holds exactly
// the handles live blocks touch (a handle goes back whole or not at all).
class PoolRandomRelease : public ::testing::TestWithParam<unsigned> {};

TEST_P(PoolRandomRelease, HeldAfterReleaseIsTheHandlesLiveBlocksTouch) {
  const unsigned seed = GetParam();
  auto sim = std::make_shared<sim_driver>(small_device(4096 * MiB));
  pool_options options;
  options.growth_slack = seed % 2 == 0 ? 0.0 : 0.5;
  pool p(sim, 0, options);
  pool_checker checker(*sim, p);
  std::vector<stream_t> streams = {nullptr};
  stream_t other = nullptr;
  ASSERT_EQ(sim->stream_create(0, &other), driver_status::success);
  streams.push_back(other);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(std::log(1.0 * MiB), std::log(256.0 * MiB));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<void*> live;
  int releases = 0;
  for (int op = 0; op < 1500; ++op) {
    const double r = unit(rng);
    if ((r < 0.5 && live.size() < 20) || live.empty()) {
      // Half the sizes whole granules (the usual tensor), half not.
      std::size_t bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
      if (unit(rng) < 0.5) bytes = (bytes + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
      live.push_back(checker.allocate(bytes, streams[rng() % streams.size()],
                                      unit(rng) < 0.2 ? lifetime::persistent : lifetime::scratch));
    } else if (r < 0.93) {
      const std::size_t i = rng() % live.size();
      checker.free_after_work(live[i], unit(rng) < 0.5 ? 100.0 * unit(rng) : 0.0);
      live[i] = live.back();
      live.pop_back();
    } else if (r < 0.97) {
      sim->advance(200.0 * unit(rng));
    } else {
      (void)p.release();
      ++releases;
      EXPECT_EQ(sim->physical_bytes(0), checker.live_handle_bytes())
          << "after release(): held is the handles live blocks touch (seed " << seed << ", op " << op << ")";
    }
    checker.check();
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "seed " << seed << " failed at operation " << op;
      return;
    }
  }
  EXPECT_GT(releases, 10);
  checker.check_patterns();
  (void)p.release();
  EXPECT_EQ(sim->physical_bytes(0), checker.live_handle_bytes());
}

INSTANTIATE_TEST_SUITE_P(Seeds, PoolRandomRelease, ::testing::Values(11u, 12u, 13u, 14u));

INSTANTIATE_TEST_SUITE_P(Seeds, PoolRandom,
                         ::testing::Values(random_case{1, MiB}, random_case{2, MiB}, random_case{3, MiB},
                                           random_case{4, 64 * KiB}, random_case{5, 4 * MiB},
                                           random_case{6, MiB, 64 * MiB},
                                           random_case{7, MiB, 0, 256 * MiB}, random_case{8, 64 * KiB, 0, 160 * MiB, 0.0},
                                           random_case{9, 4 * MiB, 64 * MiB, 512 * MiB, 0.5}));

}  // namespace
}  // namespace tidepool::testing
