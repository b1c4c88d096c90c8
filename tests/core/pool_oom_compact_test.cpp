// Compaction as the out-of-memory path's last step (pool_options::compact_on_out_of_memory), and
// allocations made on other threads while a compaction runs: a request that only the granules live
// blocks leave untouched could serve is served, every live byte where it was; a request that even
// that could not serve fails as before with nothing moved, as does the first one with the option
// off (the default), whose error names what compaction would have handed back; another thread's
// allocation waits for the compaction and is then served. With the device full, the whole free
// handles go back first to give the remade handles room.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "call_hook_driver.hpp"
#include "pinned_layout.hpp"
#include "pool_checker.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

constexpr std::size_t granule = 2 * MiB;
constexpr std::size_t device_bytes = 1024 * MiB;

// A pinned layout, released: what the device still has, and what compaction would add to it.
struct released_layout {
  std::vector<live_block> live;
  std::size_t touched = 0;  // granules the live blocks touch
  std::size_t held = 0;     // after release()
};

pool_options compacting_on_out_of_memory() {
  pool_options o;
  o.compact_on_out_of_memory = true;
  return o;
}

released_layout pin_and_release(pool& p, pool_checker& checker, sim_driver& sim, std::uint64_t seed) {
  released_layout l;
  l.live = pinned_layout(checker, seed);
  (void)p.release();
  l.touched = touched_granule_bytes(l.live);
  l.held = sim.physical_bytes(0);
  return l;
}

TEST(PoolOutOfMemoryCompaction, ARequestOnlyCompactionCanServeIsServedWithEveryByteInPlace) {
  auto sim = std::make_shared<sim_driver>(device_with_room(device_bytes));
  pool p(sim, 0, compacting_on_out_of_memory());
  pool_checker checker(*sim, p);
  const released_layout l = pin_and_release(p, checker, *sim, 7);
  ASSERT_GT(l.held, l.touched + 2 * granule) << "too little pinned for the test to prove anything";
  // More than the device has left, less than it would have if only the touched granules were held.
  const std::size_t request = device_bytes - l.touched - granule;
  ASSERT_GT(request, device_bytes - l.held);

  void* big = checker.allocate(request);
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 1u);
  EXPECT_LE(sim->physical_bytes(0), device_bytes);
  checker.check();
  checker.check_patterns();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->unmapped_access_count(), 0u);
  EXPECT_FALSE(p.asleep());

  // The pool works on, and every byte goes back at the end.
  checker.free(big);
  void* small = checker.allocate(3000);
  checker.check();
  checker.free(small);
  for (const live_block& b : l.live) checker.free(b.ptr);
  (void)p.release();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
}

// The device full to the last byte, with whole free handles beside the pinned ones and a request
// larger than those and the largest free block together (so the path's earlier steps hand nothing
// back): a remade handle's new handles need room beside the old one, so the whole free handles go
// back first. Before, compaction found no room, moved nothing, and the request failed.
TEST(PoolOutOfMemoryCompaction, WithTheDeviceFullTheWholeFreeHandlesMakeRoomForTheRemade) {
  auto sim = std::make_shared<sim_driver>(device_with_room(device_bytes));
  pool p(sim, 0, compacting_on_out_of_memory());
  pool_checker checker(*sim, p);
  const released_layout l = pin_and_release(p, checker, *sim, 7);
  const std::size_t compactable = l.held - l.touched;
  ASSERT_GT(compactable, 4 * granule) << "too little pinned for the test to prove anything";
  void* filler = checker.allocate(24 * MiB);  // fits no free rest of the layout: handles of its own
  checker.free(filler);
  sim->run_until_idle();
  const std::size_t held = sim->physical_bytes(0);
  const std::size_t whole = held - l.held;
  ASSERT_GT(whole, 0u);
  p.set_byte_cap(held);  // no room for anything new
  const std::size_t request = whole + compactable * 3 / 4;
  ASSERT_GT(request, whole + p.describe().largest_free_block);
  void* big = checker.allocate(request);
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 1u);
  EXPECT_LE(sim->physical_bytes(0), held);
  checker.check();
  checker.check_patterns();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  checker.free(big);
  for (const live_block& b : l.live) checker.free(b.ptr);
}

TEST(PoolOutOfMemoryCompaction, ARequestEvenCompactionCannotServeFailsWithNothingMoved) {
  auto sim = std::make_shared<sim_driver>(device_with_room(device_bytes));
  pool p(sim, 0, compacting_on_out_of_memory());
  pool_checker checker(*sim, p);
  const released_layout l = pin_and_release(p, checker, *sim, 11);
  const std::multiset<std::size_t> handles = handle_sizes(p);
  const std::size_t request = device_bytes - l.touched + 4 * granule;
  try {
    (void)p.allocate(request);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.report().requested_bytes, request);
    EXPECT_EQ(e.report().compactable_bytes, l.held - l.touched);  // too little: nothing moved
  }
  EXPECT_EQ(handle_sizes(p), handles) << "a compaction that could not serve the request must not run";
  EXPECT_EQ(sim->physical_bytes(0), l.held);
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 0u);
  checker.check();
  checker.check_patterns();
}

TEST(PoolOutOfMemoryCompaction, OffByDefaultTheSameRequestFailsWithNothingMoved) {
  auto sim = std::make_shared<sim_driver>(device_with_room(device_bytes));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const released_layout l = pin_and_release(p, checker, *sim, 7);
  const std::multiset<std::size_t> handles = handle_sizes(p);
  try {
    (void)p.allocate(device_bytes - l.touched - granule);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    // The error says why: what the handles live blocks pin hold free, and what would hand it back.
    EXPECT_EQ(e.report().compactable_bytes, l.held - l.touched);
    EXPECT_NE(std::string(e.what()).find("compact_on_out_of_memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(handle_sizes(p), handles);
  EXPECT_EQ(sim->physical_bytes(0), l.held);
  checker.check_patterns();
}

TEST(PoolOutOfMemoryCompaction, AnotherThreadsAllocationWaitsForACompactionAndIsServedAfterIt) {
  auto sim = std::make_shared<sim_driver>(device_with_room(device_bytes));
  pool* target = nullptr;
  std::atomic<bool> armed = false;
  std::atomic<bool> allocated = false;
  std::atomic<bool> allocated_while_compacting = false;
  std::thread other;
  void* theirs = nullptr;
  auto hooked = std::make_shared<call_hook_driver>(sim, [&](driver_call call, std::size_t) {
    if (!armed || call != driver_call::stream_synchronize) return;
    armed = false;
    other = std::thread([&] {
      theirs = target->allocate(5 * MiB);
      allocated = true;
    });
    // The compaction is under way (its copies drop the lock): the other thread must still be waiting.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    allocated_while_compacting = allocated.load();
  });
  pool p(hooked, 0);
  target = &p;
  pool_checker checker(*sim, p);
  const std::vector<live_block> live = pinned_layout(checker, 5);
  armed = true;
  EXPECT_GT(p.compact(), 0u);
  ASSERT_TRUE(other.joinable()) << "compact() made no copy: the test proves nothing";
  other.join();
  EXPECT_FALSE(allocated_while_compacting) << "an allocation was served while compaction moved memory";
  ASSERT_TRUE(allocated);
  checker.check_patterns();
  p.deallocate(theirs);
  checker.check();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

}  // namespace
}  // namespace tidepool::testing
