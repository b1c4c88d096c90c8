// thread_scaling_bench: cached allocate + free from many threads at once (issue 10), on the
// simulated GPU (no driver call is on the cached path; scripts/gpu.sh's `thread-scaling` step runs
// bench/gpu/thread_scaling.py for the GPU and PyTorch's allocator beside it).
//   CachedPairs/devices:<d>/threads:<n>: each of n threads allocates and frees blocks of 4 KiB,
//   1 MiB and 16 MiB in turn on a stream of its own, on device (thread index mod d) of one
//   process-wide driver (one pool per device). items_per_second is the aggregate throughput of
//   allocate+free pairs over all threads (real time).
//   CachedBesideSlowCall/slow_us:<t>: one thread allocates a block no cache holds and hands it back
//   (release()) in a loop, so it keeps entering mem_create, each made to take t microseconds
//   (busy-waited in the call, through tests/core/call_hook_driver.hpp); another thread times cached
//   allocate+free pairs of 1 MiB on its own stream. cached_p50_us, cached_p99_us, cached_max_us:
//   pairs that began while the first thread was inside mem_create; pairs_in_slow_call: how many.
// Run: build/bench/thread_scaling_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/call_hook_driver.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/sim.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// One simulated machine of two devices and one pool on each, shared by every benchmark thread.
struct machine {
  std::shared_ptr<tidepool::sim_driver> sim;
  std::vector<std::unique_ptr<tidepool::pool>> pools;
  std::vector<tidepool::stream_t> streams;  // one per thread slot (16 per device)
};

machine& shared_machine() {
  static machine m = [] {
    tidepool::sim_config config;
    config.device_count = 2;
    config.capacity = std::size_t{64} << 30;
    config.devices_with_context = {0, 1};
    machine made;
    made.sim = std::make_shared<tidepool::sim_driver>(config);
    for (int d = 0; d < 2; ++d) made.pools.push_back(std::make_unique<tidepool::pool>(made.sim, d));
    made.streams.resize(32);
    for (int i = 0; i < 32; ++i) (void)made.sim->stream_create(i % 2, &made.streams[static_cast<std::size_t>(i)]);
    return made;
  }();
  return m;
}

void CachedPairs(benchmark::State& state) {
  machine& m = shared_machine();
  const int devices = static_cast<int>(state.range(0));
  const int device = state.thread_index() % devices;
  // Streams alternate between the devices: thread t on device d takes a stream of that device.
  const std::size_t stream_index = static_cast<std::size_t>(state.thread_index() / devices * 2 + device);
  tidepool::pool& p = *m.pools[static_cast<std::size_t>(device)];
  const tidepool::stream_t stream = m.streams[stream_index];
  const std::size_t sizes[] = {4096, 1 * MiB, 16 * MiB};
  for (std::size_t size : sizes) p.deallocate(p.allocate(size, stream), stream);  // warm this stream's cache
  std::size_t i = 0;
  for (auto _ : state) {
    void* ptr = p.allocate(sizes[i++ % 3], stream);
    benchmark::DoNotOptimize(ptr);
    p.deallocate(ptr, stream);
  }
  state.SetItemsProcessed(state.iterations());
}

void busy_wait(double us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

void CachedBesideSlowCall(benchmark::State& state) {
  using clock = std::chrono::steady_clock;
  const double slow_us = static_cast<double>(state.range(0));
  tidepool::sim_config config;
  config.capacity = std::size_t{16} << 30;
  config.devices_with_context = {0};
  auto sim = std::make_shared<tidepool::sim_driver>(config);
  std::atomic<bool> in_slow_call{false};
  auto slow = std::make_shared<tidepool::testing::call_hook_driver>(sim, [&](tidepool::driver_call call, std::size_t) {
    if (call != tidepool::driver_call::mem_create) return;
    in_slow_call = true;
    busy_wait(slow_us);
    in_slow_call = false;
  });
  tidepool::pool p(slow, 0);
  tidepool::stream_t grower = nullptr;
  tidepool::stream_t timed = nullptr;
  (void)sim->stream_create(0, &grower);
  (void)sim->stream_create(0, &timed);
  // A block held throughout keeps its granule mapped through the other thread's release(), so
  // the timed pairs find their 1 MiB cached (the granule's other half).
  void* keeper = p.allocate(1 * MiB, timed);
  p.deallocate(p.allocate(1 * MiB, timed), timed);  // cached on `timed`
  std::vector<double> waits_us;
  for (auto _ : state) {
    std::atomic<bool> stop{false};
    std::thread growing([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        void* ptr = p.allocate(256 * MiB, grower);
        p.deallocate(ptr, grower);
        (void)p.release();  // the next allocation creates handles again
      }
    });
    const auto until = clock::now() + std::chrono::milliseconds(200);
    while (clock::now() < until) {
      const bool during = in_slow_call.load(std::memory_order_relaxed);
      const auto start = clock::now();
      void* ptr = p.allocate(1 * MiB, timed);
      p.deallocate(ptr, timed);
      if (during) waits_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - start).count());
    }
    stop = true;
    growing.join();
  }
  p.deallocate(keeper, timed);
  std::sort(waits_us.begin(), waits_us.end());
  const auto at = [&](double q) {
    return waits_us.empty() ? 0.0 : waits_us[static_cast<std::size_t>(q * static_cast<double>(waits_us.size() - 1))];
  };
  state.counters["cached_p50_us"] = at(0.5);
  state.counters["cached_p99_us"] = at(0.99);
  state.counters["cached_max_us"] = waits_us.empty() ? 0.0 : waits_us.back();
  state.counters["pairs_in_slow_call"] = static_cast<double>(waits_us.size());
}

}  // namespace

BENCHMARK(CachedPairs)->ArgName("devices")->Arg(1)->Arg(2)->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(CachedBesideSlowCall)->ArgName("slow_us")->Arg(100)->Arg(1000)->Iterations(3)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
