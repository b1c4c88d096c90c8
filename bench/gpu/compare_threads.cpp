// compare_threads.cpp: `tidepool_compare_bench threads` (issue 10, item 5): the allocators of the
// side-by-side benchmark (tidepool, cudaMallocAsync, PyTorch's caching allocator where built in)
// from C++ threads, with no Python lock in the way:
//   - cached allocate + free pairs (4 KiB, 1 MiB, 16 MiB in turn) from 1, 2, 4, 8 and 16 threads
//     at once on one device, each allocator in turn: aggregate pairs per second;
//   - the latency of a cached 1 MiB pair while another thread is inside a slow driver call: that
//     thread allocates 2 GiB (which no cache holds), frees it and hands the cache back, in a loop,
//     so it keeps creating memory; p50 / p99 / max of the pairs that began during its allocation
//     (a block held throughout keeps the timed pairs' granule mapped, so they stay cached);
//   - with 2+ GPUs, the pairs again with the threads spread over devices 0 and 1 (thread t on
//     device t % 2), each allocator with an object per device (tidepool a pool each,
//     cudaMallocAsync each device's default pool, PyTorch its allocator with the thread's device
//     set); on one GPU a line says the table was skipped.
// After each thread count, while the threads are still alive (a thread's cache goes back to the
// pool when it exits), tidepool's pool_stats::thread_caches says how many threads got a cache of
// their own (they start once a pool's lock is contended); a table of them follows each pair table.
// Every thread makes its device's primary context current first (the driver API needs one per
// thread; PyTorch's runtime calls find it too).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <latch>
#include <optional>
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

// One thread count's run: aggregate pairs per second, and each device's tidepool thread caches.
struct pairs_run {
  double pairs_per_second = 0;
  std::vector<std::optional<std::size_t>> thread_caches;  // [device]
};

// `threads` threads for `seconds`, thread t on device t % on.size() with that device's allocator.
pairs_run cached_pairs(driver& drv, const std::vector<compare_allocator*>& on, int threads, double seconds) {
  std::atomic<bool> stop{false};
  std::latch ready(threads + 1), done(threads + 1), leave(1);
  std::vector<std::uint64_t> pairs(static_cast<std::size_t>(threads), 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const std::size_t device = static_cast<std::size_t>(t) % on.size();
      compare_allocator& a = *on[device];
      gpu_test::make_current(drv, static_cast<int>(device));
      a.enter_thread();
      for (const std::size_t size : pair_sizes) a.deallocate(a.allocate(size), size);  // warm this thread's cache
      ready.arrive_and_wait();
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (const std::size_t size : pair_sizes) a.deallocate(a.allocate(size), size);
        n += std::size(pair_sizes);
      }
      pairs[static_cast<std::size_t>(t)] = n;
      done.arrive_and_wait();
      leave.wait();  // alive until the caches are counted
    });
  }
  ready.arrive_and_wait();
  const auto start = clock_type::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  done.arrive_and_wait();
  const double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  pairs_run run;
  for (compare_allocator* a : on) run.thread_caches.push_back(a->thread_caches());
  leave.count_down();
  for (auto& w : workers) w.join();
  std::uint64_t total = 0;
  for (const auto n : pairs) total += n;
  run.pairs_per_second = static_cast<double>(total) / elapsed;
  return run;
}

// "3", or "2+2" for two devices (device 0 + device 1); empty for an allocator without caches.
std::string caches_text(const std::vector<std::optional<std::size_t>>& caches) {
  std::string text;
  for (const auto& c : caches) {
    if (!c) return {};
    if (!text.empty()) text += '+';
    text += std::to_string(*c);
  }
  return text;
}

// One allocator's figures in a pair table, by thread count.
struct allocator_runs {
  std::string name;
  std::vector<pairs_run> runs;  // [thread count]
};

void print_pair_table(const char* where, const std::vector<allocator_runs>& all) {
  std::printf("\ncached allocate + free pairs (4 KiB, 1 MiB, 16 MiB in turn), aggregate M pairs/s, %s:\n\n| threads |", where);
  for (const auto& a : all) std::printf(" %s |", a.name.c_str());
  std::printf("\n|---|");
  for (std::size_t k = 0; k < all.size(); ++k) std::printf("---|");
  std::printf("\n");
  for (std::size_t i = 0; i < std::size(thread_counts); ++i) {
    std::printf("| %d |", thread_counts[i]);
    for (const auto& a : all) std::printf(" %.3f |", a.runs[i].pairs_per_second / 1e6);
    std::printf("\n");
  }
}

void print_cache_table(const char* where, const std::vector<allocator_runs>& all) {
  std::vector<const allocator_runs*> with;
  for (const auto& a : all) {
    if (!caches_text(a.runs.front().thread_caches).empty()) with.push_back(&a);
  }
  if (with.empty()) return;
  std::printf("\ntidepool threads with a cache of their own (pool_stats::thread_caches before the threads exit), %s:\n\n| threads |", where);
  for (const auto* a : with) std::printf(" %s |", a->name.c_str());
  std::printf("\n|---|");
  for (std::size_t k = 0; k < with.size(); ++k) std::printf("---|");
  std::printf("\n");
  for (std::size_t i = 0; i < std::size(thread_counts); ++i) {
    std::printf("| %d |", thread_counts[i]);
    for (const auto* a : with) std::printf(" %s |", caches_text(a->runs[i].thread_caches).c_str());
    std::printf("\n");
  }
}

// Runs every thread count on `on` (an allocator per device) and says each on stderr.
allocator_runs run_thread_counts(driver& drv, const std::vector<compare_allocator*>& on, double seconds) {
  allocator_runs result{on.front()->name(), {}};
  const char* where = on.size() == 1 ? "" : " on 2 GPUs";
  for (const int threads : thread_counts) {
    result.runs.push_back(cached_pairs(drv, on, threads, seconds));
    const pairs_run& r = result.runs.back();
    const std::string caches = caches_text(r.thread_caches);
    std::fprintf(stderr, "%s, %d threads%s: %.3f M pairs/s%s%s\n", result.name.c_str(), threads, where,
                 r.pairs_per_second / 1e6, caches.empty() ? "" : ", thread caches ", caches.c_str());
  }
  return result;
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
  a.enter_thread();
  void* keeper = a.allocate(MiB);
  a.deallocate(a.allocate(MiB), MiB);
  std::thread grower([&] {
    gpu_test::make_current(drv);
    a.enter_thread();
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
  std::vector<allocator_runs> one_gpu;
  std::vector<latency> latencies;
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  for (const auto& [order, make] : registry) {
    auto allocator = make(0);
    one_gpu.push_back(run_thread_counts(*drv, {allocator.get()}, seconds));
    allocator->release_cache();
    latencies.push_back(beside_slow_call(*drv, *allocator, 2 * seconds));
    allocator->release_cache();
  }
  print_pair_table("one GPU", one_gpu);
  std::printf("\na cached 1 MiB pair while another thread allocates 2 GiB (then frees it and empties the cache):\n\n"
              "| allocator | pairs timed | p50 us | p99 us | max us | 2 GiB allocations |\n|---|---|---|---|---|---|\n");
  for (std::size_t k = 0; k < one_gpu.size(); ++k) {
    const latency& l = latencies[k];
    std::printf("| %s | %zu | %.1f | %.1f | %.1f | %zu |\n", one_gpu[k].name.c_str(), l.pairs, l.p50_us, l.p99_us,
                l.max_us, l.slow_calls);
  }
  print_cache_table("one GPU", one_gpu);

  const int devices = drv->device_count();
  if (devices < 2) {
    std::printf("\ntwo GPUs (thread t on device t %% 2): skipped, this machine has %d GPU%s visible\n", devices,
                devices == 1 ? "" : "s");
    return 0;
  }
  std::vector<allocator_runs> two_gpus;
  for (const auto& [order, make] : registry) {
    std::vector<std::unique_ptr<compare_allocator>> owned;
    for (int device = 0; device < 2; ++device) {
      gpu_test::make_current(*drv, device);  // each is made, released and destroyed in its device's context
      owned.push_back(make(device));
    }
    two_gpus.push_back(run_thread_counts(*drv, {owned[0].get(), owned[1].get()}, seconds));
    for (int device = 1; device >= 0; --device) {
      gpu_test::make_current(*drv, device);
      owned[static_cast<std::size_t>(device)]->release_cache();
      owned[static_cast<std::size_t>(device)].reset();
    }
  }
  print_pair_table("two GPUs (thread t on device t % 2)", two_gpus);
  print_cache_table("two GPUs, device 0 + device 1", two_gpus);
  return 0;
}

}  // namespace tidepool::bench
