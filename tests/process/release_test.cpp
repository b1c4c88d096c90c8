// Tests of release_cached_memory(): every pool's cache, the CUDA async pools and the reclaim
// hooks, on GPUs with a context only, counted from the allocators' own figures.
#include <gtest/gtest.h>

#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "process/process_fixture.hpp"

namespace tidepool::testing {
namespace {

using Release = process_test;

TEST_F(Release, HandsBackPoolCacheAndAsyncPoolsExactly) {
  auto& sim = use_small_sim();
  pool& p = device_pool(0);
  void* a = p.allocate(64 * MiB);
  void* b = p.allocate(32 * MiB);
  p.deallocate(a);
  sim.park_in_async_pool(0, 10 * MiB);
  ASSERT_GE(p.stats().cached_bytes, 64 * MiB);
  const std::size_t pool_released_before = p.stats().released_bytes;
  const std::size_t held_before = sim.physical_bytes(0);

  const std::size_t released = release_cached_memory();

  // The sum of the allocators' own counts, and exactly what the driver saw go back.
  EXPECT_EQ(released, p.stats().released_bytes - pool_released_before + 10 * MiB);
  EXPECT_EQ(held_before - sim.physical_bytes(0), released);
  EXPECT_GE(released, 64 * MiB + 10 * MiB);
  EXPECT_EQ(sim.async_pool_bytes(0), 0u);
  EXPECT_EQ(p.allocation_size(b), 32 * MiB);  // live memory untouched

  p.deallocate(b);
  const std::size_t held = sim.physical_bytes(0);
  const std::size_t second = release_cached_memory();
  EXPECT_EQ(held - sim.physical_bytes(0), second);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);  // nothing live: everything went back
  EXPECT_EQ(release_cached_memory(), 0u);
}

TEST_F(Release, RunsTheReclaimHooksAndCountsWhatTheyReport) {
  use_small_sim();
  (void)device_pool(0);
  std::vector<std::pair<int, std::size_t>> calls;
  scoped_hook hook([&](int device, std::size_t needed) {
    calls.emplace_back(device, needed);
    return std::size_t{12345};
  });
  EXPECT_EQ(release_cached_memory(), 12345u);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].first, 0);
  EXPECT_EQ(calls[0].second, SIZE_MAX);
}

TEST_F(Release, NothingOpenedNothingReleased) {
  auto& sim = use_small_sim(2);
  int hook_calls = 0;
  scoped_hook hook([&](int, std::size_t) {
    ++hook_calls;
    return std::size_t{0};
  });
  EXPECT_EQ(release_cached_memory(), 0u);
  EXPECT_EQ(hook_calls, 0);
  EXPECT_FALSE(sim.has_context(0));
  EXPECT_FALSE(sim.has_context(1));
  EXPECT_TRUE(existing_pools().empty());
}

TEST_F(Release, OneFailingDeviceDoesNotStopTheOthers) {
  sim_config config;
  config.device_count = 2;
  config.capacity = GiB;
  config.devices_with_context = {0, 1};
  auto& sim = use_sim(config);
  sim.park_in_async_pool(1, 8 * MiB);
  scoped_hook hook([](int device, std::size_t) -> std::size_t {
    if (device == 0) throw std::runtime_error("hook failed on device 0");
    return 0;
  });
  EXPECT_THROW((void)release_cached_memory(), std::runtime_error);
  EXPECT_EQ(sim.async_pool_bytes(1), 0u);  // device 1 was still released
}

}  // namespace
}  // namespace tidepool::testing
