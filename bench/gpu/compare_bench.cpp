// compare_bench.cpp: tidepool beside cudaMallocAsync (release threshold raised) and PyTorch's
// caching allocator (where built in), in one program run, on the same workloads:
//   - a same-size allocate + free pair, 512 B, 1 MiB and 64 MiB (ns per pair);
//   - a random mix of 256 B to 64 MiB requests (log-uniform) over 1000 and 10,000 live slots:
//     each step picks a slot, frees it if taken, else allocates into it (ns per operation).
// Every allocator sees the same sequence; each runs it once to warm its cache, then timed. The
// whole round runs twice and only the second is reported: whichever allocator a fresh process
// measures first runs slower (the host warming up), which would favour the ones measured later.
// Prints a table with ratios to tidepool. `tidepool_compare_bench threads [SECONDS]` runs the
// thread comparison of compare_threads.cpp instead.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compare_allocator.hpp"
#include "gpu_support.hpp"

namespace tidepool::bench {

std::vector<std::pair<int, allocator_factory>>& allocator_registry() {
  static std::vector<std::pair<int, allocator_factory>> registry;
  return registry;
}

namespace {

using clock_type = std::chrono::steady_clock;

struct workload {
  std::string name;
  std::string unit;  // "pair" or "op"
  std::size_t pair_size = 0;
  std::size_t pairs = 0;
  std::vector<std::uint32_t> slots;  // the mix: slot picked at each step
  std::vector<std::size_t> sizes;    // size allocated at each step, if the slot is empty
  std::size_t slot_count = 0;
};

workload pair_workload(const char* name, std::size_t bytes, std::size_t pairs) {
  workload w;
  w.name = name;
  w.unit = "pair";
  w.pair_size = bytes;
  w.pairs = pairs;
  return w;
}

workload mix_workload(std::size_t slot_count, std::size_t steps) {
  workload w;
  w.name = "mix 256 B-64 MiB, " + std::to_string(slot_count) + " slots";
  w.unit = "op";
  w.slot_count = slot_count;
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(64.0 * 1024 * 1024));
  w.slots.resize(steps);
  w.sizes.resize(steps);
  for (std::size_t i = 0; i < steps; ++i) {
    w.slots[i] = static_cast<std::uint32_t>(rng() % slot_count);
    w.sizes[i] = static_cast<std::size_t>(std::exp(log_size(rng)));
  }
  return w;
}

// Runs the pairs; returns ns per pair.
double run_pairs(compare_allocator& a, const workload& w) {
  for (std::size_t i = 0; i < 1000; ++i) a.deallocate(a.allocate(w.pair_size), w.pair_size);
  const auto start = clock_type::now();
  for (std::size_t i = 0; i < w.pairs; ++i) a.deallocate(a.allocate(w.pair_size), w.pair_size);
  const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  return ns / static_cast<double>(w.pairs);
}

// Runs the mix twice (the first pass warms the cache); returns ns per allocate or free of the
// second pass. Slots left taken are freed untimed after each pass.
double run_mix(compare_allocator& a, const workload& w) {
  std::vector<void*> ptr(w.slot_count, nullptr);
  std::vector<std::size_t> size(w.slot_count, 0);
  double ns = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const auto start = clock_type::now();
    for (std::size_t i = 0; i < w.slots.size(); ++i) {
      const std::uint32_t s = w.slots[i];
      if (ptr[s] != nullptr) {
        a.deallocate(ptr[s], size[s]);
        ptr[s] = nullptr;
      } else {
        ptr[s] = a.allocate(w.sizes[i]);
        size[s] = w.sizes[i];
      }
    }
    ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
    for (std::size_t s = 0; s < w.slot_count; ++s) {
      if (ptr[s] != nullptr) a.deallocate(ptr[s], size[s]);
      ptr[s] = nullptr;
    }
  }
  return ns / static_cast<double>(w.slots.size());
}

}  // namespace
}  // namespace tidepool::bench

int main(int argc, char** argv) {
  using namespace tidepool::bench;
  const std::string reason = tidepool::cuda_driver_unavailable_reason();
  if (!reason.empty()) {
    std::printf("no GPU: %s\n", reason.c_str());
    return 0;
  }
  auto& registry = allocator_registry();
  std::sort(registry.begin(), registry.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  if (argc > 1 && std::string(argv[1]) == "threads") {
    try {
      return run_thread_comparison(argc > 2 ? std::stod(argv[2]) : 0.5);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "compare_bench threads failed: %s\n", e.what());
      return 1;
    }
  }
  const std::vector<workload> workloads = {
      pair_workload("pair 512 B", 512, 200000), pair_workload("pair 1 MiB", std::size_t{1} << 20, 200000),
      pair_workload("pair 64 MiB", std::size_t{64} << 20, 200000), mix_workload(1000, 200000),
      mix_workload(10000, 200000)};
  std::vector<std::string> names;
  std::map<std::string, std::vector<double>> figures;  // allocator -> ns per workload
  try {
    auto drv = tidepool::make_cuda_driver();
    tidepool::gpu_test::make_current(*drv);
    for (int round = 0; round < 2; ++round) {
      const bool reported = round == 1;
      for (const auto& [order, make] : registry) {
        auto allocator = make(0);
        if (reported) names.push_back(allocator->name());
        for (const workload& w : workloads) {
          const double ns = w.unit == "pair" ? run_pairs(*allocator, w) : run_mix(*allocator, w);
          if (reported) figures[allocator->name()].push_back(ns);
          std::fprintf(stderr, "%s%s, %s: %.1f ns per %s\n", reported ? "" : "(warm-up round) ",
                       allocator->name().c_str(), w.name.c_str(), ns, w.unit.c_str());
        }
        allocator->release_cache();
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_bench failed: %s\n", e.what());
    return 1;
  }
  std::printf("\n| workload |");
  for (const auto& n : names) std::printf(" %s ns |", n.c_str());
  const bool have_tidepool = !names.empty() && names.front() == "tidepool";
  if (have_tidepool) {
    for (std::size_t k = 1; k < names.size(); ++k) std::printf(" %s / tidepool |", names[k].c_str());
  }
  std::printf("\n|---|");
  for (std::size_t k = 0; k < names.size() + (have_tidepool ? names.size() - 1 : 0); ++k) std::printf("---|");
  std::printf("\n");
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    std::printf("| %s (per %s) |", workloads[i].name.c_str(), workloads[i].unit.c_str());
    for (const auto& n : names) std::printf(" %.1f |", figures[n][i]);
    if (have_tidepool) {
      for (std::size_t k = 1; k < names.size(); ++k) std::printf(" %.1fx |", figures[names[k]][i] / figures[names[0]][i]);
    }
    std::printf("\n");
  }
  return 0;
}
