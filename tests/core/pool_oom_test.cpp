// The out-of-memory path: before failing, the pool reuses its own cache (stealing free handles
// under a request no free block fits), trims the CUDA async pools, calls the reclaim hooks and
// waits for pending frees; when all of that is not enough it throws tidepool::out_of_memory with a
// report, and the pool is left as it was.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "call_hook_driver.hpp"
#include "pool_checker.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool::testing {
namespace {

constexpr std::size_t device_bytes = 64 * MiB;

TEST(PoolOutOfMemory, ScatteredCacheServesALargeRequest) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  // A budget the request passes (held 60 MiB + 24 > 1.1 * 60), so growth must steal.
  pool_options options;
  options.growth_slack = 0.1;
  pool p(sim, 0, options);
  pool_checker checker(*sim, p);
  // Fill 60 MiB of the device in 2 MiB blocks, then free every other one: 30 MiB free, no two
  // pieces adjacent, 4 MiB left on the device.
  std::vector<void*> blocks;
  for (int i = 0; i < 30; ++i) blocks.push_back(checker.allocate(2 * MiB));
  for (std::size_t i = 0; i < blocks.size(); i += 2) checker.free(blocks[i]);
  const std::size_t held = p.stats().mapped_bytes;
  void* big = checker.allocate(24 * MiB);  // no free block fits; the free handles do
  checker.check();
  const pool_stats after = p.stats();
  // Served by the cache's handles and at most the 4 MiB the device still had: within the device
  // and the growth budget.
  EXPECT_LE(after.mapped_bytes, held + 4 * MiB);
  EXPECT_LE(static_cast<double>(after.mapped_bytes), 1.1 * static_cast<double>(after.peak_in_use_bytes));
  checker.check_patterns();
  checker.free(big);
}

TEST(PoolOutOfMemory, TrimsTheAsyncPools) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  pool p(sim, 0);
  sim->park_in_async_pool(0, 48 * MiB);
  void* x = p.allocate(40 * MiB);
  EXPECT_EQ(sim->async_pool_bytes(0), 0u);
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 1u);
  EXPECT_GE(p.stats().driver.of(driver_call::async_pool_trim), 1u);
  p.deallocate(x);
}

TEST(PoolOutOfMemory, CallsReclaimHooks) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  pool p(sim, 0);
  // Another allocator of the process holds 48 MiB in a cache tidepool cannot see.
  device_address foreign = 0;
  ASSERT_EQ(sim->mem_alloc(0, 48 * MiB, &foreign), driver_status::success);
  int calls = 0;
  const int id = add_reclaim_hook([&](int device, std::size_t needed) -> std::size_t {
    ++calls;
    EXPECT_EQ(device, 0);
    EXPECT_GE(needed, 40 * MiB);
    if (foreign == 0) return 0;
    EXPECT_EQ(sim->mem_free(0, foreign), driver_status::success);
    foreign = 0;
    return 48 * MiB;
  });
  void* x = p.allocate(40 * MiB);
  remove_reclaim_hook(id);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 1u);
  p.deallocate(x);
}

TEST(PoolOutOfMemory, HookMayFreeIntoThePool) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  pool p(sim, 0);
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  void* held_by_framework = p.allocate(48 * MiB, s);
  const int id = add_reclaim_hook([&](int, std::size_t) -> std::size_t {
    if (held_by_framework == nullptr) return 0;
    p.deallocate(held_by_framework, s);  // re-enters the pool: must not deadlock
    held_by_framework = nullptr;
    return 0;
  });
  void* x = p.allocate(40 * MiB);  // on the default stream: needs s's free to settle
  remove_reclaim_hook(id);
  EXPECT_EQ(held_by_framework, nullptr);
  p.deallocate(x);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST(PoolOutOfMemory, WaitsForPendingFrees) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  pool p(sim, 0);
  stream_t a = nullptr;
  stream_t b = nullptr;
  ASSERT_EQ(sim->stream_create(0, &a), driver_status::success);
  ASSERT_EQ(sim->stream_create(0, &b), driver_status::success);
  void* x = p.allocate(48 * MiB, a);
  sim->launch(0, a, 5000.0, reinterpret_cast<device_address>(x), 48 * MiB);
  p.deallocate(x, a);
  void* y = p.allocate(48 * MiB, b);  // only x's memory can serve it, once A is done
  EXPECT_GE(sim->now(), 5000.0);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 1u);
  p.deallocate(y, b);
}

// At the device's limit the same: while x's free waits for stream a, its handles count as reachable
// but cannot go back, and a growth tried then made handles until the device refused and handed
// them all back, at each of the path's steps before its device-wide wait. The path tries growth
// only when what went back makes its room: no handle is made before the wait.
TEST(PoolOutOfMemory, NoGrowthWhileTheHandBackWaitsForTheGpu) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  bool counting = false;
  bool waited = false;
  std::uint64_t creates_before_the_wait = 0;
  auto hooked = std::make_shared<call_hook_driver>(sim, [&](driver_call call, std::size_t) {
    if (!counting) return;
    if (call == driver_call::device_synchronize || call == driver_call::stream_synchronize ||
        call == driver_call::event_synchronize) {
      waited = true;
    }
    if (call == driver_call::mem_create && !waited) ++creates_before_the_wait;
  });
  pool p(hooked, 0);
  stream_t a = nullptr;
  stream_t b = nullptr;
  ASSERT_EQ(sim->stream_create(0, &a), driver_status::success);
  ASSERT_EQ(sim->stream_create(0, &b), driver_status::success);
  // The limit: a 16 MiB request no free block fits, on a device with 8 MiB left.
  void* x = p.allocate(40 * MiB, a);
  void* z = p.allocate(8 * MiB, a);
  void* q = p.allocate(8 * MiB, a);
  p.deallocate(z, a);
  void* w = p.allocate(16 * MiB, a);
  ASSERT_EQ(p.stats().out_of_memory_recoveries, 1u);
  sim->launch(0, a, 5000.0, reinterpret_cast<device_address>(x), 40 * MiB);
  p.deallocate(x, a);
  counting = true;
  void* y = p.allocate(40 * MiB, b);  // only x's memory can serve it, once a is done
  counting = false;
  EXPECT_TRUE(waited);
  EXPECT_GE(sim->now(), 5000.0);
  EXPECT_EQ(creates_before_the_wait, 0u) << "handles made while x's free waited";
  EXPECT_EQ(p.stats().mapped_bytes, sim->physical_bytes(0));
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  for (void* ptr : {q, w}) p.deallocate(ptr, a);
  p.deallocate(y, b);
}

TEST(PoolOutOfMemory, ReportWhenNothingHelps) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  pool p(sim, 0);
  void* x = p.allocate(20 * MiB);
  void* y = p.allocate(10 * MiB);
  p.deallocate(y);
  const pool_stats before = p.stats();
  try {
    (void)p.allocate(50 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string message = e.what();
    for (const char* part : {"requested", "in use", "cached", "driver free", "largest possible"}) {
      EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
    }
    EXPECT_EQ(e.report().requested_bytes, 50 * MiB);
    EXPECT_EQ(e.report().in_use_bytes, 20 * MiB);
    EXPECT_EQ(e.report().largest_possible_bytes, 44 * MiB);  // 64 MiB device, 20 MiB live
    EXPECT_NE(message.find("52428800"), std::string::npos) << message;
  }
  const pool_stats after = p.stats();
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(p.available_bytes(), 44 * MiB);
  void* z = p.allocate(44 * MiB);  // exactly what was reported possible
  p.deallocate(z);
  p.deallocate(x);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST(PoolOutOfMemory, AFailedRequestLeavesTheCacheAsItWas) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* x = checker.allocate(20 * MiB + 4096);  // 11 granules
  void* small = checker.allocate(1000);       // 1 granule
  void* y = checker.allocate(6 * MiB);
  checker.free(y);
  const std::size_t held = p.stats().mapped_bytes;
  // 50 MiB cannot fit in 64 MiB beside 24 MiB live; growth maps what it can before giving up.
  EXPECT_THROW((void)p.allocate(50 * MiB), out_of_memory);
  EXPECT_EQ(p.stats().mapped_bytes, held) << "what was mapped for the request went back, the cache stayed";
  checker.check();
  checker.check_patterns();
  const std::uint64_t calls = p.stats().driver.memory_calls();
  void* again = checker.allocate(6 * MiB);  // the program retries smaller: the cache serves it
  EXPECT_EQ(p.stats().driver.memory_calls(), calls);
  checker.free(again);
  checker.free(x);
  checker.free(small);
}

// At the device's limit a request that misses the largest free block by a little is served by
// extending that block into the room above it: only what the extension lacks goes back, taken from
// other free blocks, never from the block extended. Handing back the request's whole size gave up
// every cached block here, which a loop asks for again in its next step (docs/RESULTS.md, section
// 0, "What the window lacks").
TEST(PoolOutOfMemory, AtTheLimitOnlyWhatExtendingTheLargestFreeBlockLacksGoesBack) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  // x, then twelve 2 MiB blocks (every other one freed: six free handles no two of which touch),
  // y, and f at the top of what is mapped, freed: the device full, f's room above it unmapped.
  void* x = checker.allocate(8 * MiB);
  std::vector<void*> pairs;
  for (int i = 0; i < 12; ++i) pairs.push_back(checker.allocate(2 * MiB));
  void* y = checker.allocate(16 * MiB);
  void* f = checker.allocate(16 * MiB);
  for (std::size_t i = 0; i < pairs.size(); i += 2) checker.free(pairs[i]);
  checker.free(f);
  const pool_stats before = p.stats();
  ASSERT_EQ(before.mapped_bytes, device_bytes);
  ASSERT_EQ(before.cached_bytes, 28 * MiB);
  void* big = checker.allocate(20 * MiB);  // fits no free block; f and 4 MiB above it do
  const pool_stats after = p.stats();
  EXPECT_EQ(big, f) << "the largest free block was extended in place";
  EXPECT_EQ(after.cached_bytes, 8 * MiB) << "only the 4 MiB the extension lacked went back";
  EXPECT_EQ(after.mapped_bytes, device_bytes);
  checker.check();
  checker.check_patterns();
  checker.free(big);
  for (std::size_t i = 1; i < pairs.size(); i += 2) checker.free(pairs[i]);
  checker.free(x);
  checker.free(y);
}

// At the device's limit growth makes handles of at most 8 MiB (here those of the limit's approach,
// which are the last 256 MiB of each growth; once memory strands, all), so that a block outliving its
// neighbours pins at most that much free memory the out-of-memory path cannot hand back; release()
// ends it, and growth makes larger handles again: 20 MiB while the device's room is less than
// six of the largest requests, up to 64 MiB beyond (docs/RESULTS.md, section 0, "Handles at
// the device's limit", "The device filling").
TEST(PoolOutOfMemory, AtTheLimitGrowthMakesSmallerHandlesUntilRelease) {
  auto sim = std::make_shared<sim_driver>(device_with_room(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(96 * MiB);
  void* b = checker.allocate(96 * MiB);  // leaves the device room for more than six of it: growth's usual handles
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{32 * MiB, 32 * MiB, 64 * MiB, 64 * MiB}));
  set_room(*sim, 256 * MiB);  // 64 MiB left
  checker.free(a);
  // 120 MiB fits no free block and the device has 64 MiB left: the out-of-memory path hands back
  // what the growth above b lacks, and that growth is made at the limit.
  void* c = checker.allocate(120 * MiB);
  const std::multiset<std::size_t> at_limit = handle_sizes(p);
  EXPECT_EQ(at_limit.count(8 * MiB), 15u) << "c's 120 MiB in 8 MiB handles";
  EXPECT_EQ(at_limit.size(), 18u);
  EXPECT_EQ(at_limit.count(32 * MiB), 2u) << "b's two and what is left of a's";
  EXPECT_EQ(at_limit.count(64 * MiB), 1u);
  checker.check();
  checker.free(b);
  checker.free(c);
  sim->run_until_idle();
  (void)p.release();
  EXPECT_TRUE(handle_sizes(p).empty());
  void* d = checker.allocate(48 * MiB);  // the room left is less than six of a: the device fills
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{8 * MiB, 20 * MiB, 20 * MiB}))
      << "release() ended the limit: 20 MiB handles, not the limit's 8";
  checker.free(d);
  sim->run_until_idle();
  (void)p.release();
  set_room(*sim, 1024 * MiB);
  d = checker.allocate(48 * MiB);
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{48 * MiB})) << "and with the device's room, growth's usual handles";
  checker.check();
  checker.free(d);
}

// At the device's limit a pool that strands little keeps placement's rules as away from it: a
// block cutting a free 64 MiB handle leaves it whole, with no driver call. The limit's splits would
// cost a loop a few percent above its peak several times expandable segments' driver calls for no
// allocation saved. Once the out-of-memory path finds free memory stranded in the rests of handles
// live blocks pin (more than a 64th of what the pool holds), such a block splits the handle, and
// growth makes the limit's 8 MiB handles (docs/RESULTS.md, section 0, "Smaller handles at the limit
// only once memory strands").
TEST(PoolOutOfMemory, AtTheLimitPlacementSplitsOnlyOnceMemoryStrands) {
  auto sim = std::make_shared<sim_driver>(device_with_room(4096 * MiB));  // far from filling as it grows
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::vector<void*> x;
  for (int i = 0; i < 6; ++i) x.push_back(checker.allocate(64 * MiB));  // a 64 MiB handle each
  set_room(*sim, 424 * MiB);  // 40 MiB left
  for (int i : {0, 2, 4}) checker.free(x[i]);  // three whole free handles, none beside another
  sim->run_until_idle();
  // 80 MiB fits no free block and the device has 40 MiB: the out-of-memory path hands back a free
  // handle for the growth above x[5]. Every free byte was in whole free handles: nothing strands.
  void* q = checker.allocate(80 * MiB);
  // A request that could never fit beside what is in use fails and says nothing of how the pool's
  // memory lies.
  EXPECT_THROW((void)p.allocate(full_handles_device_bytes - 84 * MiB), out_of_memory);
  std::uint64_t calls = p.stats().driver.memory_calls();
  std::multiset<std::size_t> sizes = handle_sizes(p);
  void* s = checker.allocate(16 * MiB);  // a quarter of a free 64 MiB handle
  EXPECT_EQ(p.stats().driver.memory_calls(), calls) << "at the limit, nothing stranded: the handle kept whole";
  EXPECT_EQ(handle_sizes(p), sizes);
  // s strands the other 48 MiB of its handle, more than a 64th of the 400 MiB held. 70 MiB fits no
  // free block: the path hands back the last whole free handle for a growth above q, and from its
  // entry the pool strands memory.
  void* t = checker.allocate(70 * MiB);
  checker.free(s);
  sim->run_until_idle();
  calls = p.stats().driver.memory_calls();
  sizes = handle_sizes(p);
  void* u = checker.allocate(16 * MiB);  // the same cut of the same handle, now free again
  EXPECT_GT(p.stats().driver.memory_calls(), calls) << "stranding: the handle split";
  EXPECT_GT(handle_sizes(p).size(), sizes.size());
  EXPECT_EQ(handle_sizes(p).count(64 * MiB), sizes.count(64 * MiB) - 1);
  checker.check();
  for (void* b : {q, t, u, x[1], x[3], x[5]}) checker.free(b);
}

// At the limit a block that leaves at most half of an 8 MiB handle (4 MiB) uncovered keeps the
// handle whole: placing it makes no driver call. One that leaves more splits the handle, as below
// the limit, so that the free rest can go back. (Below the limit the 20 MiB block would keep its 24
// MiB handle too; at the limit, before this rule, it split it: 4 MiB is more than a quarter of
// growth's 8 MiB handles there.)
TEST(PoolOutOfMemory, AtTheLimitABlockLeavingHalfAHandleKeepsItWhole) {
  auto sim = std::make_shared<sim_driver>(device_with_room(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  // Three growths, three handles side by side, made with the device's room (not near its limit).
  std::vector<void*> xs;
  for (std::size_t bytes : {24 * MiB, 24 * MiB, 16 * MiB}) xs.push_back(checker.allocate(bytes));
  const std::multiset<std::size_t> grown{16 * MiB, 24 * MiB, 24 * MiB};
  ASSERT_EQ(handle_sizes(p), grown);
  set_room(*sim, 64 * MiB);
  // The device is full: the pool is at its limit, and stranding (a request failed).
  EXPECT_THROW((void)p.allocate(8 * MiB), out_of_memory);
  for (void* x : xs) checker.free(x);
  sim->run_until_idle();
  std::uint64_t calls = p.stats().driver.memory_calls();
  void* most = checker.allocate(20 * MiB);
  EXPECT_EQ(p.stats().driver.memory_calls(), calls) << "4 MiB of a 24 MiB handle left uncovered: kept whole";
  EXPECT_EQ(handle_sizes(p), grown);
  checker.free(most);
  sim->run_until_idle();
  calls = p.stats().driver.memory_calls();
  void* less = checker.allocate(16 * MiB);
  EXPECT_GT(p.stats().driver.memory_calls(), calls) << "8 MiB left uncovered: split";
  EXPECT_NE(handle_sizes(p), grown);
  checker.check();
  checker.free(less);
}

// At the limit growth makes 8 MiB handles, and one made before it is larger: a block cut from its
// stream's own fresh frees (the GPU still working behind them) waits for them and splits the
// handle, as for one that wake() joined, rather than pin it whole. Those splits keep loops near
// their capacity from failing (docs/RESULTS.md, section 0, "Six more rules at the device's limit").
TEST(PoolOutOfMemory, AtTheLimitAHandleMadeBeforeItWaitsForItsStreamAndSplits) {
  auto sim = std::make_shared<sim_driver>(device_with_room(1024 * MiB));  // x's growth leaves the device room
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  void* x = checker.allocate(64 * MiB, s);
  const std::multiset<std::size_t> grown{64 * MiB};
  ASSERT_EQ(handle_sizes(p), grown);
  set_room(*sim, 64 * MiB);
  // The device is full: the pool is at its limit, and stranding (a request failed).
  EXPECT_THROW((void)p.allocate(8 * MiB, s), out_of_memory);
  checker.free_after_work(x, 500.0);  // on s, behind queued work
  const std::uint64_t waits = p.stats().driver.wait_calls();
  void* small = checker.allocate(8 * MiB, s);
  EXPECT_EQ(p.stats().driver.wait_calls(), waits + 1) << "waited for the stream's frees";
  const std::vector<std::size_t> growths_sizes(8, 8 * MiB);
  EXPECT_EQ(handle_sizes(p), std::multiset<std::size_t>(growths_sizes.begin(), growths_sizes.end()))
      << "and split the handle into growth's sizes at the limit";
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  checker.check();
  checker.free(small);
  p.forget_stream(s);
}

// Near the device's limit, before any allocation has failed, growth maps the last 256 MiB of each
// growth in the limit's 8 MiB handles: the pool grows into the device's last quarter (the room a
// growth would leave is less than a quarter of what the pool would hold). Placement keeps its
// rules: a block placed there splits nothing. release() ends it, as it ends the limit (docs/RESULTS.md, section 0, "Near the
// device's limit"). The requests are small beside the device, so that it does not fill before
// (page_table::filling).
TEST(PoolOutOfMemory, NearTheLimitGrowthMakesTheLimitsHandlesBeforeAnythingFails) {
  auto sim = std::make_shared<sim_driver>(device_with_room(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::vector<void*> a;
  for (int i = 0; i < 24; ++i) a.push_back(checker.allocate(32 * MiB));  // leaves 256 MiB, more than a quarter of 768
  const std::vector<std::size_t> twenty_four(24, 32 * MiB);
  EXPECT_EQ(handle_sizes(p), std::multiset<std::size_t>(twenty_four.begin(), twenty_four.end()));
  void* b = checker.allocate(64 * MiB);  // would leave 192 MiB, less than a quarter of 832
  std::multiset<std::size_t> sizes = handle_sizes(p);
  EXPECT_EQ(sizes.count(32 * MiB), 24u) << "a's handles";
  EXPECT_EQ(sizes.count(8 * MiB), 8u) << "b's 64 MiB (under 256) in 8 MiB handles";
  EXPECT_EQ(sizes.size(), 32u);
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 0u) << "nothing has met the limit";
  for (void* x : a) checker.free(x);
  sim->run_until_idle();
  const std::uint64_t calls = p.stats().driver.memory_calls();
  void* c = checker.allocate(16 * MiB);  // cuts one of a's 32 MiB handles
  EXPECT_EQ(p.stats().driver.memory_calls(), calls) << "near the limit, not at it: no split";
  checker.check();
  checker.free(b);
  checker.free(c);
  sim->run_until_idle();
  (void)p.release();
  void* d = checker.allocate(64 * MiB);
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{64 * MiB})) << "release() ended it";
  p.set_byte_cap(128 * MiB);
  void* e = checker.allocate(48 * MiB);  // the cap leaves 16 MiB, less than a quarter of 112
  EXPECT_EQ(handle_sizes(p).count(2 * MiB), 24u)
      << "a lowered cap is looked at by the next growth: e in granules, a 256th of the cap being less";
  checker.check();
  checker.free(d);
  checker.free(e);
}

// While the device fills (a growth would leave it less room than six of the largest requests
// yet), before its limit or its last quarter, growth makes 20 MiB handles: a block a loop keeps
// from its first step pins at most that much of a handle its activations left (docs/RESULTS.md,
// section 0, "The device filling").
TEST(PoolOutOfMemory, WhileTheDeviceFillsGrowthMakes20MiBHandles) {
  auto sim = std::make_shared<sim_driver>(device_with_room(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(128 * MiB);  // leaves room for seven of it
  EXPECT_EQ(handle_sizes(p), (std::multiset<std::size_t>{64 * MiB, 64 * MiB}));
  void* b = checker.allocate(160 * MiB);  // would leave 736 MiB, less than six of it
  const std::multiset<std::size_t> sizes = handle_sizes(p);
  EXPECT_EQ(sizes.count(20 * MiB), 8u) << "b in 20 MiB handles";
  EXPECT_EQ(sizes.size(), 10u);
  EXPECT_EQ(p.stats().out_of_memory_recoveries, 0u) << "nothing has met the limit";
  checker.check();
  checker.free(a);
  checker.free(b);
}

// While the device fills, a block smaller than a quarter of a larger handle made before splits it
// into pieces of at most 20 MiB, when the handle is safe to unmap: not behind its stream's fresh
// frees, which it does not wait for (a wait there moved later layouts). A block of a quarter or
// more keeps it whole.
TEST(PoolOutOfMemory, WhileTheDeviceFillsASmallBlockSplitsAHandleMadeBefore) {
  auto sim = std::make_shared<sim_driver>(device_with_room(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* x = checker.allocate(64 * MiB);  // x and z leave room for more than six of them: 64 MiB handles
  void* z = checker.allocate(64 * MiB);
  void* y = checker.allocate(256 * MiB);  // the device fills
  ASSERT_EQ(handle_sizes(p).count(64 * MiB), 2u);
  const std::uint64_t waits = p.stats().driver.wait_calls();
  checker.free(x);
  sim->run_until_idle();
  // A miss settles the frees, and the event the stream records next covers x's: its handle is safe
  // to unmap from then on.
  void* w = checker.allocate(100 * MiB);
  std::uint64_t calls = p.stats().driver.memory_calls();
  void* quarter = checker.allocate(16 * MiB);  // in x's handle
  EXPECT_EQ(p.stats().driver.memory_calls(), calls) << "a quarter of the handle: kept whole";
  checker.free(quarter);
  void* small = checker.allocate(8 * MiB);
  EXPECT_GT(p.stats().driver.memory_calls(), calls);
  std::multiset<std::size_t> sizes = handle_sizes(p);
  EXPECT_EQ(sizes.count(64 * MiB), 1u) << "x's handle split";
  EXPECT_EQ(sizes.count(8 * MiB), 1u) << "small's own piece";
  EXPECT_EQ(sizes.count(20 * MiB), 19u) << "y's twelve, w's five and two of x's pieces: none above 20 MiB";
  // z freed behind queued work: a small block cut from it keeps its handle whole, with no wait.
  checker.free_after_work(z, 500.0);
  void* big = checker.allocate(56 * MiB);  // the rest of x's pieces
  calls = p.stats().driver.memory_calls();
  void* fresh = checker.allocate(8 * MiB);
  EXPECT_EQ(p.stats().driver.memory_calls(), calls) << "z kept whole";
  EXPECT_EQ(handle_sizes(p).count(64 * MiB), 1u);
  EXPECT_EQ(p.stats().driver.wait_calls(), waits) << "no wait";
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  checker.check();
  for (void* b : {small, big, fresh, y, w}) checker.free(b);
}

// At the limit a growth the device cannot give is not tried: the pool goes to the out-of-memory
// path at once, which hands back only what the growth that maps least lacks. Tried, it made
// handles until the driver refused and handed them all back (docs/RESULTS.md, section 0, "On an
// H100: the optimizer-state hint, the diffusion U-Net at 1.10x its peak").
TEST(PoolOutOfMemory, AtTheLimitAGrowthTheDeviceCannotGiveIsNotTried) {
  auto sim = std::make_shared<sim_driver>(device_with_room(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(96 * MiB);
  void* b = checker.allocate(96 * MiB);
  checker.free(a);
  void* c = checker.allocate(120 * MiB);  // the out-of-memory path runs: the pool is at its limit
  checker.free(c);
  sim->run_until_idle();
  std::set<std::pair<device_address, std::size_t>> before;
  for (const handle_description& h : p.describe().handles) before.insert({h.address, h.size});
  const driver_call_counts calls = p.stats().driver;
  void* d = checker.allocate(144 * MiB);  // no free block fits, and the device lacks what growth maps
  driver_call_counts spent = p.stats().driver;
  spent -= calls;
  std::size_t made = 0;
  for (const handle_description& h : p.describe().handles) made += before.count({h.address, h.size}) == 0 ? 1 : 0;
  EXPECT_GT(made, 0u);
  EXPECT_EQ(spent.of(driver_call::mem_create), made) << "every handle made is one the pool keeps";
  checker.check();
  checker.free(b);
  checker.free(d);
}

// At the limit a large request hands back its own arena's free handles before the small arenas'
// pages: taken in the arenas' order, each of those pages came back through the out-of-memory path
// at the small arena's next miss, for a large handle each.
TEST(PoolOutOfMemory, AtTheLimitALargeRequestHandsBackItsOwnArenasHandlesFirst) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::vector<void*> small;
  for (int i = 0; i < 48; ++i) small.push_back(checker.allocate(MiB));  // 24 pages of 2 MiB
  void* a = checker.allocate(64 * MiB);
  void* b = checker.allocate(8 * MiB);
  void* e = checker.allocate(64 * MiB);
  for (void* s : small) checker.free(s);
  checker.free(a);
  checker.free(e);
  sim->run_until_idle();
  auto small_bytes = [&p] {
    std::size_t bytes = 0;
    for (const block_description& d : p.describe().blocks) {
      if (d.small && d.state != block_description::status::unmapped) bytes += d.size;
    }
    return bytes;
  };
  ASSERT_EQ(small_bytes(), 48 * MiB);
  p.set_byte_cap(p.stats().mapped_bytes);  // at the limit: growth needs what goes back
  void* c = checker.allocate(100 * MiB);   // fits no free block
  EXPECT_EQ(small_bytes(), 48 * MiB) << "the small arena's free pages stay";
  checker.check();
  checker.free(b);
  checker.free(c);
}

// The limit ends when the device has room again: here a byte cap met and then lifted (as
// torch.cuda.set_per_process_memory_fraction may). While the room left is short of a quarter of
// what the pool holds, growth keeps making small handles (8 MiB at most; under a cap of 96 MiB, of
// which a 256th is less than a granule, granules); once lifted, handles of up to 64 MiB.
TEST(PoolOutOfMemory, TheLimitEndsWhenTheDeviceHasRoomAgain) {
  auto sim = std::make_shared<sim_driver>(device_with_room(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(48 * MiB);  // made with the device's room: a handle each
  void* b = checker.allocate(24 * MiB);
  p.set_byte_cap(96 * MiB);
  checker.free(a);
  // 60 MiB fits no free block and the cap leaves 24 MiB: a's handles go back, and the growth is
  // made at the limit.
  void* c = checker.allocate(60 * MiB);
  std::multiset<std::size_t> sizes = handle_sizes(p);
  EXPECT_EQ(sizes.count(24 * MiB), 1u) << "b's handle only";
  EXPECT_EQ(*sizes.rbegin(), 24 * MiB);
  EXPECT_EQ(p.stats().mapped_bytes, 84 * MiB);
  // 12 MiB left under the cap, short of a quarter of 84: still the limit.
  void* d = checker.allocate(12 * MiB);
  sizes = handle_sizes(p);
  EXPECT_EQ(sizes.count(24 * MiB), 1u);
  EXPECT_EQ(sizes.count(12 * MiB), 0u) << "d in handles of 8 MiB at most";
  checker.check();
  p.set_byte_cap(std::numeric_limits<std::size_t>::max());  // lifted
  void* e = checker.allocate(96 * MiB);
  sizes = handle_sizes(p);
  EXPECT_EQ(sizes.count(64 * MiB), 1u) << "e in a 64 MiB handle and the rest: the limit has ended";
  checker.check();
  for (void* x : {b, c, d, e}) checker.free(x);
}

// The same when the room comes from another process (here another pool on the device) handing
// back what it held: the next growth sees it and makes handles of up to 64 MiB again.
TEST(PoolOutOfMemory, TheLimitEndsWhenAnotherProcessGivesMemoryBack) {
  auto sim = std::make_shared<sim_driver>(device_with_room(256 * MiB));
  pool other(sim, 0);
  void* others = other.allocate(160 * MiB);
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(48 * MiB);
  void* b = checker.allocate(24 * MiB);
  checker.free(a);
  void* c = checker.allocate(60 * MiB);  // the device has 24 MiB left: at the limit
  EXPECT_EQ(*handle_sizes(p).rbegin(), 20 * MiB) << "made while the device filled, and at its limit";
  other.deallocate(others);
  (void)other.release();
  void* d = checker.allocate(96 * MiB);
  EXPECT_EQ(handle_sizes(p).count(64 * MiB), 1u) << "d in a 64 MiB handle and the rest";
  checker.check();
  for (void* x : {b, c, d}) checker.free(x);
}

// A request larger than the byte cap can never fit: it fails at once, with no driver call, and the
// cache stays for the smaller request a program tries next (the cache used to be unmapped and
// released first: 377 driver calls, and 216 more to get back to where it was).
TEST(PoolOutOfMemory, ARequestOverTheCapFailsAtOnceKeepingTheCache) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool_options options;
  options.byte_cap = 256 * MiB;
  pool p(sim, 0, options);
  pool_checker checker(*sim, p);
  void* live = checker.allocate(16 * MiB);
  std::vector<void*> cached;
  for (std::size_t mib : {64, 32, 32, 16, 2}) cached.push_back(checker.allocate(mib * MiB));
  for (void* c : cached) checker.free(c);
  const pool_stats before = p.stats();
  ASSERT_EQ(before.cached_bytes, 146 * MiB);
  EXPECT_THROW((void)p.allocate(512 * MiB), out_of_memory);
  const pool_stats after = p.stats();
  EXPECT_EQ(after.driver.memory_calls(), before.driver.memory_calls()) << "no driver call for a hopeless request";
  EXPECT_EQ(after.cached_bytes, before.cached_bytes);
  void* retry = checker.allocate(64 * MiB);
  EXPECT_EQ(p.stats().driver.memory_calls(), before.driver.memory_calls()) << "the retry is served by the cache";
  checker.check();
  checker.free(retry);
  checker.free(live);
}

// 100 MiB cached in 2 MiB pieces no larger request fits in (every other of 100 blocks freed, the
// rest live), then an 80 MiB request that whatever limits the pool to 256 MiB lets grow by only
// 56 MiB: 24 MiB of the cache must go back, and no more of it.
void expect_only_what_an_80_mib_request_lacks_goes_back(const std::shared_ptr<sim_driver>& sim,
                                                        const pool_options& options) {
  pool p(sim, 0, options);
  pool_checker checker(*sim, p);
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) blocks.push_back(checker.allocate(2 * MiB));
  for (std::size_t i = 0; i < blocks.size(); i += 2) checker.free(blocks[i]);
  const pool_stats before = p.stats();
  ASSERT_EQ(before.mapped_bytes, 200 * MiB);
  void* big = checker.allocate(80 * MiB);
  const pool_stats after = p.stats();
  EXPECT_LE(after.mapped_bytes, 256 * MiB);
  EXPECT_GE(after.cached_bytes, before.cached_bytes - 24 * MiB - 2 * MiB) << "more of the cache went than the request lacked";
  checker.check();
  checker.check_patterns();
  checker.free(big);
}

// When the cache must make room, only what the request lacks goes back.
TEST(PoolOutOfMemory, OnlyWhatTheRequestLacksGoesBack) {
  pool_options options;
  options.byte_cap = 256 * MiB;
  options.growth_slack = 0.5;  // growth makes new handles rather than steal: the cap stops it
  expect_only_what_an_80_mib_request_lacks_goes_back(std::make_shared<sim_driver>(small_device(1024 * MiB)), options);
}

// Growth that the driver refuses part way (its first handles made, a later one refused) hands
// back the handles it made for the request, not others.
TEST(PoolOutOfMemory, GrowthTheDriverRefusesPartWayHandsBackOnlyItsOwnHandles) {
  pool_options options;
  options.growth_slack = 0.5;  // growth makes new handles rather than steal: the driver stops it
  expect_only_what_an_80_mib_request_lacks_goes_back(std::make_shared<sim_driver>(small_device(256 * MiB)), options);
}

TEST(PoolOutOfMemory, ByteCapAndHeadroom) {
  auto sim = std::make_shared<sim_driver>(small_device(device_bytes));
  pool_options options;
  options.byte_cap = 16 * MiB;
  pool capped(sim, 0, options);
  void* x = capped.allocate(16 * MiB);
  EXPECT_THROW((void)capped.allocate(2 * MiB), out_of_memory);
  capped.deallocate(x);
  void* y = capped.allocate(10 * MiB);  // the cached 16 MiB serve it within the cap
  EXPECT_LE(capped.stats().mapped_bytes, 16 * MiB);
  capped.deallocate(y);
  capped.release();

  pool_options roomy;
  roomy.headroom = 40 * MiB;
  pool leaving_room(sim, 0, roomy);
  EXPECT_THROW((void)leaving_room.allocate(32 * MiB), out_of_memory);
  void* z = leaving_room.allocate(24 * MiB);
  leaving_room.deallocate(z);
}

// set_byte_cap() changes the cap of a running pool (torch.cuda.set_per_process_memory_fraction):
// lowered under what is mapped it unmaps nothing by itself, the cache still serves what fits in
// it, growth past it fails with the report naming the new cap (the pool intact), and lifting it
// lets the same request through.
TEST(PoolOutOfMemory, AByteCapChangedWhileThePoolRuns) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0, {});
  pool_checker checker(*sim, p);
  EXPECT_EQ(p.byte_cap(), SIZE_MAX);
  void* live = checker.allocate(8 * MiB);
  checker.free(checker.allocate(24 * MiB));
  ASSERT_EQ(p.stats().mapped_bytes, 32 * MiB);
  p.set_byte_cap(16 * MiB);
  EXPECT_EQ(p.byte_cap(), 16 * MiB);
  EXPECT_EQ(p.options().byte_cap, SIZE_MAX) << "options() stays as made";
  EXPECT_EQ(p.stats().mapped_bytes, 32 * MiB) << "lowering the cap unmaps nothing by itself";
  void* cached = checker.allocate(20 * MiB);  // the cache serves it: no growth
  checker.free(cached);
  try {
    (void)p.allocate(64 * MiB);
    FAIL() << "grew past the lowered cap";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.report().byte_cap, 16 * MiB);
    EXPECT_NE(std::string(e.what()).find("byte cap 16.00 MiB"), std::string::npos) << e.what();
  }
  checker.check();
  p.set_byte_cap(SIZE_MAX);
  void* big = checker.allocate(64 * MiB);
  checker.free(big);
  p.set_byte_cap(0);  // no growth at all, as a fraction of 0; the cache still serves
  EXPECT_THROW((void)p.allocate(128 * MiB), out_of_memory);
  void* from_cache = checker.allocate(16 * MiB);
  checker.free(from_cache);
  checker.free(live);
  checker.check();
}

}  // namespace
}  // namespace tidepool::testing
