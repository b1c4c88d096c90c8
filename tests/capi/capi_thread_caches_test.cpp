// Tests of the per-thread caches through the C API: tidepool_pool_options_t.thread_caches (set,
// read back, refused when unknown, absent from an older caller's struct) and
// tidepool_stats_t.thread_caches (filled, and never past an older caller's struct).
#include <gtest/gtest.h>

#include <barrier>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

namespace tidepool::testing {
namespace {

using CApiThreadCaches = process_test;

constexpr std::size_t KiB = 1024;

tidepool_pool_options_t current_options() {
  tidepool_pool_options_t options{};
  options.struct_size = sizeof options;
  EXPECT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS) << tidepool_last_error();
  return options;
}

void set_thread_caches(std::int32_t value) {
  tidepool_pool_options_t options = current_options();
  options.thread_caches = value;
  ASSERT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_SUCCESS) << tidepool_last_error();
}

tidepool_stats_t stats_of(int device) {
  tidepool_stats_t stats{};
  stats.struct_size = sizeof stats;
  EXPECT_EQ(tidepool_stats(device, &stats), TIDEPOOL_SUCCESS) << tidepool_last_error();
  return stats;
}

TEST_F(CApiThreadCaches, EachValueIsReadBackAndReachesThePoolsMadeAfterwards) {
  use_small_sim();
  EXPECT_EQ(current_options().thread_caches, TIDEPOOL_THREAD_CACHES_WHEN_CONTENDED);  // the default
  const struct {
    std::int32_t c;
    thread_cache_policy cpp;
  } values[] = {{TIDEPOOL_THREAD_CACHES_ALWAYS, thread_cache_policy::always},
                {TIDEPOOL_THREAD_CACHES_NEVER, thread_cache_policy::never},
                {TIDEPOOL_THREAD_CACHES_WHEN_CONTENDED, thread_cache_policy::when_contended},
                {TIDEPOOL_THREAD_CACHES_ALWAYS, thread_cache_policy::always}};
  for (const auto& v : values) {
    set_thread_caches(v.c);
    EXPECT_EQ(current_options().thread_caches, v.c);
    EXPECT_EQ(detail::default_pool_options().thread_caches, v.cpp) << v.c;
  }
  EXPECT_EQ(device_pool(0).options().thread_caches, thread_cache_policy::always);
}

TEST_F(CApiThreadCaches, AnUnknownValueIsRefusedNamingItAndChangesNothing) {
  use_small_sim();
  set_thread_caches(TIDEPOOL_THREAD_CACHES_NEVER);
  for (const std::int32_t bad : {3, -1, static_cast<std::int32_t>(TIDEPOOL_THREAD_CACHES_MAX_ENUM)}) {
    tidepool_pool_options_t options = current_options();
    options.byte_cap = 64 * MiB;  // valid, but goes with the bad value: must not be taken either
    options.thread_caches = bad;
    EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
    EXPECT_EQ(tidepool_last_status(), TIDEPOOL_INVALID_ARGUMENT);
    const std::string message = tidepool_last_error();
    EXPECT_NE(message.find("thread_caches is " + std::to_string(bad) + ": expected"), std::string::npos) << message;
    EXPECT_NE(message.find("TIDEPOOL_THREAD_CACHES_ALWAYS"), std::string::npos) << message;
    const tidepool_pool_options_t now = current_options();
    EXPECT_EQ(now.thread_caches, TIDEPOOL_THREAD_CACHES_NEVER);
    EXPECT_EQ(now.byte_cap, UINT64_MAX);
  }
  EXPECT_EQ(device_pool(0).options().thread_caches, thread_cache_policy::never);
}

// With ALWAYS the calling thread has a cache from its first call: a freed block waits there and
// comes back for the next request of its size, and the stats say a thread has a cache. With NEVER
// the same calls leave no cache.
TEST_F(CApiThreadCaches, AlwaysGivesTheCallingThreadACacheTheStatsCount) {
  use_small_sim(2);
  set_thread_caches(TIDEPOOL_THREAD_CACHES_ALWAYS);
  void* a = nullptr;
  ASSERT_EQ(tidepool_allocate(100 * KiB, 0, nullptr, TIDEPOOL_SCRATCH, &a), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_deallocate(a, 0, nullptr), TIDEPOOL_SUCCESS);
  tidepool_stats_t s = stats_of(0);
  EXPECT_EQ(s.thread_caches, 1u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.cached_bytes, s.mapped_bytes);
  const std::uint64_t calls = s.driver_calls;
  void* b = nullptr;
  ASSERT_EQ(tidepool_allocate(100 * KiB, 0, nullptr, TIDEPOOL_SCRATCH, &b), TIDEPOOL_SUCCESS);
  EXPECT_EQ(b, a);
  s = stats_of(0);
  EXPECT_EQ(s.thread_caches, 1u);
  EXPECT_EQ(s.driver_calls, calls);
  EXPECT_EQ(s.in_use_bytes, 100 * KiB);
  EXPECT_EQ(s.requested_bytes, 100 * KiB);
  EXPECT_EQ(s.live_allocations, 1u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.deallocations, 1u);
  EXPECT_EQ(tidepool_deallocate(b, 0, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(b, 0, nullptr), TIDEPOOL_DOUBLE_FREE);  // still named from the cache
  s = stats_of(0);
  EXPECT_EQ(s.deallocations, 2u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  // release takes the cached block back and hands everything to the driver.
  std::size_t released = 0;
  ASSERT_EQ(tidepool_release(0, &released), TIDEPOOL_SUCCESS);
  EXPECT_EQ(released, s.mapped_bytes);
  EXPECT_EQ(sim_->mapped_bytes(0), 0u);

  // A tag's pool is made with the same options; tidepool_tag_stats counts its caches too.
  ASSERT_EQ(tidepool_push_tag("cached"), TIDEPOOL_SUCCESS);
  void* t = nullptr;
  ASSERT_EQ(tidepool_allocate(64 * KiB, 1, nullptr, TIDEPOOL_SCRATCH, &t), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_pop_tag(), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_deallocate(t, 1, nullptr), TIDEPOOL_SUCCESS);
  tidepool_stats_t tag{};
  tag.struct_size = sizeof tag;
  ASSERT_EQ(tidepool_tag_stats("cached", 1, &tag), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tag.thread_caches, 1u);
  EXPECT_EQ(tag.live_allocations, 0u);
  EXPECT_EQ(stats_of(1).thread_caches, 0u);  // the untagged pool of device 1 was never used
}

TEST_F(CApiThreadCaches, NeverLeavesEveryThreadWithoutACache) {
  use_small_sim();
  set_thread_caches(TIDEPOOL_THREAD_CACHES_NEVER);
  for (int i = 0; i < 4; ++i) {
    void* p = nullptr;
    ASSERT_EQ(tidepool_allocate(100 * KiB, 0, nullptr, TIDEPOOL_SCRATCH, &p), TIDEPOOL_SUCCESS);
    ASSERT_EQ(tidepool_deallocate(p, 0, nullptr), TIDEPOOL_SUCCESS);
  }
  const tidepool_stats_t s = stats_of(0);
  EXPECT_EQ(s.thread_caches, 0u);
  EXPECT_EQ(s.allocations, 4u);
}

// Threads allocating through the C API each get a cache; while they live the stats count them,
// and once they end every cached block is back in the pool with the figures exact.
TEST_F(CApiThreadCaches, ThreadsCachesAreCountedWhileTheyLiveAndGoBackWhenTheyEnd) {
  use_small_sim();
  set_thread_caches(TIDEPOOL_THREAD_CACHES_ALWAYS);
  constexpr int threads = 3;
  constexpr int rounds = 50;
  std::barrier all_cached(threads + 1);
  std::barrier counted(threads + 1);
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      const std::size_t size = static_cast<std::size_t>(w + 1) * 96 * KiB;
      void* kept = nullptr;
      EXPECT_EQ(tidepool_allocate(size, 0, nullptr, TIDEPOOL_SCRATCH, &kept), TIDEPOOL_SUCCESS);
      for (int r = 0; r < rounds; ++r) {
        // EXPECT, not ASSERT: a worker that returned early would leave the barriers waiting.
        void* p = nullptr;
        EXPECT_EQ(tidepool_allocate(size, 0, nullptr, TIDEPOOL_SCRATCH, &p), TIDEPOOL_SUCCESS);
        EXPECT_EQ(tidepool_deallocate(p, 0, nullptr), TIDEPOOL_SUCCESS);
      }
      all_cached.arrive_and_wait();
      counted.arrive_and_wait();  // the main thread read the stats with every cache alive
      EXPECT_EQ(tidepool_deallocate(kept, 0, nullptr), TIDEPOOL_SUCCESS);
    });
  }
  all_cached.arrive_and_wait();
  tidepool_stats_t s = stats_of(0);
  EXPECT_EQ(s.thread_caches, static_cast<std::uint64_t>(threads));
  EXPECT_EQ(s.live_allocations, static_cast<std::uint64_t>(threads));
  EXPECT_EQ(s.requested_bytes, (1 + 2 + 3) * 96 * KiB);
  EXPECT_EQ(s.allocations, static_cast<std::uint64_t>(threads * (rounds + 1)));
  counted.arrive_and_wait();
  for (std::thread& t : workers) t.join();
  s = stats_of(0);
  EXPECT_EQ(s.thread_caches, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.allocations, static_cast<std::uint64_t>(threads * (rounds + 1)));
  EXPECT_EQ(s.deallocations, static_cast<std::uint64_t>(threads * (rounds + 1)));
  EXPECT_EQ(s.cached_bytes, s.mapped_bytes);
  std::size_t released = 0;
  ASSERT_EQ(tidepool_release(0, &released), TIDEPOOL_SUCCESS);
  EXPECT_EQ(released, s.mapped_bytes);
  EXPECT_EQ(sim_->mapped_bytes(0), 0u);
}

// A caller built before thread_caches existed passes a smaller struct: it is accepted, what lies
// past it is neither read (the value in force stays) nor written.
TEST_F(CApiThreadCaches, AnOlderCallersStructsAreAcceptedAndNotReadOrWrittenPastTheirSize) {
  use_small_sim();
  set_thread_caches(TIDEPOOL_THREAD_CACHES_ALWAYS);
  tidepool_pool_options_t older = current_options();
  older.struct_size = offsetof(tidepool_pool_options_t, thread_caches);
  older.byte_cap = 512 * MiB;
  older.thread_caches = 99;  // past its struct: must be ignored, not refused
  ASSERT_EQ(tidepool_set_default_pool_options(&older), TIDEPOOL_SUCCESS) << tidepool_last_error();
  tidepool_pool_options_t read{};
  read.struct_size = offsetof(tidepool_pool_options_t, thread_caches);
  read.thread_caches = 77;
  read.reserved2_ = 78;
  ASSERT_EQ(tidepool_get_default_pool_options(&read), TIDEPOOL_SUCCESS);
  EXPECT_EQ(read.byte_cap, 512 * MiB);
  EXPECT_EQ(read.growth_slack, pool_options{}.growth_slack);
  EXPECT_EQ(read.thread_caches, 77);
  EXPECT_EQ(read.reserved2_, 78);
  EXPECT_EQ(current_options().thread_caches, TIDEPOOL_THREAD_CACHES_ALWAYS);

  void* a = nullptr;
  ASSERT_EQ(tidepool_allocate(100 * KiB, 0, nullptr, TIDEPOOL_SCRATCH, &a), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_deallocate(a, 0, nullptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(stats_of(0).thread_caches, 1u);
  tidepool_stats_t old_stats{};
  old_stats.struct_size = offsetof(tidepool_stats_t, thread_caches);
  old_stats.thread_caches = 12345;
  ASSERT_EQ(tidepool_stats(0, &old_stats), TIDEPOOL_SUCCESS);
  EXPECT_EQ(old_stats.struct_size, offsetof(tidepool_stats_t, thread_caches));
  EXPECT_EQ(old_stats.allocations, 1u);
  EXPECT_EQ(old_stats.thread_caches, 12345u);
}

}  // namespace
}  // namespace tidepool::testing
