// compare_threads.cpp: `tidepool_compare_bench threads` (issue 10, item 5): the allocators of the
// side-by-side benchmark (tidepool, cudaMallocAsync, PyTorch's caching allocator where built in)
// from C++ threads, with no Python lock in the way:
//   - cached allocate + free pairs (4 KiB, 1 MiB, 16 MiB in turn) from 1, 2, 4, 8 and 16 threads
//     at once on one device, each allocator in turn: aggregate pairs per second;
//   - the latency of a cached 1 MiB pair while another thread is inside a slow driver call: that
//     thread allocates 2 GiB (which no cache holds), frees it and hands the cache back, in a loop,
//     so it keeps creating memory; p50 / p99 / max of the pairs that began during its allocation
//     (a block held throughout keeps the timed pairs' granule mapped, so they stay cached).
// Every thread makes the device's primary context current first (the driver API needs one per
// thread; PyTorch's runtime calls find it too).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "compare_allocator.hpp"
#include "gpu_support.hpp"

namespace tidepool::bench {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t pair_sizes[] = {4096, MiB, 16 * MiB};
constexpr int thread_counts[] = {1, 2, 4, 8, 16};

// Aggregate pairs per second of `threads` threads for `seconds`.
double cached_pairs(driver& drv, compare_allocator& a, int threads, double seconds) {
  std::atomic<bool> stop{false};
  std::latch ready(threads + 1);
  std::vector<std::uint64_t> pairs(static_cast<std::size_t>(threads), 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      gpu_test::make_current(drv);
      for (const std::size_t size : pair_sizes) a.deallocate(a.allocate(size), size);  // warm this thread's cache
      ready.arrive_and_wait();
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (const std::size_t size : pair_sizes) a.deallocate(a.allocate(size), size);
        n += std::size(pair_sizes);
      }
      pairs[static_cast<std::size_t>(t)] = n;
    });
  }
  ready.arrive_and_wait();
  const auto start = clock_type::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  const double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  std::uint64_t total = 0;
  for (const auto n : pairs) total += n;
  return static_cast<double>(total) / elapsed;
}

struct latency {
  std::size_t pairs = 0;  // pairs that began while the other thread was allocating
  double p50_us = 0, p99_us = 0, max_us = 0;
  std::size_t slow_calls = 0;  // the other thread's 2 GiB allocations
};

latency beside_slow_call(driver& drv, compare_allocator& a, double seconds) {
  constexpr std::size_t big = std::size_t{2} << 30;
  std::atomic<bool> stop{false}, in_call{false};
  std::size_t slow_calls = 0;
  // A 1 MiB block held throughout keeps its granule (2 MiB) mapped when the other thread empties
  // the cache, so the timed pairs find their memory cached (in the granule's other half).
  void* keeper = a.allocate(MiB);
  a.deallocate(a.allocate(MiB), MiB);
  std::thread grower([&] {
    gpu_test::make_current(drv);
    while (!stop.load(std::memory_order_relaxed)) {
      in_call = true;
      void* ptr = a.allocate(big);
      in_call = false;
      a.deallocate(ptr, big);
      a.release_cache();  // the next allocation creates memory again
      ++slow_calls;
    }
  });
  std::vector<double> waits;
  const auto until = clock_type::now() + std::chrono::duration<double>(seconds);
  while (clock_type::now() < until) {
    const bool during = in_call.load(std::memory_order_relaxed);
    const auto start = clock_type::now();
    a.deallocate(a.allocate(MiB), MiB);
    if (during) waits.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
  }
  stop = true;
  grower.join();
  a.deallocate(keeper, MiB);
  latency l;
  l.pairs = waits.size();
  l.slow_calls = slow_calls;
  std::sort(waits.begin(), waits.end());
  if (!waits.empty()) {
    const auto at = [&](double q) { return waits[static_cast<std::size_t>(q * static_cast<double>(waits.size() - 1))]; };
    l.p50_us = at(0.5);
    l.p99_us = at(0.99);
    l.max_us = waits.back();
  }
  return l;
}

}  // namespace

int run_thread_comparison(double seconds) {
  auto& registry = allocator_registry();
  std::vector<std::string> names;
  std::vector<std::vector<double>> rates;  // [allocator][thread count]
  std::vector<latency> latencies;
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  for (const auto& [order, make] : registry) {
    auto allocator = make();
    names.push_back(allocator->name());
    rates.emplace_back();
    for (const int threads : thread_counts) {
      rates.back().push_back(cached_pairs(*drv, *allocator, threads, seconds));
      std::fprintf(stderr, "%s, %d threads: %.3f M pairs/s\n", allocator->name().c_str(), threads, rates.back().back() / 1e6);
    }
    allocator->release_cache();
    latencies.push_back(beside_slow_call(*drv, *allocator, 2 * seconds));
    allocator->release_cache();
  }
  std::printf("\ncached allocate + free pairs (4 KiB, 1 MiB, 16 MiB in turn), aggregate M pairs/s, one GPU:\n\n| threads |");
  for (const auto& n : names) std::printf(" %s |", n.c_str());
  std::printf("\n|---|");
  for (std::size_t k = 0; k < names.size(); ++k) std::printf("---|");
  std::printf("\n");
  for (std::size_t i = 0; i < std::size(thread_counts); ++i) {
    std::printf("| %d |", thread_counts[i]);
    for (const auto& r : rates) std::printf(" %.3f |", r[i] / 1e6);
    std::printf("\n");
  }
  std::printf("\na cached 1 MiB pair while another thread allocates 2 GiB (then frees it and empties the cache):\n\n"
              "| allocator | pairs timed | p50 us | p99 us | max us | 2 GiB allocations |\n|---|---|---|---|---|---|\n");
  for (std::size_t k = 0; k < names.size(); ++k) {
    const latency& l = latencies[k];
    std::printf("| %s | %zu | %.1f | %.1f | %.1f | %zu |\n", names[k].c_str(), l.pairs, l.p50_us, l.p99_us, l.max_us,
                l.slow_calls);
  }
  return 0;
}

}  // namespace tidepool::bench
