// The stress test on sim (issue 10): the workload of stress_workload.hpp, 8 threads x 4 streams,
// on a host-backed simulated device with a byte cap that makes out-of-memory frequent. At the end
// the pool's counts equal the program's, and once everything is freed and released nothing is
// mapped. Bounded by an operation count; TIDEPOOL_STRESS_OPS (operations per thread),
// TIDEPOOL_STRESS_SECONDS (a time limit) and TIDEPOOL_STRESS_SEED make a longer soak of it.
#include <gtest/gtest.h>

#include <cstdio>

#include "pool_checker.hpp"
#include "stress_workload.hpp"

namespace tidepool::testing {
namespace {

// `coverage`: also expect that each kind of event happened (a run of a few hundred operations,
// as a short time limit under a sanitizer gives, may miss one).
stress_result run_stress_on_sim(const stress_options& so, bool coverage = true,
                                thread_cache_policy caches = thread_cache_policy::when_contended) {
  const int threads = so.threads;
  sim_config config = small_device(2048 * MiB);
  auto sim = std::make_shared<sim_driver>(config);
  pool_options options;
  options.thread_caches = caches;
  // About what the threads hold at once (320 MiB for 8): out of memory is frequent.
  options.byte_cap = static_cast<std::size_t>(threads) * 40 * MiB;
  pool p(sim, 0, options);
  sim_stress_backend backend(*sim);
  stress_result r;
  {
    stress_workload w(p, backend, so);
    r = w.run();
    print_stress_result("on sim", so, r);
    EXPECT_EQ(r.corrupted, 0u);
    EXPECT_EQ(r.bad_errors, 0u);
    EXPECT_EQ(w.observer_errors(), 0u);
    EXPECT_EQ(backend.unmapped_at_allocation(), 0u);
    EXPECT_LE(r.peak_live_blocks, w.live_bound()) << "the program's live set grew with the run";
    // The pool's counts are the program's.
    const pool_stats s = p.stats();
    EXPECT_EQ(s.allocations, r.allocations);
    EXPECT_EQ(s.deallocations, r.deallocations);
    EXPECT_EQ(s.live_allocations, w.live_blocks());
    EXPECT_EQ(s.requested_bytes, w.live_requested_bytes());
    EXPECT_EQ(s.in_use_bytes + s.cached_bytes, s.mapped_bytes);
    EXPECT_LE(s.peak_mapped_bytes, options.byte_cap);
    EXPECT_EQ(s.mapped_bytes, sim->physical_bytes(0));
    if (coverage) {  // the workload did what it is for
      EXPECT_GT(r.out_of_memory, 0u);
      EXPECT_GT(r.handed_over, 0u);
      EXPECT_GT(r.recorded, 0u);
      EXPECT_GT(r.streams_recreated, 0u);
      EXPECT_GT(r.freed_by_hook, 0u);
    }
    EXPECT_TRUE(w.free_all());
  }
  const pool_stats s = p.stats();
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.allocations, s.deallocations);
  p.release();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  EXPECT_EQ(sim->mapped_bytes(0), 0u);
  EXPECT_TRUE(sim->mappings(0).empty());
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  return r;
}

stress_options with_threads(int threads) {
  stress_options so;
  so.threads = threads;
  return so;
}

TEST(PoolStress, EightThreadsFourStreamsEach) { run_stress_on_sim(stress_options_from_environment(with_threads(8))); }

// Every thread with a cache from its first call, and sizes that repeat (12 of them, 256 B-64 MiB),
// so blocks wait in threads' caches while others free them, record_stream them, forget their
// streams, run out of memory and release.
TEST(PoolStress, EightThreadsWithThreadCachesAndRepeatedSizes) {
  stress_options so = stress_options_from_environment(with_threads(8), 200);
  so.size_classes = 12;
  const stress_result r = run_stress_on_sim(so, true, thread_cache_policy::always);
  EXPECT_GT(r.most_thread_caches, 0u);
}

// Two threads: fewer collisions, more of each thread's own stream reuse and out-of-memory retries.
TEST(PoolStress, TwoThreads) { run_stress_on_sim(stress_options_from_environment(with_threads(2), 100)); }

// A soak's time limit: no thread starts an operation after it, and the run ends with every check
// made (what a soak on a slow machine relies on to give a verdict at all).
TEST(PoolStress, TimeLimitEndsTheRunWithAVerdict) {
  stress_options so = with_threads(4);
  so.operations_per_thread = 1'000'000'000;
  so.time_limit = std::chrono::milliseconds(300);
  const stress_result r = run_stress_on_sim(so, /*coverage=*/false);
  EXPECT_TRUE(r.stopped_by_time);
  ASSERT_EQ(r.operations.size(), 4u);
  for (const std::uint64_t n : r.operations) {
    EXPECT_GT(n, 0u);
    EXPECT_LT(n, 1'000'000'000u);
  }
}

}  // namespace
}  // namespace tidepool::testing
