// The stress test on sim (issue 10): the workload of stress_workload.hpp, 8 threads x 4 streams,
// on a host-backed simulated device with a byte cap that makes out-of-memory frequent. At the end
// the pool's counts equal the program's, and once everything is freed and released nothing is
// mapped. Bounded by an operation count; TIDEPOOL_STRESS_OPS (operations per thread) and
// TIDEPOOL_STRESS_SEED make a longer soak of it.
#include <gtest/gtest.h>

#include <cstdio>

#include "pool_checker.hpp"
#include "stress_workload.hpp"

namespace tidepool::testing {
namespace {

void run_stress_on_sim(int threads, std::uint64_t seed_offset) {
  sim_config config = small_device(2048 * MiB);
  auto sim = std::make_shared<sim_driver>(config);
  pool_options options;
  options.byte_cap = 320 * MiB;  // about what 8 threads hold at once: out of memory is frequent
  pool p(sim, 0, options);
  sim_stress_backend backend(*sim);
  stress_options so;
  so.threads = threads;
  so.operations_per_thread = static_cast<int>(env_number("TIDEPOOL_STRESS_OPS", 1500));
  so.seed = static_cast<std::uint64_t>(env_number("TIDEPOOL_STRESS_SEED", 1)) + seed_offset;
  stress_result r;
  {
    stress_workload w(p, backend, so);
    r = w.run();
    std::printf("stress: %d threads x %d ops: %llu allocations, %llu frees (%llu handed to another thread, "
                "%llu by the reclaim hook), %llu out of memory, %llu record_stream, %llu streams recreated, "
                "%llu observer rounds\n",
                threads, so.operations_per_thread, static_cast<unsigned long long>(r.allocations),
                static_cast<unsigned long long>(r.deallocations), static_cast<unsigned long long>(r.handed_over),
                static_cast<unsigned long long>(r.freed_by_hook), static_cast<unsigned long long>(r.out_of_memory),
                static_cast<unsigned long long>(r.recorded), static_cast<unsigned long long>(r.streams_recreated),
                static_cast<unsigned long long>(r.observer_rounds));
    EXPECT_EQ(r.corrupted, 0u);
    EXPECT_EQ(r.bad_errors, 0u);
    EXPECT_EQ(w.observer_errors(), 0u);
    EXPECT_EQ(backend.unmapped_at_allocation(), 0u);
    // The pool's counts are the program's.
    const pool_stats s = p.stats();
    EXPECT_EQ(s.allocations, r.allocations);
    EXPECT_EQ(s.deallocations, r.deallocations);
    EXPECT_EQ(s.live_allocations, w.live_blocks());
    EXPECT_EQ(s.requested_bytes, w.live_requested_bytes());
    EXPECT_EQ(s.in_use_bytes + s.cached_bytes, s.mapped_bytes);
    EXPECT_LE(s.peak_mapped_bytes, options.byte_cap);
    EXPECT_EQ(s.mapped_bytes, sim->physical_bytes(0));
    // The workload did what it is for.
    EXPECT_GT(r.out_of_memory, 0u);
    EXPECT_GT(r.handed_over, 0u);
    EXPECT_GT(r.recorded, 0u);
    EXPECT_GT(r.streams_recreated, 0u);
    EXPECT_GT(r.freed_by_hook, 0u);
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
}

TEST(PoolStress, EightThreadsFourStreamsEach) { run_stress_on_sim(8, 0); }

// Two threads: fewer collisions, more of each thread's own stream reuse and out-of-memory retries.
TEST(PoolStress, TwoThreads) { run_stress_on_sim(2, 100); }

}  // namespace
}  // namespace tidepool::testing
