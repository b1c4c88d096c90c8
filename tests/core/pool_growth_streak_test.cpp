// Growth streaks (growth.cpp): growths with no free between them, as a model's weights are loaded,
// map at least what the streak has mapped so far, up to 20 MiB and 1/64 of peak in use, so that the
// next requests come from the rest and the load makes a few handles, not one or two per weight; a
// free ends the streak; a small pool, a pool that gives its cache back by itself and a growth the
// byte cap or the device would refuse rounded all map exactly what the request lacks; release()
// stays exact.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

// 5.5 MiB: a weight of a small transformer, neither a whole granule nor a handle.
constexpr std::size_t weight_bytes = 11 * MiB / 2;
constexpr int weights = 200;
constexpr std::size_t page_bytes = 20 * MiB;

std::uint64_t handles_made(const pool& p) { return p.stats().driver.of(driver_call::mem_create); }

// 400 weights (2.1 GiB) loaded on a 16 GiB device without host memory behind it (nothing is
// written; on a smaller device a 256th of it bounds the handles below the streak's 20 MiB), with or
// without a temporary freed between two weights; the pool's handles made and stats after the load,
// and what release() then returned with every weight freed.
struct load_outcome {
  std::uint64_t handles = 0;
  pool_stats loaded;
  std::size_t released = 0;
};
load_outcome load_model(bool temporaries) {
  sim_config config;
  config.capacity = full_handles_device_bytes;
  auto sim = std::make_shared<sim_driver>(config);
  pool p(sim, 0);
  std::vector<void*> loaded;
  for (int i = 0; i < 400; ++i) {
    loaded.push_back(p.allocate(weight_bytes));
    if (temporaries) p.deallocate(p.allocate(4096));
  }
  load_outcome out{handles_made(p), p.stats(), 0};
  for (void* w : loaded) p.deallocate(w);
  out.released = p.release();
  return out;
}

TEST(PoolGrowthStreak, AModelLoadedWeightByWeightGrowsInFewHandlesAndLeavesAtMostAPageUnused) {
  const load_outcome streak = load_model(false);
  const load_outcome exact = load_model(true);
  std::printf("400 weights of 5.5 MiB: %llu handles in a streak, %llu with a free between weights\n",
              static_cast<unsigned long long>(streak.handles), static_cast<unsigned long long>(exact.handles));
  // The streak's growths map up to 1/64 of what is in use, up to 20 MiB: from 1.25 GiB on, three
  // or four weights a handle.
  EXPECT_LE(streak.handles * 5, exact.handles * 3);
  EXPECT_LE(streak.loaded.mapped_bytes - streak.loaded.in_use_bytes, page_bytes)
      << "the streak's last rest at most one page";
  EXPECT_EQ(streak.released, streak.loaded.mapped_bytes) << "release() hands back every byte mapped";
}

TEST(PoolGrowthStreak, AFreeBetweenGrowthsEndsTheStreak) {
  auto sim = std::make_shared<sim_driver>(small_device(4096 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::vector<void*> loaded;
  for (int i = 0; i < weights; ++i) {
    loaded.push_back(checker.allocate(weight_bytes));
    checker.free(checker.allocate(4096));  // a temporary of the step between the growths
    checker.check();
  }
  const pool_stats s = p.stats();
  // Every growth maps only what its request lacks: the large arena's last granule's rest, and the
  // small arena's granule, are all that is not in use.
  EXPECT_LE(s.mapped_bytes, static_cast<std::size_t>(weights) * weight_bytes + 4 * MiB);
  EXPECT_GE(handles_made(p), static_cast<std::uint64_t>(weights)) << "a handle or more for each weight";
  for (void* w : loaded) checker.free(w);
  checker.check_patterns();
}

TEST(PoolGrowthStreak, ASmallPoolGrowsExactly) {
  // 40 requests of 3 MiB: 120 MiB, under 64 granules, so a sixty-fourth of it is less than one.
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::vector<void*> loaded;
  for (int i = 0; i < 40; ++i) loaded.push_back(checker.allocate(3 * MiB));
  checker.check();
  EXPECT_EQ(p.stats().mapped_bytes, 120 * MiB);
  for (void* b : loaded) checker.free(b);
  EXPECT_EQ(p.release(), 120 * MiB);
}

TEST(PoolGrowthStreak, APoolThatGivesItsCacheBackByItselfGrowsExactly) {
  auto sim = std::make_shared<sim_driver>(small_device(4096 * MiB));
  pool_options options;
  options.release.max_cached_bytes = 8 * MiB;
  pool p(sim, 0, options);
  pool_checker checker(*sim, p);
  std::vector<void*> loaded;
  for (int i = 0; i < weights; ++i) loaded.push_back(checker.allocate(weight_bytes));
  checker.check();
  const pool_stats s = p.stats();
  EXPECT_LE(s.cached_bytes, 8 * MiB);
  EXPECT_LE(s.mapped_bytes - s.in_use_bytes, 2 * MiB) << "no rest past the last granule";
  for (void* w : loaded) checker.free(w);
}

// A pool of 1 GiB in use, then a 5.5 MiB request in the same streak: rounded, it would map 16 MiB
// (1/64 of peak in use); where only 6 MiB more may be mapped it maps those at once and succeeds.
void expect_refused_rounding_grows_exactly(bool by_byte_cap) {
  constexpr std::size_t first = 1024 * MiB;
  auto sim = std::make_shared<sim_driver>(small_device(by_byte_cap ? 4096 * MiB : first + 6 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(first);
  if (by_byte_cap) p.set_byte_cap(first + 6 * MiB);
  void* b = nullptr;
  ASSERT_NO_THROW(b = checker.allocate(weight_bytes));
  checker.check();
  EXPECT_EQ(p.stats().mapped_bytes, first + 6 * MiB);
  // Not through the out-of-memory path, which would have left the pool at the device's limit
  // (smaller handles from then on).
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 0u);
  checker.free(a);
  checker.free(b);
  checker.check_patterns();
}

TEST(PoolGrowthStreak, ARoundedGrowthTheByteCapRefusesIsMadeExactly) { expect_refused_rounding_grows_exactly(true); }

TEST(PoolGrowthStreak, ARoundedGrowthTheDeviceRefusesIsMadeExactly) { expect_refused_rounding_grows_exactly(false); }

}  // namespace
}  // namespace tidepool::testing
