// The fault sweep (issue 10): runs a workload once cleanly to count its driver calls of each kind,
// then again once per call with that call failing (sim_driver::fail_nth: every k), then with a few
// failures at random places. Each run checks itself (a clear error or a successful retry, the
// invariants after each step, nothing leaked once everything is freed and released, the pool still
// working afterwards); the sweep says how many injection points it tried.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "tidepool/sim.hpp"

namespace tidepool::testing {

/// Called on the fresh sim before the workload runs: arms the failures of this run.
using fault_arming = std::function<void(sim_driver&)>;
/// Runs the workload once on a sim it makes, arming it first; returns the driver calls the
/// workload made after arming.
using fault_workload = std::function<driver_call_counts(const fault_arming&)>;

struct fault_sweep_result {
  std::uint64_t every_call_points = 0;  ///< runs with one failure, one per driver call of the clean run
  std::uint64_t random_runs = 0;        ///< runs with failures at random calls
  std::uint64_t random_points = 0;      ///< failures armed in those runs
  std::uint64_t clean_calls = 0;        ///< driver calls of the clean run that could fail
};

/// What must be true once everything is freed and released: nothing held by the driver's count,
/// even after a failed mem_release (the page table keeps such a handle and release() retries it).
inline void expect_nothing_held(std::size_t driver_bytes, std::size_t pool_mapped_bytes) {
  EXPECT_EQ(driver_bytes, 0u) << "the pool leaked physical memory";
  EXPECT_EQ(pool_mapped_bytes, 0u) << "the pool still counts memory as held";
}

/// The status an injected failure of `call` returns: out of memory where the driver would say so.
inline driver_status injected_status(driver_call call) {
  switch (call) {
    case driver_call::mem_create:
    case driver_call::mem_alloc:
    case driver_call::address_reserve:
      return driver_status::out_of_memory;
    default:
      return driver_status::error;
  }
}

/// Calls only the workload itself makes (the pool never creates or destroys streams): not swept.
inline bool workload_own_call(driver_call call) {
  return call == driver_call::stream_create || call == driver_call::stream_destroy;
}

/// Sweeps `workload` (`name` labels the output); stops at the first run that failed a check.
inline fault_sweep_result sweep_faults(const std::string& name, const fault_workload& workload,
                                       int random_runs = 40, int failures_per_random_run = 3) {
  fault_sweep_result result;
  const driver_call_counts clean = workload([](sim_driver&) {});
  if (::testing::Test::HasFailure()) {
    ADD_FAILURE() << name << ": the clean run failed";
    return result;
  }
  std::vector<std::pair<driver_call, std::uint64_t>> kinds;
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    const auto call = static_cast<driver_call>(k);
    if (workload_own_call(call) || clean.calls[k] == 0) continue;
    kinds.emplace_back(call, clean.calls[k]);
    result.clean_calls += clean.calls[k];
  }
  for (const auto& [call, count] : kinds) {
    for (std::uint64_t n = 1; n <= count; ++n) {
      SCOPED_TRACE(name + ": failure injected at " + std::string(to_string(call)) + " call " + std::to_string(n));
      (void)workload([call = call, n](sim_driver& sim) { sim.fail_nth(call, n, injected_status(call)); });
      ++result.every_call_points;
      if (::testing::Test::HasFailure()) return result;
    }
  }
  std::mt19937_64 rng(20260110);
  for (int run = 0; run < random_runs; ++run) {
    std::string armed;
    std::vector<std::pair<driver_call, std::uint64_t>> picks;
    for (int i = 0; i < failures_per_random_run; ++i) {
      std::uint64_t pick = rng() % result.clean_calls;
      for (const auto& [call, count] : kinds) {
        if (pick < count) {
          picks.emplace_back(call, pick + 1);
          armed += std::string(to_string(call)) + " call " + std::to_string(pick + 1) + "; ";
          break;
        }
        pick -= count;
      }
    }
    SCOPED_TRACE(name + ": failures injected at " + armed);
    (void)workload([&picks](sim_driver& sim) {
      for (const auto& [call, n] : picks) sim.fail_nth(call, n, injected_status(call));
    });
    ++result.random_runs;
    result.random_points += picks.size();
    if (::testing::Test::HasFailure()) return result;
  }
  std::printf("fault sweep %s: %llu driver calls in the clean run; %llu runs with one failure (every call), "
              "%llu runs with %d random failures each\n",
              name.c_str(), static_cast<unsigned long long>(result.clean_calls),
              static_cast<unsigned long long>(result.every_call_points),
              static_cast<unsigned long long>(result.random_runs), failures_per_random_run);
  return result;
}

}  // namespace tidepool::testing
