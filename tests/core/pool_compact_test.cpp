// Compaction (pool::compact) on a host-backed sim: afterwards the pool holds exactly the 2 MiB
// granules its live blocks touch, every live byte is where it was, the bytes returned are exact,
// the pool works on as before, the refusals are clear, and a driver failure at any of its calls
// leaves the pool consistent with every byte intact (and a later compact() finishes the job); memory
// exported to another process stays as it is until the export ends; random work on two streams
// around twenty compactions keeps all of it true.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "call_hook_driver.hpp"
#include "fault_sweep.hpp"
#include "pinned_layout.hpp"
#include "pool_checker.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

constexpr std::size_t granule = 2 * MiB;

TEST(PoolCompact, HoldsExactlyTheGranulesLiveBlocksTouchWithEveryByteInPlace) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const std::vector<live_block> live = pinned_layout(checker, 7);
  checker.check();
  const std::size_t touched = touched_granule_bytes(live);

  const std::size_t held = sim->physical_bytes(0);
  (void)p.release();
  const std::size_t after_release = sim->physical_bytes(0);
  ASSERT_GT(after_release, touched) << "no handle is pinned in part: the test proves nothing";

  const std::size_t returned = p.compact();
  EXPECT_EQ(sim->physical_bytes(0), touched) << "what live blocks touch, and nothing else, stays";
  EXPECT_EQ(returned, after_release - touched) << "the bytes returned are exact";
  EXPECT_LT(touched, held);
  checker.check();
  checker.check_patterns();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->unmapped_access_count(), 0u);
  EXPECT_FALSE(p.asleep());
  EXPECT_EQ(p.compact(), 0u) << "a second compact has nothing left to hand back";

  // The pool works on: the holes compaction left are mapped again by growth, and everything
  // goes back at the end.
  std::vector<void*> more;
  for (std::size_t bytes : {std::size_t{3000}, 5 * MiB, 17 * MiB + 11, 40 * MiB}) more.push_back(checker.allocate(bytes));
  checker.check();
  checker.check_patterns();
  for (void* m : more) checker.free(m);
  for (const live_block& b : live) checker.free(b.ptr);
  checker.check();
  (void)p.release();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
}

// Calls of every kind: the layout's own growth and placement, then compact() itself.
TEST(PoolCompact, OverSeveralLayoutsTheHeldBytesAreTheTouchedGranules) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
    pool p(sim, 0);
    pool_checker checker(*sim, p);
    const std::vector<live_block> live = pinned_layout(checker, seed);
    (void)p.compact();
    EXPECT_EQ(sim->physical_bytes(0), touched_granule_bytes(live));
    checker.check();
    checker.check_patterns();
  }
}

// Random work on two streams, some of it still queued on the GPU (frees behind work, kernels
// reading live blocks), with a compaction every round: after each, the pool holds exactly the
// granules its live blocks touch, every live byte is in place, nothing was unmapped under queued
// work, and the pool goes on serving.
TEST(PoolCompact, RandomWorkOnTwoStreamsAroundTwentyCompactions) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  stream_t side = nullptr;
  ASSERT_EQ(sim->stream_create(0, &side), driver_status::success);
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(24.0 * MiB));
  std::vector<live_block> live;
  std::size_t returned = 0;
  for (int round = 0; round < 20; ++round) {
    for (int op = 0; op < 60; ++op) {
      if (live.size() < 20 || rng() % 2 == 0) {
        const auto bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
        const stream_t stream = rng() % 3 == 0 ? side : nullptr;
        live.push_back({checker.allocate(bytes, stream), bytes});
        if (rng() % 4 == 0) {  // a kernel reading it, still running when compact() begins
          sim->launch(0, stream, 1000.0 * static_cast<double>(rng() % 5),
                      reinterpret_cast<device_address>(live.back().ptr), bytes);
        }
      } else {
        const std::size_t i = rng() % live.size();
        checker.free_after_work(live[i].ptr, 500.0 * static_cast<double>(rng() % 4));
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    SCOPED_TRACE("round " + std::to_string(round));
    returned += p.compact();
    EXPECT_EQ(sim->physical_bytes(0), touched_granule_bytes(live));
    checker.check();
    checker.check_patterns();
    EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
    EXPECT_EQ(sim->unmapped_access_count(), 0u);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(returned, 0u);
  for (const live_block& b : live) checker.free(b.ptr);
  checker.check();
  (void)p.release();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  ASSERT_EQ(sim->stream_destroy(0, side), driver_status::success);
}

// A block freed on a stream whose work is still queued keeps its memory until the work ends:
// compact() waits for it first, so nothing is unmapped under queued work and the block's
// memory goes back too.
TEST(PoolCompact, WaitsForQueuedWorkBeforeMovingOrUnmappingAnything) {
  auto sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  stream_t side = nullptr;
  ASSERT_EQ(sim->stream_create(0, &side), driver_status::success);
  std::vector<live_block> live = pinned_layout(checker, 11, 80);
  void* busy = checker.allocate(9 * MiB, side);
  checker.free_after_work(busy, 5000.0);  // freed on `side` behind 5 ms of work that touches it
  void* reading = checker.allocate(3 * MiB, side);
  sim->launch(0, side, 5000.0, reinterpret_cast<device_address>(reading), 3 * MiB);
  live.push_back({reading, 3 * MiB});
  (void)p.compact();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->physical_bytes(0), touched_granule_bytes(live));
  checker.check();
  checker.check_patterns();
  for (const live_block& b : live) checker.free(b.ptr);
  (void)p.release();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  ASSERT_EQ(sim->stream_destroy(0, side), driver_status::success);
}

// Memory exported to another process stays as it is while the export is in use (that process maps
// the handle: re-made here, the two would part), with every handle a live block shares with it;
// once the export ends, compact() re-makes it like any other.
TEST(PoolCompact, MemoryExportedToAnotherProcessStaysUntilTheExportEnds) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const std::vector<live_block> live = pinned_layout(checker, 7);
  (void)p.release();
  // A live block on a handle with a granule no live block touches: one compaction would re-make.
  const std::size_t touched_before = touched_granule_bytes(live);
  void* shared = nullptr;
  std::size_t pinned_there = 0;
  for (const handle_description& h : p.describe().handles) {
    if (h.size <= granule) continue;
    std::vector<live_block> on;
    for (const live_block& b : live) {
      const auto a = reinterpret_cast<std::uintptr_t>(b.ptr);
      if (a < h.address + h.size && h.address < a + b.bytes) on.push_back(b);
    }
    std::set<std::uintptr_t> granules;
    for (const live_block& b : on) {
      const auto a = reinterpret_cast<std::uintptr_t>(b.ptr);
      for (std::uintptr_t g = std::max(a, h.address) / granule;
           g <= (std::min(a + b.bytes, h.address + h.size) - 1) / granule; ++g) {
        granules.insert(g);
      }
    }
    if (!on.empty() && granules.size() * granule < h.size) {
      shared = on.front().ptr;
      pinned_there = h.size - granules.size() * granule;
      break;
    }
  }
  ASSERT_NE(shared, nullptr) << "no handle is pinned in part: the test proves nothing";
  exported_allocation e = p.export_allocation(shared);
  for (const int fd : e.fds) ::close(fd);
  (void)p.compact();
  exported_allocation again = p.export_allocation(shared);
  for (const int fd : again.fds) ::close(fd);
  EXPECT_EQ(again.handle_ids, e.handle_ids) << "the exported handles were re-made";
  EXPECT_GE(sim->physical_bytes(0), touched_before + pinned_there) << "what the export pins stays";
  checker.check();
  checker.check_patterns();
  p.end_export(shared);
  p.end_export(shared);
  (void)p.compact();
  EXPECT_EQ(sim->physical_bytes(0), touched_before) << "the export ended: compacted like the rest";
  checker.check();
  checker.check_patterns();
}

// While compact() waits for its copies (the lock dropped), another caller's allocation, sleep and
// wake are refused with a reason that names compact(), and a free goes through: what that free joins is handed back
// from the next compaction on, and nothing is lost or corrupted.
TEST(PoolCompact, WhileItWaitsAllocationsAreRefusedWithAReasonAndFreesGoThrough) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool* target = nullptr;
  void* victim = nullptr;
  bool armed = false;
  std::string refusal;
  error_code refused_with = error_code::invalid_argument;
  auto hooked = std::make_shared<call_hook_driver>(sim, [&](driver_call call, std::size_t) {
    if (!armed || call != driver_call::stream_synchronize) return;
    armed = false;
    try {
      (void)target->allocate(MiB);
    } catch (const error& e) {
      refusal = e.what();
      refused_with = e.code();
    }
    // Nor may sleep() or wake() run meanwhile; both say why.
    for (const std::function<void()>& f : std::vector<std::function<void()>>{
             [&] { (void)target->sleep(sleep_keep::contents); }, [&] { target->wake(); }}) {
      try {
        f();
        ADD_FAILURE() << "sleep() or wake() ran inside compact()";
      } catch (const error& e) {
        EXPECT_EQ(e.code(), error_code::asleep);
        EXPECT_NE(std::string(e.what()).find("compact"), std::string::npos) << e.what();
      }
    }
    target->deallocate(victim);
  });
  pool p(hooked, 0);
  target = &p;
  pool_checker checker(*sim, p);
  const std::vector<live_block> live = pinned_layout(checker, 5);
  victim = p.allocate(5 * MiB);  // the checker does not know it: freed inside compact()
  armed = true;
  EXPECT_GT(p.compact(), 0u);
  EXPECT_FALSE(armed) << "compact() made no copy: the test proves nothing";
  EXPECT_EQ(refused_with, error_code::asleep);
  EXPECT_NE(refusal.find("compact"), std::string::npos) << refusal;
  EXPECT_FALSE(p.asleep());
  checker.check();
  checker.check_patterns();
  (void)p.compact();
  EXPECT_EQ(sim->physical_bytes(0), touched_granule_bytes(live));
  void* after = checker.allocate(3 * MiB);  // allocations work again
  checker.free(after);
  checker.check();
}

TEST(PoolCompact, RefusesClearlyWhereItCannotRun) {
  {
    auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
    pool p(sim, 0);
    pool_checker checker(*sim, p);
    void* a = checker.allocate(5 * MiB);
    (void)p.sleep(sleep_keep::contents);
    EXPECT_EQ(code_of([&] { (void)p.compact(); }), error_code::asleep);
    p.wake();
    EXPECT_EQ(p.compact(), 0u) << "awake again, it runs (nothing to hand back here)";
    checker.check_patterns();
    checker.free(a);
  }
  {
    auto sim = std::make_shared<sim_driver>(small_device(256 * MiB, /*virtual_memory=*/false));
    pool p(sim, 0);
    EXPECT_EQ(code_of([&] { (void)p.compact(); }), error_code::unavailable);
  }
  {
    auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
    pool_options options;
    options.alias_free_handles = true;
    pool p(sim, 0, options);
    EXPECT_EQ(code_of([&] { (void)p.compact(); }), error_code::unavailable);
  }
}

// At the device's capacity the new handles cannot exist beside the old one: that handle stays as
// it is, nothing fails, and the rest is compacted.
TEST(PoolCompact, AHandleWithNoRoomToMoveStaysAsItIs) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const std::vector<live_block> live = pinned_layout(checker, 7);
  (void)p.release();
  const std::size_t held = sim->physical_bytes(0);
  sim->set_capacity_limit(0, held);  // not one byte more
  EXPECT_EQ(p.compact(), 0u);
  EXPECT_EQ(sim->physical_bytes(0), held);
  checker.check();
  checker.check_patterns();
  sim->set_capacity_limit(0, 1024 * MiB);
  EXPECT_GT(p.compact(), 0u);
  EXPECT_EQ(sim->physical_bytes(0), touched_granule_bytes(live));
  checker.check_patterns();
}

// One driver failure at each of compact()'s calls in turn: a clear error or a smaller return,
// the pool's invariants, every live byte in place, and a compact() after it reaching the touched
// granules; then everything freed goes back.
TEST(PoolCompact, ADriverFailureAtAnyCallLeavesThePoolWholeAndTheBytesInPlace) {
  auto run = [](const std::function<void(sim_driver&)>& arm) {
    auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
    pool p(sim, 0);
    pool_checker checker(*sim, p);
    const std::vector<live_block> live = pinned_layout(checker, 3, 160);
    (void)p.release();
    const driver_call_counts before = sim->call_counts();
    arm(*sim);
    try {
      (void)p.compact();
    } catch (const error& e) {
      EXPECT_EQ(e.code(), error_code::driver_failure) << e.what();
      EXPECT_NE(std::string(e.what()).find("compact"), std::string::npos) << e.what();
    }
    driver_call_counts made = sim->call_counts();
    for (std::size_t k = 0; k < driver_call_kinds; ++k) made.calls[k] -= before.calls[k];
    checker.check();
    checker.check_patterns();
    EXPECT_FALSE(p.asleep());
    EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
    (void)p.compact();
    EXPECT_EQ(sim->physical_bytes(0), touched_granule_bytes(live));
    checker.check();
    checker.check_patterns();
    for (const live_block& b : live) checker.free(b.ptr);
    (void)p.release();
    expect_nothing_held(sim->physical_bytes(0), p.stats().mapped_bytes);
    return made;
  };
  const driver_call_counts clean = run([](sim_driver&) {});
  ASSERT_GT(clean.calls[static_cast<std::size_t>(driver_call::copy_to_host)], 0u) << "nothing was compacted";
  std::uint64_t points = 0;
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    const auto call = static_cast<driver_call>(k);
    for (std::uint64_t n = 1; n <= clean.calls[k]; ++n) {
      SCOPED_TRACE(std::string("failure injected at ") + std::string(to_string(call)) + " call " + std::to_string(n));
      (void)run([call, n](sim_driver& sim) { sim.fail_nth(call, n, injected_status(call)); });
      ++points;
      if (::testing::Test::HasFailure()) return;
    }
  }
  std::printf("compact fault sweep: %llu runs with one failure (every call)\n", static_cast<unsigned long long>(points));
}

}  // namespace
}  // namespace tidepool::testing
