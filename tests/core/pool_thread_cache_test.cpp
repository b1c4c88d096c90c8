// Per-thread caches (core/thread_cache.hpp): a thread's same-size pairs served without the pool's
// lock, with figures exact, bad pointers named, a miss growing the pool within its budget rather
// than taking another thread's waiting block, and every cached block back in the pool for
// release(), the out-of-memory path, describe(), recording, forget_stream and a thread's end. Most
// tests use thread_cache_policy::always, so a cache exists from a thread's first call;
// one checks that a single thread under the default policy never gets one.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "pool_checker.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

pool_options cached_from_the_first_call() {
  pool_options options;
  options.thread_caches = thread_cache_policy::always;
  return options;
}

std::uint64_t total_calls(const sim_driver& sim) { return sim.call_counts().total_calls(); }

// A block of `bytes` freed into the calling thread's cache and handed out by it again.
void* handed_out_by_the_cache(pool& p, std::size_t bytes, stream_t stream = nullptr) {
  void* first = p.allocate(bytes, stream);
  p.deallocate(first, stream);
  void* again = p.allocate(bytes, stream);
  EXPECT_EQ(again, first) << "the cache did not hand the block out again";
  return again;
}

// A freed block waits in its thread's cache and comes back for the next request of its size, with
// no driver call, and the figures count it as cached while it waits.
TEST(PoolThreadCache, AFreedBlockComesBackForTheSameSizeWithExactFigures) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0, cached_from_the_first_call());
  void* a = p.allocate(100 * KiB);
  p.deallocate(a);
  pool_stats s = p.stats();
  EXPECT_EQ(s.thread_caches, 1u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.cached_bytes, s.mapped_bytes);
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.deallocations, 1u);

  const std::uint64_t calls = total_calls(*sim);
  void* b = p.allocate(100 * KiB);
  EXPECT_EQ(b, a);
  EXPECT_EQ(total_calls(*sim), calls);
  s = p.stats();
  EXPECT_EQ(s.in_use_bytes, 100 * KiB);
  EXPECT_EQ(s.requested_bytes, 100 * KiB);
  EXPECT_EQ(s.live_allocations, 1u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_TRUE(p.owns(b));
  EXPECT_EQ(p.allocation_size(b), 100 * KiB);
  p.deallocate(b);
  s = p.stats();
  EXPECT_EQ(s.deallocations, 2u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_FALSE(p.owns(b));
  EXPECT_EQ(p.release(), s.mapped_bytes);
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
}

TEST(PoolThreadCache, ADoubleFreeOfACachedBlockIsNamedAndLosesNothing) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0, cached_from_the_first_call());
  void* a = p.allocate(64 * KiB);
  void* keep = p.allocate(64 * KiB);
  p.deallocate(a);
  try {
    p.deallocate(a);
    ADD_FAILURE() << "a double free was taken";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::double_free) << e.what();
  }
  EXPECT_THROW((void)p.allocation_size(a), error);
  EXPECT_THROW(p.record_stream(a, nullptr), error);
  const pool_stats s = p.stats();
  EXPECT_EQ(s.live_allocations, 1u);
  EXPECT_EQ(s.in_use_bytes, 64 * KiB);
  p.deallocate(keep);
  EXPECT_EQ(p.stats().in_use_bytes, 0u);
  (void)p.release();
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
}

TEST(PoolThreadCache, AnInteriorPointerOfAHandedOutBlockIsNamedSo) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0, cached_from_the_first_call());
  void* b = handed_out_by_the_cache(p, 64 * KiB);
  try {
    p.deallocate(static_cast<char*>(b) + 256);
    ADD_FAILURE() << "an interior pointer was freed";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_pointer) << e.what();
  }
  p.deallocate(b);
  EXPECT_EQ(p.stats().live_allocations, 0u);
}

// Another thread frees what this thread's cache handed out: the pool takes it back from the cache
// and frees it as any block; both threads go on with exact figures and the bytes of the others.
TEST(PoolThreadCache, ABlockHandedOutByOneThreadIsFreedByAnother) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0, cached_from_the_first_call());
  pool_checker check(*sim, p);
  void* kept = check.allocate(300 * KiB);
  void* b = handed_out_by_the_cache(p, 300 * KiB);
  std::thread other([&] {
    p.deallocate(b);
    void* c = p.allocate(300 * KiB);  // the other thread's own cache now has room for it
    p.deallocate(c);
  });
  other.join();
  check.check();
  check.check_patterns();
  void* d = check.allocate(300 * KiB);
  check.check();
  check.free(d);
  check.free(kept);
  check.check();
  (void)p.release();
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
}

// A block freed on another stream than the one it was allocated on leaves the cache: the stream it
// was freed on must finish its work before another stream reuses it.
TEST(PoolThreadCache, ABlockFreedOnAnotherStreamIsNotReusedBeforeThatStreamsWork) {
  auto sim = std::make_shared<sim_driver>(small_device());
  stream_t one = nullptr, two = nullptr;
  ASSERT_EQ(sim->stream_create(0, &one), driver_status::success);
  ASSERT_EQ(sim->stream_create(0, &two), driver_status::success);
  pool p(sim, 0, cached_from_the_first_call());
  void* b = handed_out_by_the_cache(p, 128 * KiB, one);
  sim->launch(0, two, 1000.0, reinterpret_cast<device_address>(b), 128 * KiB);
  p.deallocate(b, two);
  void* c = p.allocate(128 * KiB, one);
  EXPECT_NE(c, b) << "stream one reused a block stream two's queued work still touches";
  p.deallocate(c, one);
  sim->run_until_idle();
  (void)p.release();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
  (void)sim->stream_destroy(0, one);
  (void)sim->stream_destroy(0, two);
}

// forget_stream: a block cached for a stream handle that may name a new stream now leaves the cache.
TEST(PoolThreadCache, ForgettingAStreamTakesItsBlocksOutOfTheCache) {
  auto sim = std::make_shared<sim_driver>(small_device());
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  pool p(sim, 0, cached_from_the_first_call());
  void* a = p.allocate(128 * KiB, s);
  sim->launch(0, s, 1000.0, reinterpret_cast<device_address>(a), 128 * KiB);
  p.deallocate(a, s);
  p.forget_stream(s);
  // The same handle, a new stream: it must not get the block the old one's work still touches.
  void* b = p.allocate(128 * KiB, s);
  EXPECT_NE(b, a);
  p.deallocate(b, s);
  sim->run_until_idle();
  (void)p.release();
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
  (void)sim->stream_destroy(0, s);
}

TEST(PoolThreadCache, DescribeShowsCachedBlocksAsWhatTheyAreToTheProgram) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0, cached_from_the_first_call());
  void* a = p.allocate(200 * KiB);
  void* b = p.allocate(200 * KiB);
  p.deallocate(a);
  p.deallocate(b);
  void* c = p.allocate(200 * KiB);  // handed out by the cache; the other one waits there
  const pool_description d = p.describe();
  std::size_t live = 0;
  for (const block_description& bd : d.blocks) {
    if (bd.state != block_description::status::live) continue;
    ++live;
    EXPECT_EQ(bd.address, reinterpret_cast<std::uintptr_t>(c));
    EXPECT_EQ(bd.requested, 200 * KiB);
  }
  EXPECT_EQ(live, 1u);
  EXPECT_EQ(d.stats.live_allocations, 1u);
  p.deallocate(c);
  EXPECT_EQ(p.stats().live_allocations, 0u);
}

// The out-of-memory path takes the caches' blocks back before it gives up: a block waiting in one
// thread's cache does not make another thread's request fail.
TEST(PoolThreadCache, AnotherThreadsRequestGetsWhatACacheHolds) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool_options options = cached_from_the_first_call();
  options.byte_cap = 48 * MiB;
  pool p(sim, 0, options);
  void* a = p.allocate(30 * MiB);
  p.deallocate(a);  // waits in this thread's cache
  EXPECT_EQ(p.stats().in_use_bytes, 0u);
  void* b = nullptr;
  std::thread other([&] { b = p.allocate(40 * MiB); });
  other.join();
  ASSERT_NE(b, nullptr);
  p.deallocate(b);
  EXPECT_EQ(p.stats().in_use_bytes, 0u);
}

// A miss with room in the growth budget grows the pool and leaves a block waiting in another
// thread's cache where it is: taking it would make that thread miss in turn, and threads with one
// block of a size between them would chase each other through the slow path for ever.
TEST(PoolThreadCache, AMissGrowsInsteadOfTakingAnotherThreadsWaitingBlock) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0, cached_from_the_first_call());
  std::latch freed(1), grown(1);
  void* theirs = nullptr;
  void* theirs_again = nullptr;
  std::uint64_t reuse_calls = 0;
  std::thread other([&] {
    theirs = p.allocate(16 * MiB);
    p.deallocate(theirs);  // waits in this thread's cache
    freed.count_down();
    grown.wait();
    const std::uint64_t before = total_calls(*sim);
    theirs_again = p.allocate(16 * MiB);
    reuse_calls = total_calls(*sim) - before;
    p.deallocate(theirs_again);
  });
  freed.wait();
  void* mine = p.allocate(16 * MiB);
  EXPECT_NE(mine, theirs);
  grown.count_down();
  other.join();  // its cache goes back to the pool
  EXPECT_EQ(theirs_again, theirs) << "the other thread's cache lost its block";
  EXPECT_EQ(reuse_calls, 0u);
  p.deallocate(mine);
  const pool_stats s = p.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.mapped_bytes, 32 * MiB);
}

// A thread's end gives its cache back: nothing stays lent, counts are kept.
TEST(PoolThreadCache, AThreadsEndGivesItsCacheBack) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0, cached_from_the_first_call());
  void* handed_out = nullptr;
  std::thread worker([&] {
    for (int i = 0; i < 10; ++i) p.deallocate(p.allocate(64 * KiB));
    handed_out = handed_out_by_the_cache(p, 128 * KiB);  // still live when the thread ends
  });
  worker.join();
  pool_stats s = p.stats();
  EXPECT_EQ(s.thread_caches, 0u);
  EXPECT_EQ(s.allocations, 12u);
  EXPECT_EQ(s.deallocations, 11u);
  EXPECT_EQ(s.live_allocations, 1u);
  EXPECT_EQ(s.in_use_bytes, 128 * KiB);
  EXPECT_EQ(p.allocation_size(handed_out), 128 * KiB);
  p.deallocate(handed_out);
  (void)p.release();
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
}

// A pool destroyed while a thread holds a cache for it, then a new pool on that thread: the
// thread's end and the new pool never reach the old one.
TEST(PoolThreadCache, APoolDestroyedBeforeItsThreadsEndIsLeftAlone) {
  auto sim = std::make_shared<sim_driver>(small_device());
  std::atomic<int> step{0};
  std::unique_ptr<pool> first = std::make_unique<pool>(sim, 0, cached_from_the_first_call());
  std::thread worker([&] {
    first->deallocate(first->allocate(64 * KiB));
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
    for (int i = 0; i < 6; ++i) {  // more pools than a thread keeps slots for
      pool later(sim, 0, cached_from_the_first_call());
      later.deallocate(later.allocate(64 * KiB));
      EXPECT_EQ(later.stats().thread_caches, 1u);
    }
  });
  while (step.load() != 1) std::this_thread::yield();
  first.reset();
  step = 2;
  worker.join();
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
}

// Recording sees every allocation and free: no cache serves while it records.
TEST(PoolThreadCache, RecordingSeesEveryCallWhileCachesHoldBlocks) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0, cached_from_the_first_call());
  void* held = handed_out_by_the_cache(p, 64 * KiB);
  p.start_recording(1000, nullptr, nullptr);
  for (int i = 0; i < 5; ++i) p.deallocate(p.allocate(32 * KiB));
  p.deallocate(held);
  std::vector<recorded_event> events;
  p.stop_recording(events);
  std::size_t allocations = 0, frees = 0;
  for (const recorded_event& e : events) {
    allocations += e.what == recorded_event::kind::allocate ? 1u : 0u;
    frees += e.what == recorded_event::kind::free ? 1u : 0u;
  }
  EXPECT_EQ(allocations, 6u);  // the live block at the start, then five
  EXPECT_EQ(frees, 6u);
}

// Under the default policy a program with one allocating thread never gets a cache (its placement
// and figures are exactly as without caches).
TEST(PoolThreadCache, OneThreadNeverGetsACacheByDefault) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0);
  for (int i = 0; i < 5000; ++i) p.deallocate(p.allocate(static_cast<std::size_t>(1 + i % 7) * 4 * KiB));
  EXPECT_EQ(p.stats().thread_caches, 0u);
}

// Threads hammering one pool under the default policy get caches, and the figures stay exact.
TEST(PoolThreadCache, ContendedThreadsGetCachesAndFiguresStayExact) {
  auto sim = std::make_shared<sim_driver>(small_device());
  pool p(sim, 0);
  constexpr int threads = 4;
  std::vector<std::thread> workers;
  std::atomic<bool> go{false};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      std::vector<void*> held;
      for (int i = 0; i < 20000; ++i) {
        void* x = p.allocate(static_cast<std::size_t>(1 + i % 3) * 64 * KiB);
        if (i % 5 == 0) {
          held.push_back(x);
        } else {
          p.deallocate(x);
        }
        if (held.size() > 8) {
          p.deallocate(held.front());
          held.erase(held.begin());
        }
      }
      const pool_stats mid = p.stats();
      EXPECT_EQ(mid.cached_bytes + mid.in_use_bytes, mid.mapped_bytes);
      for (void* x : held) p.deallocate(x);
    });
  }
  go = true;
  for (auto& w : workers) w.join();
  const pool_stats s = p.stats();
  EXPECT_EQ(s.allocations, std::uint64_t{threads} * 20000u);
  EXPECT_EQ(s.deallocations, s.allocations);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.thread_caches, 0u);  // the threads ended
  EXPECT_EQ(p.release(), s.mapped_bytes);
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
}

}  // namespace
}  // namespace tidepool::testing
