// Release: release() hands back exactly the free handles (and says how many bytes), free pages go
// back even when their neighbours are live, the automatic policies (immediate, max_cached_bytes,
// decay) do what they promise, and the pool's driver figures are its own calls.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

TEST(PoolRelease, FreePagesGoBackBetweenLiveNeighbours) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* low = checker.allocate(2 * MiB);
  void* middle = checker.allocate(20 * MiB);
  void* high = checker.allocate(2 * MiB);
  checker.free(middle);
  const std::size_t before = sim->physical_bytes(0);
  const std::size_t returned = p.release();
  EXPECT_EQ(returned, 20 * MiB);
  EXPECT_EQ(before - sim->physical_bytes(0), returned) << "the driver agrees on what came back";
  checker.check();
  checker.check_patterns();
  EXPECT_EQ(p.stats().mapped_bytes, 4 * MiB);
  EXPECT_EQ(p.stats().released_bytes, 20 * MiB);
  checker.free(low);
  checker.free(high);
  EXPECT_EQ(p.release(), 4 * MiB);
  EXPECT_EQ(p.release(), 0u);
}

TEST(PoolRelease, Immediate) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool_options options;
  options.release.immediate = true;
  pool p(sim, 0, options);
  void* keep = p.allocate(1000);
  void* x = p.allocate(16 * MiB);
  p.deallocate(x);
  EXPECT_EQ(p.stats().mapped_bytes, 2 * MiB) << "only the page of the live small block stays";
  p.deallocate(keep);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
}

TEST(PoolRelease, MaxCachedBytes) {
  auto sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool_options options;
  options.release.max_cached_bytes = 8 * MiB;
  pool p(sim, 0, options);
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(p.allocate(6 * MiB));
  for (void* b : blocks) {
    p.deallocate(b);
    EXPECT_LE(p.stats().cached_bytes, 8 * MiB);
  }
}

TEST(PoolRelease, Decay) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool_options options;
  options.release.decay = std::chrono::milliseconds(5);
  pool p(sim, 0, options);
  void* x = p.allocate(16 * MiB);
  p.deallocate(x);
  EXPECT_EQ(p.stats().mapped_bytes, 16 * MiB);
  // Keep using the pool (small blocks) well past the decay time: the idle 16 MiB go back.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < until && p.stats().mapped_bytes > 2 * MiB) {
    void* s = p.allocate(4096);
    p.deallocate(s);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_LE(p.stats().mapped_bytes, 2 * MiB);
}

TEST(PoolRelease, DriverFiguresAreThePoolsOwn) {
  sim_config config;
  config.capacity = 4096 * MiB;
  auto sim = std::make_shared<sim_driver>(config);
  pool p(sim, 0);
  sim->reset_call_counts();
  // Another user of the driver.
  device_address foreign = 0;
  ASSERT_EQ(sim->mem_alloc(0, 8 * MiB, &foreign), driver_status::success);
  std::vector<void*> blocks;
  for (int i = 0; i < 20; ++i) blocks.push_back(p.allocate((std::size_t{1} << (i % 12)) * 64 * 1024));
  for (void* b : blocks) p.deallocate(b);
  p.release();
  const driver_call_counts mine = p.stats().driver;
  const driver_call_counts all = sim->call_counts();
  for (driver_call c : {driver_call::mem_create, driver_call::mem_map, driver_call::mem_set_access,
                        driver_call::mem_unmap, driver_call::mem_release, driver_call::address_reserve}) {
    EXPECT_EQ(mine.of(c), all.of(c)) << to_string(c);
    EXPECT_DOUBLE_EQ(mine.us_of(c), all.us_of(c)) << to_string(c);
  }
  EXPECT_EQ(mine.of(driver_call::mem_alloc), 0u);
  EXPECT_EQ(all.of(driver_call::mem_alloc), 1u);
  EXPECT_GT(mine.memory_us(), 0.0);
}

TEST(PoolRelease, LargeRequestsUseLargerHandles) {
  sim_config config;
  config.capacity = 8192 * MiB;
  auto sim = std::make_shared<sim_driver>(config);
  pool p(sim, 0);
  void* x = p.allocate(1024 * MiB);
  const std::uint64_t handles = p.stats().driver.of(driver_call::mem_create);
  EXPECT_LE(handles, 128u) << "1 GiB in handles of up to 8 MiB, not 512 of 2 MiB";
  void* y = p.allocate(3 * MiB);
  EXPECT_LE(p.stats().driver.of(driver_call::mem_create) - handles, 2u) << "small growth stays in 2 MiB handles";
  p.deallocate(x);
  p.deallocate(y);
  const std::size_t returned = p.release();
  EXPECT_EQ(returned, 1024 * MiB + 4 * MiB);
  EXPECT_EQ(returned, p.stats().released_bytes);
}

}  // namespace
}  // namespace tidepool::testing
