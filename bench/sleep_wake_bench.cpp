// sleep_wake_bench: what sleep and wake cost the driver on the simulated H200 (issue 13), where the
// cost is the handles (DESIGN 2a: per handle, flat from 2 to 64 MiB) and not the bytes.
//   SleepWake/<workload>: a pool holding the workload's tensors sleeps keeping nothing and wakes,
//   over and over. first_sleep_ms_per_gib: the first sleep, which unmaps the handles growth made
//   (up to 24 MiB each); sleep_ms_per_gib, wake_ms_per_gib: every later cycle, after the slept
//   handles under each tensor were joined into one (sleep_wake.cpp); *_calls: driver calls of a
//   cycle. Times are the sim's model of the driver (measured per handle size on the H200), not this
//   machine's clock, which the iteration time is.
//   Workloads: 0 = 128 tensors of 256 MiB (bench/gpu/sleep_wake.py's), 1 = Llama-7B-shaped bf16
//   weights (291 tensors, 12.6 GiB).
// Run: build/bench/sleep_wake_bench
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tidepool/pool.hpp"
#include "tidepool/sim.hpp"

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;
constexpr double gib = static_cast<double>(std::size_t{1} << 30);

std::vector<std::size_t> tensors_of(std::int64_t workload) {
  if (workload == 0) return std::vector<std::size_t>(128, 256 * mib);
  // Llama-7B in bf16: embedding and head 32000 x 4096, per layer four 4096 x 4096 attention
  // matrices, three 4096 x 11008 MLP ones and two norms.
  constexpr std::size_t width = 4096;
  constexpr std::size_t bf16 = 2;
  std::vector<std::size_t> sizes{32000 * width * bf16};
  for (int layer = 0; layer < 32; ++layer) {
    for (int i = 0; i < 4; ++i) sizes.push_back(width * width * bf16);
    for (int i = 0; i < 3; ++i) sizes.push_back(width * 11008 * bf16);
    sizes.push_back(width * bf16);
    sizes.push_back(width * bf16);
  }
  sizes.push_back(width * bf16);
  sizes.push_back(32000 * width * bf16);
  return sizes;
}

void SleepWake(benchmark::State& state) {
  auto sim = std::make_shared<tidepool::sim_driver>();  // an H200's capacity, no host memory behind it
  tidepool::pool p(sim, 0);
  std::size_t total = 0;
  std::vector<void*> live;
  for (std::size_t size : tensors_of(state.range(0))) {
    live.push_back(p.allocate(size));
    total += size;
  }
  const double gibs = static_cast<double>(total) / gib;
  const tidepool::driver_call_counts grown = p.stats().driver;
  (void)p.sleep(tidepool::sleep_keep::nothing);
  const tidepool::driver_call_counts first_sleep = p.stats().driver;
  p.wake();
  double sleep_us = 0;
  double wake_us = 0;
  std::uint64_t sleep_calls = 0;
  std::uint64_t wake_calls = 0;
  for (auto _ : state) {
    const tidepool::driver_call_counts before = p.stats().driver;
    benchmark::DoNotOptimize(p.sleep(tidepool::sleep_keep::nothing));
    const tidepool::driver_call_counts asleep = p.stats().driver;
    p.wake();
    const tidepool::driver_call_counts woken = p.stats().driver;
    sleep_us += asleep.memory_us() - before.memory_us();
    wake_us += woken.memory_us() - asleep.memory_us();
    sleep_calls += asleep.memory_calls() - before.memory_calls();
    wake_calls += woken.memory_calls() - asleep.memory_calls();
  }
  const auto cycles = static_cast<double>(state.iterations());
  state.counters["gib"] = gibs;
  state.counters["first_sleep_ms_per_gib"] = (first_sleep.memory_us() - grown.memory_us()) / 1e3 / gibs;
  state.counters["sleep_ms_per_gib"] = sleep_us / 1e3 / cycles / gibs;
  state.counters["wake_ms_per_gib"] = wake_us / 1e3 / cycles / gibs;
  state.counters["sleep_calls"] = static_cast<double>(sleep_calls) / cycles;
  state.counters["wake_calls"] = static_cast<double>(wake_calls) / cycles;
  for (void* ptr : live) p.deallocate(ptr);
}

BENCHMARK(SleepWake)->ArgName("workload")->Arg(0)->Arg(1)->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
