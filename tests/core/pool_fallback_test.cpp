// Without the virtual memory API, the pool uses plain mem_alloc segments behind the same
// interface: blocks are carved from segments, and a segment goes back only when wholly free.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

TEST(PoolFallback, AllocateFreeRelease) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB, /*virtual_memory=*/false));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(3 * MiB);
  void* b = checker.allocate(1000);
  void* c = checker.allocate(5 * MiB, nullptr, lifetime::persistent);
  checker.check();
  EXPECT_EQ(p.stats().driver.of(driver_call::mem_create), 0u);
  EXPECT_EQ(p.stats().driver.of(driver_call::mem_alloc), 3u);
  checker.free(a);
  void* d = checker.allocate(2 * MiB);  // reuses a's segment
  EXPECT_EQ(p.stats().driver.of(driver_call::mem_alloc), 3u);
  checker.check();
  checker.free(d);
  checker.free(b);
  const std::size_t mapped = p.stats().mapped_bytes;
  const std::size_t returned = p.release();  // every segment but c's is wholly free
  EXPECT_EQ(returned, mapped - 6 * MiB);
  checker.check();
  checker.free(c);
  EXPECT_EQ(p.release(), 6 * MiB);
  EXPECT_EQ(sim->physical_bytes(0), 0u);
}

TEST(PoolFallback, OutOfMemoryReleasesFreeSegments) {
  auto sim = std::make_shared<sim_driver>(small_device(64 * MiB, false));
  pool p(sim, 0);
  void* a = p.allocate(30 * MiB);
  void* b = p.allocate(30 * MiB);
  p.deallocate(a);
  p.deallocate(b);
  void* c = p.allocate(50 * MiB);  // only after both free segments go back
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 1u);
  EXPECT_EQ(p.stats().mapped_bytes, 50 * MiB);
  p.deallocate(c);
  EXPECT_THROW((void)p.allocate(65 * MiB), error);
}

TEST(PoolFallback, RandomSequence) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB, false));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::mt19937_64 rng(9);
  std::vector<void*> live;
  for (int op = 0; op < 600; ++op) {
    if (live.size() < 12 && (rng() % 2 == 0 || live.empty())) {
      live.push_back(checker.allocate((std::size_t{1} << (rng() % 25)) + rng() % 1000));
    } else {
      const std::size_t i = rng() % live.size();
      checker.free_after_work(live[i], 20.0);
      live[i] = live.back();
      live.pop_back();
    }
    if (op % 50 == 0) p.release();
    checker.check();
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace tidepool::testing
