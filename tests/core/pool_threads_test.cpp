// Threads: several allocating and freeing at once, each on its own stream, each checking that its
// blocks keep their contents (the pool's lock keeps blocks apart and figures exact); a cached
// allocation that must not wait behind a long driver call on another thread; and a thread that
// waits for the lock sleeps instead of spinning.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/spin_lock.hpp"
#include "call_hook_driver.hpp"
#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

TEST(PoolThreads, ConcurrentAllocateAndFree) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  constexpr int threads = 4;
  constexpr int operations = 3000;
  std::vector<stream_t> streams(threads);
  for (auto& s : streams) ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  std::atomic<int> corrupted{0};

  auto worker = [&](int index) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(index) + 100);
    struct held {
      void* ptr;
      std::size_t bytes;
      std::uint64_t tag;
    };
    std::vector<held> mine;
    for (int op = 0; op < operations; ++op) {
      if (mine.size() < 16 && (rng() % 2 == 0 || mine.empty())) {
        const std::size_t bytes = std::size_t{1} << (rng() % 23);  // 1 B to 4 MiB
        void* ptr = p.allocate(bytes, streams[static_cast<std::size_t>(index)]);
        const std::uint64_t tag = rng();
        std::byte* host = sim->host_view(0, reinterpret_cast<device_address>(ptr), bytes);
        if (host == nullptr) {
          ++corrupted;
        } else {
          std::memcpy(host, &tag, std::min<std::size_t>(bytes, 8));
        }
        mine.push_back({ptr, bytes, tag});
      } else {
        const std::size_t i = rng() % mine.size();
        const held h = mine[i];
        const std::byte* host = sim->host_view(0, reinterpret_cast<device_address>(h.ptr), h.bytes);
        if (host == nullptr || std::memcmp(host, &h.tag, std::min<std::size_t>(h.bytes, 8)) != 0) ++corrupted;
        p.deallocate(h.ptr, streams[static_cast<std::size_t>(index)]);
        mine[i] = mine.back();
        mine.pop_back();
      }
    }
    for (const held& h : mine) p.deallocate(h.ptr, streams[static_cast<std::size_t>(index)]);
  };
  std::vector<std::thread> pool_threads;
  for (int t = 0; t < threads; ++t) pool_threads.emplace_back(worker, t);
  // Meanwhile another thread reads the figures and releases now and then.
  std::thread observer([&] {
    for (int i = 0; i < 50; ++i) {
      const pool_stats s = p.stats();
      if (s.in_use_bytes + s.cached_bytes != s.mapped_bytes) ++corrupted;
      if (i % 10 == 0) p.release();
      std::this_thread::yield();
    }
  });
  for (auto& t : pool_threads) t.join();
  observer.join();
  EXPECT_EQ(corrupted.load(), 0);
  const pool_stats s = p.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.allocations, s.deallocations);
  p.release();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// Runs `work` on a thread while another thread is inside a held driver call; true if `work` was
// done before the held call was let go. The deadline only keeps a broken pool from hanging the
// test: what is checked is the order.
template <class Start, class Work>
bool done_while_held(held_call_driver& driver, driver_call call, Start&& start, Work&& work) {
  driver.hold(call);
  std::thread inside(std::forward<Start>(start));
  driver.wait_until_held();
  std::atomic<bool> done{false};
  std::thread other([&] {
    work();
    done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool before_release = done;
  driver.release_held();
  other.join();
  inside.join();
  return before_release;
}

TEST(PoolThreads, CachedAllocationDoesNotWaitForADeviceWideWait) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  auto held = std::make_shared<held_call_driver>(sim);
  pool p(held, 0);
  stream_t s = nullptr;
  stream_t t = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  ASSERT_EQ(sim->stream_create(0, &t), driver_status::success);
  p.deallocate(p.allocate(4 * MiB, t), t);  // cached on t
  p.deallocate(p.allocate(8 * MiB, s), s);
  const bool done = done_while_held(
      *held, driver_call::device_synchronize, [&] { (void)p.release(); },
      [&] { p.deallocate(p.allocate(4 * MiB, t), t); });
  EXPECT_TRUE(done) << "a cached allocation waited for release()'s device-wide wait on another thread";
  EXPECT_EQ(p.stats().in_use_bytes, 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST(PoolThreads, CachedAllocationDoesNotWaitForTheAsyncPoolTrim) {
  auto sim = std::make_shared<sim_driver>(small_device(64 * MiB));
  auto held = std::make_shared<held_call_driver>(sim);
  pool p(held, 0);
  stream_t t = nullptr;
  ASSERT_EQ(sim->stream_create(0, &t), driver_status::success);
  p.deallocate(p.allocate(2 * MiB, t), t);  // cached on t
  sim->park_in_async_pool(0, 48 * MiB);
  void* big = nullptr;
  const bool done = done_while_held(
      *held, driver_call::async_pool_trim, [&] { big = p.allocate(40 * MiB); },
      [&] { p.deallocate(p.allocate(2 * MiB, t), t); });
  EXPECT_TRUE(done) << "a cached allocation waited for the out-of-memory path's trim on another thread";
  ASSERT_NE(big, nullptr);
  p.deallocate(big);
}

TEST(PoolThreads, CachedAllocationDoesNotWaitForAFallbackFree) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB, /*virtual_memory=*/false));
  auto held = std::make_shared<held_call_driver>(sim);
  pool p(held, 0);
  stream_t t = nullptr;
  ASSERT_EQ(sim->stream_create(0, &t), driver_status::success);
  void* kept = p.allocate(2 * MiB, t);  // its segment stays
  p.deallocate(p.allocate(2 * MiB, t), t);
  p.deallocate(p.allocate(16 * MiB), nullptr);  // a wholly free segment, released below
  const bool done = done_while_held(
      *held, driver_call::mem_free, [&] { (void)p.release(); },
      [&] { p.deallocate(p.allocate(2 * MiB, t), t); });
  EXPECT_TRUE(done) << "a cached allocation waited for cuMemFree on another thread";
  p.deallocate(kept, t);
}

// A thread that finds the lock held for long sleeps in the kernel (state S in /proc) rather than
// spinning or yielding (state R).
TEST(PoolLock, AWaiterSleeps) {
  detail::spin_lock lock;
  lock.lock();
  std::atomic<long> waiter_tid{0};
  std::thread waiter([&] {
    waiter_tid = static_cast<long>(syscall(SYS_gettid));
    lock.lock();
    lock.unlock();
  });
  while (waiter_tid == 0) std::this_thread::yield();
  const std::string stat_path = "/proc/self/task/" + std::to_string(waiter_tid.load()) + "/stat";
  auto state = [&] {
    std::ifstream in(stat_path);
    std::string line;
    std::getline(in, line);
    const auto close = line.rfind(')');
    return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  char seen = state();
  while (seen != 'S' && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    seen = state();
  }
  EXPECT_EQ(seen, 'S') << "the waiter never slept: it spins";
  lock.unlock();
  waiter.join();
}

}  // namespace
}  // namespace tidepool::testing
