// Sleep and wake (issue 13) on a host-backed sim: every byte comes back at the same address, the
// bytes handed back are exact, nothing is unmapped under queued work, allocation while asleep is
// refused and freeing works, a wake that finds no room (or a failing driver) leaves the pool
// asleep with its contents, wake maps only the granules live blocks touch, handles under one live
// block wake as one and are split back when reused, and the checker's invariants hold after every
// step, also under random work.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <memory>
#include <random>
#include <vector>

#include "pinned_layout.hpp"
#include "pool_checker.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

// A block filled with random bytes end to end, and what it must hold.
struct filled {
  void* ptr = nullptr;
  std::vector<unsigned char> bytes;
};

// Fills the block of `checker`'s (which stops checking its own pattern there) with random bytes.
filled fill(sim_driver& sim, pool_checker& checker, void* ptr, std::size_t size, std::mt19937_64& rng) {
  checker.own_contents(ptr);
  filled f{ptr, std::vector<unsigned char>(size)};
  for (std::size_t i = 0; i < size; i += 8) {
    const std::uint64_t w = rng();
    std::memcpy(f.bytes.data() + i, &w, std::min<std::size_t>(8, size - i));
  }
  std::byte* host = sim.host_view(0, reinterpret_cast<device_address>(ptr), size);
  EXPECT_NE(host, nullptr);
  if (host != nullptr) std::memcpy(host, f.bytes.data(), size);
  return f;
}

void expect_same(sim_driver& sim, const filled& f) {
  std::byte* host = sim.host_view(0, reinterpret_cast<device_address>(f.ptr), f.bytes.size());
  ASSERT_NE(host, nullptr) << "not mapped after wake";
  EXPECT_EQ(std::memcmp(host, f.bytes.data(), f.bytes.size()), 0) << "contents of " << f.bytes.size() << " bytes differ";
}

TEST(PoolSleep, ContentsComeBackByteForByteAtTheSameAddresses) {
  auto sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::mt19937_64 rng(13);
  std::vector<filled> blocks;
  for (std::size_t size : {std::size_t{1000}, 300 * KiB, 3 * MiB + 7, 40 * MiB, std::size_t{256}}) {
    blocks.push_back(fill(*sim, checker, checker.allocate(size), size, rng));
  }
  blocks.push_back(fill(*sim, checker, checker.allocate(5 * MiB, nullptr, lifetime::persistent), 5 * MiB, rng));
  void* gone = checker.allocate(24 * MiB);  // freed before sleeping: cache, handed back by sleep
  checker.free(gone);
  checker.check();

  const std::size_t held = sim->physical_bytes(0);
  const std::size_t returned = p.sleep(sleep_keep::contents);
  EXPECT_TRUE(p.asleep());
  EXPECT_EQ(returned, held) << "every byte held goes, cache and live";
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
  const pool_stats asleep = p.stats();
  EXPECT_EQ(asleep.mapped_bytes, 0u);
  EXPECT_EQ(asleep.asleep_bytes, held - 24 * MiB) << "what live blocks touch sleeps; the free handle went";
  EXPECT_EQ(asleep.live_allocations, blocks.size());
  EXPECT_TRUE(p.describe().handles.empty());
  EXPECT_EQ(p.release(), 0u) << "nothing to release while asleep";
  checker.check();

  p.wake();
  EXPECT_FALSE(p.asleep());
  EXPECT_EQ(p.stats().asleep_bytes, 0u);
  EXPECT_EQ(sim->physical_bytes(0), held - 24 * MiB);
  for (const filled& f : blocks) expect_same(*sim, f);
  checker.check();
  checker.check_patterns();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->unmapped_access_count(), 0u);

  // Awake again, it works as before: new blocks, frees, another sleep.
  void* more = checker.allocate(7 * MiB);
  checker.check();
  checker.free(more);
  EXPECT_GT(p.sleep(sleep_keep::contents), 0u);
  p.wake();
  for (const filled& f : blocks) expect_same(*sim, f);
  for (const filled& f : blocks) checker.free(f.ptr);
  checker.check();
  const std::size_t mapped = p.stats().mapped_bytes;
  EXPECT_EQ(p.release(), mapped) << "release after wake hands back what the woken blocks held";
  EXPECT_EQ(sim->physical_bytes(0), 0u);
}

// Memory exported to another process stays awake until the export ends: that process maps it, so
// released here it would stay held there, and after wake the two would see different bytes. What
// the program writes there while the pool sleeps stays; the rest comes back from the copy.
TEST(PoolSleep, MemoryExportedToAnotherProcessStaysAwakeUntilTheExportEnds) {
  auto sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::mt19937_64 rng(5);
  filled shared = fill(*sim, checker, checker.allocate(30 * MiB), 30 * MiB, rng);
  const filled own = fill(*sim, checker, checker.allocate(48 * MiB), 48 * MiB, rng);
  exported_allocation e = p.export_allocation(shared.ptr);
  for (const int fd : e.fds) ::close(fd);
  std::size_t exported_bytes = 0;
  for (const std::size_t size : e.handle_sizes) exported_bytes += size;
  const std::size_t held = sim->physical_bytes(0);

  const std::size_t returned = p.sleep(sleep_keep::contents);
  EXPECT_TRUE(p.asleep());
  EXPECT_EQ(p.stats().mapped_bytes, held - returned) << "what stayed awake is still mapped";
  EXPECT_GE(p.stats().mapped_bytes, exported_bytes);
  EXPECT_LT(p.stats().mapped_bytes, held) << "the rest slept";
  EXPECT_EQ(sim->physical_bytes(0), held - returned);
  expect_same(*sim, shared);  // awake: readable while the pool sleeps
  std::byte* view = sim->host_view(0, reinterpret_cast<device_address>(shared.ptr), 30 * MiB);
  ASSERT_NE(view, nullptr);
  view[12345] = std::byte{0x5a};  // the other process writes it meanwhile
  shared.bytes[12345] = 0x5a;
  p.wake();
  expect_same(*sim, shared);  // not overwritten by a copy
  expect_same(*sim, own);
  checker.check();

  p.end_export(shared.ptr);
  EXPECT_EQ(p.sleep(sleep_keep::contents), held) << "the export ended: everything sleeps";
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  p.wake();
  expect_same(*sim, shared);
  expect_same(*sim, own);
  p.end_export(shared.ptr);  // more ends than exports: ignored
  EXPECT_EQ(code_of([&] { p.end_export(reinterpret_cast<void*>(0x1000)); }), error_code::invalid_pointer);
  checker.free(shared.ptr);
  checker.free(own.ptr);
  checker.check();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->unmapped_access_count(), 0u);
}

// Awake, a live block pins the rest of every handle it touches; asleep, its bytes are in the host
// copy, so wake maps only the granules live blocks touch and the rest becomes unmapped room.
TEST(PoolSleep, WakeMapsOnlyTheGranulesLiveBlocksTouch) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const std::vector<live_block> live = pinned_layout(checker, 7);
  (void)p.release();
  const std::size_t held = sim->physical_bytes(0);
  const std::size_t touched = touched_granule_bytes(live);
  ASSERT_GT(held, touched) << "no handle is pinned in part: the test proves nothing";
  EXPECT_EQ(p.sleep(sleep_keep::contents), held) << "every byte held goes, as before";
  EXPECT_EQ(p.stats().asleep_bytes, touched) << "what wake maps";
  checker.check();
  p.wake();
  EXPECT_EQ(sim->physical_bytes(0), touched);
  checker.check();
  checker.check_patterns();
  EXPECT_EQ(p.sleep(sleep_keep::contents), touched);
  p.wake();
  EXPECT_EQ(sim->physical_bytes(0), touched);
  checker.check_patterns();
  void* more = checker.allocate(30 * MiB);  // growth maps the room the trim left
  checker.check();
  checker.free(more);
  for (const live_block& b : live) checker.free(b.ptr);
  checker.check();
  (void)p.release();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->unmapped_access_count(), 0u);
}

TEST(PoolSleep, KeepNothingCopiesNothing) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(10 * MiB);
  const std::size_t held = sim->physical_bytes(0);
  EXPECT_EQ(p.sleep(sleep_keep::nothing), held);
  p.wake();
  const driver_call_counts calls = p.stats().driver;
  EXPECT_EQ(calls.of(driver_call::host_alloc), 0u);
  EXPECT_EQ(calls.of(driver_call::copy_to_host), 0u);
  EXPECT_EQ(calls.of(driver_call::copy_to_device), 0u);
  EXPECT_NE(sim->host_view(0, reinterpret_cast<device_address>(a), 10 * MiB), nullptr) << "mapped again";
  p.deallocate(a);
}

TEST(PoolSleep, AllocateWhileAsleepIsRefusedAndFreeWorks) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  void* kept = p.allocate(4 * MiB);
  void* freed = p.allocate(6 * MiB);
  (void)p.sleep();
  const pool_stats before = p.stats();
  EXPECT_EQ(code_of([&] { (void)p.allocate(1024); }), error_code::asleep);
  EXPECT_EQ(code_of([&] { (void)p.allocate(64 * MiB); }), error_code::asleep);
  EXPECT_EQ(p.stats().allocations, before.allocations) << "nothing changed";
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  p.deallocate(freed);  // works: its memory comes back with wake() as cache
  EXPECT_EQ(p.stats().live_allocations, 1u);
  EXPECT_EQ(sim->physical_bytes(0), 0u) << "a free while asleep calls no driver";
  p.wake();
  const pool_stats woken = p.stats();
  EXPECT_EQ(woken.in_use_bytes + woken.cached_bytes, woken.mapped_bytes);
  EXPECT_EQ(p.release(), woken.cached_bytes);
  p.deallocate(kept);
}

TEST(PoolSleep, DoubleSleepAndWakeOfAnAwakePoolAreClearErrors) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  void* a = p.allocate(3 * MiB);
  EXPECT_EQ(code_of([&] { p.wake(); }), error_code::asleep);
  (void)p.sleep();
  const std::size_t asleep_bytes = p.stats().asleep_bytes;
  EXPECT_EQ(code_of([&] { (void)p.sleep(); }), error_code::asleep);
  EXPECT_EQ(p.stats().asleep_bytes, asleep_bytes) << "the second sleep changed nothing";
  p.wake();
  EXPECT_EQ(code_of([&] { p.wake(); }), error_code::asleep);
  p.deallocate(a);
  // An empty pool sleeps and wakes too, handing back its cache.
  const std::size_t held = sim->physical_bytes(0);
  EXPECT_GT(held, 0u);
  EXPECT_EQ(p.sleep(), held);
  EXPECT_EQ(p.stats().asleep_bytes, 0u) << "nothing live: nothing to wake";
  p.wake();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
}

TEST(PoolSleep, OutOfMemoryDuringWakeLeavesItAsleepWithItsContents) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::mt19937_64 rng(7);
  std::vector<filled> blocks;
  for (std::size_t size : {20 * MiB, 30 * MiB, std::size_t{5000}}) blocks.push_back(fill(*sim, checker, checker.allocate(size), size, rng));
  const std::size_t asleep = p.sleep();
  // Another engine takes the device meanwhile.
  pool other(sim, 0);
  void* big = other.allocate(256 * MiB - 40 * MiB);
  try {
    p.wake();
    ADD_FAILURE() << "wake found room it should not have";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("stays asleep"), std::string::npos) << e.what();
    EXPECT_EQ(e.report().requested_bytes, asleep);
  }
  EXPECT_TRUE(p.asleep());
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(p.stats().asleep_bytes, asleep);
  EXPECT_EQ(sim->physical_bytes(0), other.stats().mapped_bytes) << "the failed wake holds nothing";
  checker.set_baseline_physical(other.stats().mapped_bytes);
  checker.check();
  other.deallocate(big);
  (void)other.release();
  checker.set_baseline_physical(0);
  p.wake();
  for (const filled& f : blocks) expect_same(*sim, f);
  checker.check();
  checker.check_patterns();
}

TEST(PoolSleep, DriverFailuresDuringWakeAndSleepLeaveAConsistentPool) {
  for (driver_call call : {driver_call::mem_create, driver_call::mem_map, driver_call::copy_to_device,
                           driver_call::stream_create}) {
    SCOPED_TRACE(std::string(to_string(call)));
    auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
    pool p(sim, 0);
    pool_checker checker(*sim, p);
    std::mt19937_64 rng(3);
    std::vector<filled> blocks;
    for (std::size_t size : {3 * MiB, 12 * MiB, std::size_t{700}}) blocks.push_back(fill(*sim, checker, checker.allocate(size), size, rng));
    (void)p.sleep();
    // The second call of each kind in the wake (the only one for its stream), so some work is undone.
    sim->fail_nth(call, call == driver_call::stream_create ? 1 : 2,
                  call == driver_call::mem_create ? driver_status::out_of_memory : driver_status::error);
    bool failed = false;
    try {
      p.wake();
    } catch (const out_of_memory&) {
      failed = true;
    } catch (const error& e) {
      failed = true;
      EXPECT_EQ(e.code(), error_code::driver_failure);
    }
    EXPECT_TRUE(failed);
    EXPECT_TRUE(p.asleep());
    EXPECT_EQ(sim->physical_bytes(0), 0u) << "what the failed wake mapped went back";
    checker.check();
    p.wake();
    for (const filled& f : blocks) expect_same(*sim, f);
    checker.check();
  }
  // A failing copy to the host: the sleep fails and the pool stays awake, every byte in place.
  for (driver_call call : {driver_call::host_alloc, driver_call::copy_to_host, driver_call::mem_unmap,
                           driver_call::mem_release}) {
    SCOPED_TRACE(std::string(to_string(call)));
    auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
    pool p(sim, 0);
    pool_checker checker(*sim, p);
    std::mt19937_64 rng(5);
    std::vector<filled> blocks;
    for (std::size_t size : {3 * MiB, 12 * MiB, std::size_t{700}}) blocks.push_back(fill(*sim, checker, checker.allocate(size), size, rng));
    sim->fail_nth(call, call == driver_call::host_alloc ? 1 : 2, driver_status::error);
    EXPECT_EQ(code_of([&] { (void)p.sleep(); }), error_code::driver_failure);
    EXPECT_FALSE(p.asleep());
    for (const filled& f : blocks) expect_same(*sim, f);
    checker.check();
    checker.check_patterns();
    void* more = checker.allocate(MiB);
    checker.free(more);
  }
}

TEST(PoolSleep, WaitsForQueuedWorkWithEventsOnTheStreamsUsed) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  void* a = p.allocate(8 * MiB, s);
  void* b = p.allocate(8 * MiB, s);
  sim->launch(0, s, 500.0, reinterpret_cast<device_address>(a), 8 * MiB);
  sim->launch(0, s, 500.0, reinterpret_cast<device_address>(b), 8 * MiB);
  p.deallocate(b, s);  // freed behind queued work
  const auto syncs_before = sim->call_counts().of(driver_call::device_synchronize);
  (void)p.sleep();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u) << "nothing unmapped under the queued work";
  EXPECT_EQ(sim->call_counts().of(driver_call::device_synchronize), syncs_before) << "events, not a device-wide wait";
  EXPECT_GE(p.stats().driver.of(driver_call::event_synchronize), 1u);
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  // Touching the sleeping memory on the GPU is counted (an illegal address on CUDA).
  sim->launch(0, s, 1.0, reinterpret_cast<device_address>(a), 4096);
  EXPECT_EQ(sim->unmapped_access_count(), 1u);
  sim->run_until_idle();
  p.wake();
  p.deallocate(a, s);
  p.forget_stream(s);
  // A forgotten stream cannot be named: the wait is device-wide.
  void* c = p.allocate(2 * MiB, s);
  sim->launch(0, s, 300.0, reinterpret_cast<device_address>(c), 2 * MiB);
  p.forget_stream(s);
  (void)p.sleep();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->call_counts().of(driver_call::device_synchronize), syncs_before + 1);
  p.wake();
  p.deallocate(c, s);
}

TEST(PoolSleep, APoolDestroyedAsleepHandsBackItsHostCopy) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  {
    pool p(sim, 0);
    (void)p.allocate(12 * MiB);
    (void)p.sleep();
    sim->reset_call_counts();
  }
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  const driver_call_counts calls = sim->call_counts();
  EXPECT_EQ(calls.of(driver_call::host_free), 1u);
  EXPECT_EQ(calls.of(driver_call::mem_unmap), 0u) << "slept handles are not unmapped twice";
  EXPECT_EQ(calls.of(driver_call::mem_release), 0u);
}

constexpr std::size_t GiB = std::size_t{1} << 30;
// The largest handle growth makes outside regions that alias (page_table.cpp).
constexpr std::size_t largest_growth_handle = 64 * MiB;

// Handles of `p` that lie wholly inside one live block (any size), and the sizes of the others.
struct handle_layout {
  std::vector<std::size_t> under_one_block;
  std::vector<std::size_t> elsewhere;
};

handle_layout layout_of(pool& p) {
  const pool_description d = p.describe();
  handle_layout out;
  for (const handle_description& h : d.handles) {
    const bool under_one = std::any_of(d.blocks.begin(), d.blocks.end(), [&](const block_description& b) {
      return b.state == block_description::status::live && b.address <= h.address &&
             h.address + h.size <= b.address + b.size;
    });
    (under_one ? out.under_one_block : out.elsewhere).push_back(h.size);
  }
  return out;
}

TEST(PoolSleep, HandlesUnderOneLiveBlockWakeAsOneAndSplitBackToGrowthsSizes) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::mt19937_64 rng(17);
  // 256 MiB from growth: several handles of at most the growth cap, all under the one block.
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  std::vector<filled> blocks;
  blocks.push_back(fill(*sim, checker, checker.allocate(256 * MiB, s), 256 * MiB, rng));
  blocks.push_back(fill(*sim, checker, checker.allocate(3 * MiB + 100), 3 * MiB + 100, rng));
  const handle_layout grown = layout_of(p);
  ASSERT_GE(grown.under_one_block.size(), 256 / 64);
  for (std::size_t size : grown.under_one_block) EXPECT_LE(size, largest_growth_handle);

  const std::size_t held = sim->physical_bytes(0);
  EXPECT_EQ(p.sleep(sleep_keep::contents), held);
  // A wake that the driver refuses part way stays asleep with the joined records, and wakes later.
  sim->fail_nth(driver_call::mem_map, 2, driver_status::error);
  EXPECT_EQ(code_of([&] { p.wake(); }), error_code::driver_failure);
  EXPECT_TRUE(p.asleep());
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(p.stats().asleep_bytes, held);
  sim->reset_call_counts();
  p.wake();
  const handle_layout woken = layout_of(p);
  ASSERT_FALSE(woken.under_one_block.empty());
  EXPECT_EQ(*std::max_element(woken.under_one_block.begin(), woken.under_one_block.end()), 256 * MiB)
      << "the big block's handles woke as one";
  EXPECT_EQ(sim->call_counts().of(driver_call::mem_create), woken.under_one_block.size() + woken.elsewhere.size());
  EXPECT_LT(woken.under_one_block.size() + woken.elsewhere.size(), grown.under_one_block.size())
      << "fewer handles made by the wake than growth made";
  EXPECT_EQ(sim->physical_bytes(0), held) << "the same bytes, in fewer handles";
  for (const filled& f : blocks) expect_same(*sim, f);
  checker.check();
  checker.check_patterns();

  // A second sleep unmaps and releases the joined handle as one.
  sim->reset_call_counts();
  EXPECT_EQ(p.sleep(sleep_keep::contents), held);
  EXPECT_EQ(sim->call_counts().of(driver_call::mem_release), woken.under_one_block.size() + woken.elsewhere.size());
  p.wake();
  for (const filled& f : blocks) expect_same(*sim, f);

  // Freed, the joined handle is split back to growth's sizes by the first smaller block placed in
  // it, which waits for its stream's frees to complete (once): kept whole, the block would pin all
  // of it. A later block finds growth's handles and waits for nothing.
  checker.free_after_work(blocks[0].ptr, 500.0);  // the GPU still busy with it on `s`
  blocks.erase(blocks.begin());
  const handle_layout freed = layout_of(p);
  ASSERT_FALSE(freed.elsewhere.empty());
  EXPECT_GT(*std::max_element(freed.elsewhere.begin(), freed.elsewhere.end()), largest_growth_handle)
      << "a joined handle, free";
  for (std::size_t size : {200 * MiB, 10 * MiB + 4096}) {
    const std::uint64_t waits = sim->call_counts().of(driver_call::event_synchronize);
    void* placed = checker.allocate(size, s);
    const handle_layout split = layout_of(p);
    for (std::size_t h : split.under_one_block) EXPECT_LE(h, largest_growth_handle) << size << " placed";
    for (std::size_t h : split.elsewhere) EXPECT_LE(h, largest_growth_handle) << size << " placed";
    EXPECT_EQ(sim->call_counts().of(driver_call::event_synchronize) - waits, size == 200 * MiB ? 1u : 0u);
    checker.check();
    checker.free(placed);
  }
  for (const filled& f : blocks) expect_same(*sim, f);
  const std::size_t releasable = p.describe().releasable_bytes;
  EXPECT_GE(releasable, 256 * MiB);
  EXPECT_EQ(p.release(), releasable) << "release stays exact";
  checker.check();
  checker.check_patterns();
}

TEST(PoolSleep, AJoinedHandleStopsAtTwoGiB) {
  auto sim = std::make_shared<sim_driver>();  // an H200's capacity, no host memory behind it
  pool p(sim, 0);
  void* big = p.allocate(4 * GiB + 512 * MiB);
  (void)p.sleep(sleep_keep::nothing);
  p.wake();
  std::vector<std::size_t> sizes;
  for (const handle_description& h : p.describe().handles) sizes.push_back(h.size);
  std::sort(sizes.rbegin(), sizes.rend());
  ASSERT_EQ(sizes.size(), 3u) << "joined into runs of at most 2 GiB";
  EXPECT_LE(sizes[0], 2 * GiB);
  EXPECT_GT(sizes[1], 2 * GiB - largest_growth_handle);
  EXPECT_EQ(sizes[0] + sizes[1] + sizes[2], 4 * GiB + 512 * MiB);
  p.deallocate(big);
  EXPECT_EQ(p.release(), 4 * GiB + 512 * MiB);
  EXPECT_EQ(sim->physical_bytes(0), 0u);
}

// Allocations of every size on two streams, frees behind queued work, and a sleep keeping the
// contents every few dozen operations: after each wake every live block holds its bytes, nothing
// was unmapped under queued work, the checker's invariants hold, and release() stays exact. Joined
// handles are freed and reused between sleeps, so their split back runs here under every mix.
TEST(PoolSleep, RandomWorkAroundSleepsKeepsEveryByteAndEveryInvariant) {
  auto sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  stream_t side = nullptr;
  ASSERT_EQ(sim->stream_create(0, &side), driver_status::success);
  std::mt19937_64 rng(29);
  std::vector<void*> live;
  std::size_t live_bytes = 0;
  std::vector<std::size_t> sizes_of;
  std::uniform_real_distribution<double> log_size(12.0, 25.5);  // 4 KiB to about 45 MiB
  auto free_one = [&] {
    const std::size_t i = rng() % live.size();
    live_bytes -= sizes_of[i];
    checker.free_after_work(live[i], rng() % 2 == 0 ? 0.0 : 300.0);
    live[i] = live.back();
    sizes_of[i] = sizes_of.back();
    live.pop_back();
    sizes_of.pop_back();
  };
  unsigned sleeps = 0;
  for (int op = 0; op < 600; ++op) {
    if (op % 60 == 59) {
      const std::size_t held = sim->physical_bytes(0);
      EXPECT_EQ(p.sleep(sleep_keep::contents), held);
      EXPECT_EQ(sim->physical_bytes(0), 0u);
      p.wake();
      ++sleeps;
      checker.check();
      checker.check_patterns();
      EXPECT_EQ(sim->unmapped_access_count(), 0u);
      continue;
    }
    if (!live.empty() && (live_bytes > 160 * MiB || rng() % 5 < 2)) {
      free_one();
      continue;
    }
    const auto size = static_cast<std::size_t>(std::exp2(log_size(rng)));
    live.push_back(checker.allocate(size, rng() % 2 == 0 ? nullptr : side));
    sizes_of.push_back(size);
    live_bytes += size;
  }
  EXPECT_EQ(sleeps, 10u);
  checker.check();
  checker.check_patterns();
  const std::size_t releasable = p.describe().releasable_bytes;
  EXPECT_EQ(p.release(), releasable);
  while (!live.empty()) free_one();
  (void)sim->device_synchronize(0);
  checker.check();
  (void)p.release();
  EXPECT_EQ(sim->physical_bytes(0), 0u);
}

TEST(PoolSleep, WithoutTheVirtualMemoryApiSleepIsUnavailable) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB, /*virtual_memory=*/false));
  pool p(sim, 0);
  void* a = p.allocate(MiB);
  EXPECT_EQ(code_of([&] { (void)p.sleep(); }), error_code::unavailable);
  EXPECT_FALSE(p.asleep());
  p.deallocate(a);
}

}  // namespace
}  // namespace tidepool::testing
