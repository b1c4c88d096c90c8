// Several threads allocating and freeing at once, each on its own stream, each checking that its
// blocks keep their contents: the pool's lock must keep blocks apart and figures exact.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace tidepool::testing
