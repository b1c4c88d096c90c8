// Release: release() hands back exactly the free handles (and says how many bytes), free pages go
// back even when their neighbours are live, the automatic policies (immediate, max_cached_bytes,
// decay) do what they promise, and the pool's driver figures are its own calls.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <memory>
#include <set>
#include <utility>
#include <vector>

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

// Decay on a clock the test moves: a free handle goes back once it has been idle for `decay`, not
// before, whatever the clock read when the pool began.
TEST(PoolRelease, DecayHandsBackWhatStayedIdleForTheDecayTime) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  using clock = std::chrono::steady_clock;
  auto now = clock::time_point{} + std::chrono::hours(5);  // the program has run for a while
  pool_options options;
  options.release.decay = std::chrono::milliseconds(1000);
  options.release.clock = [&now] { return now; };
  options.growth_slack = 1.0;  // small pages are new, not stolen from the idle 16 MiB
  pool p(sim, 0, options);
  // Pairs of small operations keep the pool busy (the clock is read every 64 operations).
  auto keep_busy = [&p] {
    for (int i = 0; i < 200; ++i) p.deallocate(p.allocate(4096));
  };
  void* x = p.allocate(16 * MiB);
  p.deallocate(x);
  keep_busy();
  EXPECT_EQ(p.stats().mapped_bytes, 16 * MiB + 2 * MiB) << "just freed: kept";
  now += std::chrono::milliseconds(999);
  keep_busy();
  EXPECT_EQ(p.stats().mapped_bytes, 16 * MiB + 2 * MiB) << "idle 999 ms, decay 1000 ms: kept";
  // Checks are at least decay / 4 apart: by decay * 1.25 the idle handles have gone back.
  now += std::chrono::milliseconds(251);
  keep_busy();
  EXPECT_EQ(p.stats().mapped_bytes, 2 * MiB) << "idle 1250 ms: gone; the small page, in use just now, stays";
  EXPECT_EQ(sim->physical_bytes(0), 2 * MiB) << "the driver agrees";
  EXPECT_EQ(p.stats().released_bytes, 16 * MiB);
  // The small page goes too once it has been idle as long, while 8 MiB blocks keep the pool busy.
  now += std::chrono::milliseconds(1250);
  for (int i = 0; i < 100; ++i) p.deallocate(p.allocate(8 * MiB));
  EXPECT_EQ(p.stats().released_bytes, 16 * MiB + 2 * MiB);
  EXPECT_EQ(p.stats().mapped_bytes, 8 * MiB) << "the 8 MiB block, freed just now, stays";
  EXPECT_EQ(sim->physical_bytes(0), 8 * MiB);
}

TEST(PoolRelease, DecayWithoutAClockUsesTheSteadyClock) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool_options options;
  options.release.decay = std::chrono::hours(1);
  options.growth_slack = 1.0;
  pool p(sim, 0, options);
  void* x = p.allocate(16 * MiB);
  p.deallocate(x);
  for (int i = 0; i < 200; ++i) p.deallocate(p.allocate(4096));
  EXPECT_EQ(p.stats().mapped_bytes, 16 * MiB + 2 * MiB) << "an hour has not passed";
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
  // No free between the two requests: a growth streak (growth.cpp), which maps 1/64 of peak in
  // use for the 3 MiB, 16 MiB in one handle.
  void* y = p.allocate(3 * MiB);
  EXPECT_LE(p.stats().driver.of(driver_call::mem_create) - handles, 2u) << "small growth stays in small handles";
  p.deallocate(x);
  p.deallocate(y);
  const std::size_t returned = p.release();
  EXPECT_EQ(returned, 1024 * MiB + 16 * MiB);
  EXPECT_EQ(returned, p.stats().released_bytes);
}

// No handle is larger than a 256th of what the pool could hold: the device's capacity, or a byte
// cap below it (page_table.cpp). A 16 GiB device gets growth's usual 64 MiB handles; a 4 GiB one 16
// MiB; a cap of 1 GiB 4 MiB from the growth after it is set, until it is lifted.
TEST(PoolRelease, HandlesAreA256thOfTheDeviceOrItsByteCapAtMost) {
  const auto sizes_of_growth = [](pool& p, std::size_t bytes) {
    const std::multiset<std::size_t> before = handle_sizes(p);
    void* x = p.allocate(bytes);
    std::multiset<std::size_t> made = handle_sizes(p);
    for (std::size_t size : before) made.erase(made.find(size));
    return std::pair{x, made};
  };
  const auto all_of = [](std::size_t count, std::size_t size) {
    const std::vector<std::size_t> sizes(count, size);
    return std::multiset<std::size_t>(sizes.begin(), sizes.end());
  };
  sim_config large;
  large.capacity = full_handles_device_bytes;
  pool on_large(std::make_shared<sim_driver>(large), 0);
  auto [a, a_handles] = sizes_of_growth(on_large, 256 * MiB);
  EXPECT_EQ(a_handles, all_of(4, 64 * MiB));
  on_large.deallocate(a);

  sim_config small;
  small.capacity = 4096 * MiB;
  pool p(std::make_shared<sim_driver>(small), 0);
  auto [b, b_handles] = sizes_of_growth(p, 256 * MiB);
  EXPECT_EQ(b_handles, all_of(16, 16 * MiB));
  p.set_byte_cap(1024 * MiB);
  auto [c, c_handles] = sizes_of_growth(p, 64 * MiB);
  EXPECT_EQ(c_handles, all_of(16, 4 * MiB));
  p.set_byte_cap(std::numeric_limits<std::size_t>::max());
  auto [d, d_handles] = sizes_of_growth(p, 64 * MiB);
  EXPECT_EQ(d_handles, all_of(4, 16 * MiB)) << "the cap lifted: the device's 256th again";
  for (void* x : {b, c, d}) p.deallocate(x);
}

// Away from the device's limit a block carved from a large free handle keeps the handle whole
// (placement.cpp): release() then keeps what the block pins, and compact() hands that back by moving
// the block's bytes, once its stream's work is done. While the GPU still runs behind, nothing is
// unmapped under queued work either way.
struct carve_outcome {
  std::size_t held_after_release = 0;
  std::size_t held_after_compact = 0;
};

// The largest handle growth makes in a large region (page_table.cpp).
constexpr std::size_t largest_handle = 64 * MiB;

carve_outcome carve_from_own_free(double work_us, std::size_t kept_bytes) {
  auto sim = std::make_shared<sim_driver>(device_with_room(512 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* whole = checker.allocate(largest_handle);  // one handle
  checker.free_after_work(whole, work_us);
  void* kept = checker.allocate(kept_bytes);  // same stream: carved from that handle
  void* rest = checker.allocate(largest_handle - kept_bytes);
  checker.check();
  checker.free(rest);
  sim->run_until_idle();
  carve_outcome out;
  (void)p.release();
  out.held_after_release = p.stats().mapped_bytes;
  (void)p.compact();
  out.held_after_compact = p.stats().mapped_bytes;
  checker.check();
  checker.check_patterns();
  checker.free(kept);
  return out;
}

TEST(PoolRelease, ABlockCarvedFromAFreeHandleKeepsItWholeAndCompactHandsTheRestBack) {
  for (const std::size_t kept : {4 * MiB, 16 * MiB, 50 * MiB}) {
    const carve_outcome out = carve_from_own_free(0.0, kept);
    EXPECT_EQ(out.held_after_release, largest_handle) << kept;
    EXPECT_EQ(out.held_after_compact, kept) << kept;
  }
}

TEST(PoolRelease, ABlockCarvedWhileItsStreamsFreeIsQueuedLeavesTheHandleWhole) {
  // The checker counts any unmap under queued work; the handle must stay whole and mapped.
  EXPECT_EQ(carve_from_own_free(1000.0, 4 * MiB).held_after_release, largest_handle);
}

// A block that touches every granule of a large handle it cuts keeps the handle whole, though it
// covers less than three quarters of it: it pins the whole handle while it lives either way, and
// a split would cost an unmap, a release and two new handles.
TEST(PoolRelease, ABlockTouchingEveryGranuleOfAHandleLeavesItWhole) {
  auto sim = std::make_shared<sim_driver>(device_with_room(512 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* x = checker.allocate(3 * MiB / 2);  // granule 0, one granule handle
  void* y = checker.allocate(4 * MiB);  // from 1.5 MiB to 5.5: one 4 MiB handle (granules 1-2)
  ASSERT_EQ(handle_sizes(p).count(4 * MiB), 1u);
  checker.free(y);
  sim->run_until_idle();
  const std::uint64_t unmaps = p.stats().driver.of(driver_call::mem_unmap);
  void* z = checker.allocate(3 * MiB);  // from 1.5 MiB to 4.5: 2.5 MiB of the 4 MiB handle, both its granules
  EXPECT_EQ(p.stats().driver.of(driver_call::mem_unmap), unmaps);
  EXPECT_EQ(handle_sizes(p).count(4 * MiB), 1u);
  checker.check();
  checker.free(z);
  checker.free(x);
  sim->run_until_idle();
  (void)p.release();
  checker.check();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
}

// A growth whose request ends inside a granule gives that granule a handle of its own, so a block
// carved from the granule's free tail pins a granule, not the request's large handle; but not when
// the growth's last handle is small anyway (a granule and a quarter of the largest handle at most):
// the neighbour then pins at most a quarter of a handle more, and the growth makes one handle fewer.
TEST(PoolRelease, OnlyAGrowthWhoseLastHandleIsLargeGivesItsEndGranuleAHandleOfItsOwn) {
  auto sim = std::make_shared<sim_driver>(device_with_room(512 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const std::size_t largest = 64 * MiB;  // growth's largest handle (page_table::largest_growth_handle)
  void* small_growth = checker.allocate(5 * MiB);  // granules 0-2: one 6 MiB handle
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{6 * MiB}));
  // From its free 1 MiB tail to 34.5 MiB: 30 MiB more (granules 3-17), the last handle would be
  // 30 MiB, more than a granule and a quarter of the largest, so the granule it ends in gets its own.
  void* large_growth = checker.allocate(59 * MiB / 2);
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{2 * MiB, 6 * MiB, 28 * MiB}));
  // The block above the small growth pins its handle: what it keeps after release is its own
  // granules and no more than a quarter of the largest handle besides.
  checker.free(small_growth);
  sim->run_until_idle();
  (void)p.release();
  checker.check();
  EXPECT_EQ(p.stats().mapped_bytes, 36 * MiB);
  EXPECT_LE(p.stats().mapped_bytes, 32 * MiB + largest / 4) << "its 16 granules and a quarter handle";
  checker.free(large_growth);
  sim->run_until_idle();
  (void)p.release();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
}

// The end granule's own handle is for devices the pool could fill: while it holds a small share of
// the device (less than a seventeenth of what it could reach), the same growth makes one handle, and
// from the growth that takes it past that share the granule gets its own again (growth.cpp,
// end_granule_gets_own_handle).
TEST(PoolRelease, AGrowthGivesItsEndGranuleAHandleOfItsOwnOnlyOnceThePoolHoldsAShareOfTheDevice) {
  auto sim = std::make_shared<sim_driver>(small_device(16384 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* small_growth = checker.allocate(5 * MiB);
  void* large_growth = checker.allocate(59 * MiB / 2);  // granules 3-17, as in the test above
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{6 * MiB, 30 * MiB})) << "no granule handle";
  // From the 1.5 MiB free above the last block to 1 GiB past it: the growth that takes the pool past
  // a seventeenth of the 16 GiB device ends inside a granule, which gets a handle of its own.
  void* share = checker.allocate(1024 * MiB);
  const std::multiset<std::size_t> sizes = handle_sizes(p);
  EXPECT_EQ(sizes.count(2 * MiB), 1u);
  EXPECT_EQ(sizes.count(64 * MiB), 15u);
  EXPECT_EQ(sizes.size(), 2u + 15u + 2u) << "the two before, 15 of 64 MiB, one of 62 MiB and the granule";
  checker.check();
  for (void* q : {small_growth, large_growth, share}) checker.free(q);
  sim->run_until_idle();
  (void)p.release();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  // release() ends the share with the limit: the pool asks the driver again at its next growth, and
  // holding a small share once more, makes no granule handle.
  void* again_small = checker.allocate(5 * MiB);
  void* again_large = checker.allocate(59 * MiB / 2);
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{6 * MiB, 30 * MiB}));
  checker.free(again_small);
  checker.free(again_large);
}

}  // namespace
}  // namespace tidepool::testing
