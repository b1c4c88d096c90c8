// A recorded training loop replayed again through the same pool lays out as it did the first time:
// which free block serves a request depends only on the free blocks, not on the order they were
// freed in (free_index.hpp). On the loop with activation checkpointing and gradient accumulation
// (traces/gpt_ckpt_accum.csv.xz, recorded on the H200), taking the block of exactly the asked size
// that was freed last made the second pass hold more than the first, and more than expandable
// segments. The reinforcement-learning loop (traces/hf_llama_rl.csv.xz: generation with a KV cache
// grown token by token, then a gradient step, in one process) is held to the same, and so is the
// loader (traces/loader.csv.gz, a program whose peak in use grows for most of the trace): with a
// growth budget of 1.5x peak in use it stole a free handle once while still growing, and the hole
// the steal left in the free memory took its first pass above expandable segments' and past the
// GPU test of DESIGN 4 (through CuPy and PyTorch); its held after release is held to that test's
// bound too. The figures are in docs/RESULTS.md, section 0.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "bundled_trace.hpp"
#include "replay/loader_workload.hpp"
#include "replay/replay_engine.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::replay::testing {
namespace {

// Replays traces/`name` twice through one pool: the second pass holds exactly what the first did,
// makes no driver call, and holds no more than expandable segments over one pass.
void expect_second_pass_as_first(const std::string& name) {
  const trace t = read_bundled_trace(name);
  replay_options options;
  options.passes = 2;
  const replay_result pool = replay_trace(t, "tidepool", std::make_shared<sim_driver>(), options);
  const replay_result expandable = replay_trace(t, "expandable", std::make_shared<sim_driver>(), replay_options{});
  ASSERT_EQ(pool.passes.size(), 2u);
  EXPECT_EQ(pool.failures, 0u);
  std::printf("%s: held / live %.4f first pass, %.4f second (%llu driver calls); expandable %.4f\n", name.c_str(),
              pool.passes[0].held_ratio(), pool.passes[1].held_ratio(),
              static_cast<unsigned long long>(pool.passes[1].driver_calls), expandable.held_ratio());
  EXPECT_EQ(pool.passes[1].peak_held_bytes, pool.passes[0].peak_held_bytes);
  EXPECT_EQ(pool.passes[1].driver_calls, 0u);
  EXPECT_LE(pool.passes[0].held_ratio(), expandable.held_ratio());
  EXPECT_LE(pool.passes[1].held_ratio(), expandable.held_ratio());
}

TEST(ReplayLaterPasses, ACheckpointedLoopHoldsInItsSecondPassWhatItHeldInItsFirst) {
  TIDEPOOL_SKIP_UNLESS_READABLE("gpt_ckpt_accum.csv.xz");
  expect_second_pass_as_first("gpt_ckpt_accum.csv.xz");
}

TEST(ReplayLaterPasses, AnRLLoopHoldsInItsSecondPassWhatItHeldInItsFirst) {
  TIDEPOOL_SKIP_UNLESS_READABLE("hf_llama_rl.csv.xz");
  expect_second_pass_as_first("hf_llama_rl.csv.xz");
}

TEST(ReplayLaterPasses, TheLoaderHoldsInItsSecondPassWhatItHeldInItsFirst) {
  expect_second_pass_as_first("loader.csv.gz");
  // DESIGN 4, as python/tests/gpu/test_frameworks_gpu.py asks of it on the H200.
  const replay_result pool =
      replay_trace(read_bundled_trace("loader.csv.gz"), "tidepool", std::make_shared<sim_driver>());
  EXPECT_LE(pool.held_ratio(), 1.02);
}

// What the loader keeps live holds, after release() and compact(), within the GPU retention test's
// bound (live x 1.02 + 64 MiB, python/tests/gpu/test_frameworks_gpu.py), which sim gives to the
// MiB, so CI sees a regression the GPU test would: on the bundled trace and on two seeds the
// large-handle cap (page_table.cpp) was not chosen on. release() alone keeps the rest of every
// 64 MiB handle a live block touches (printed, not bounded: docs/RESULTS.md, section 0).
TEST(ReplayLaterPasses, WhatTheLoaderKeepsHoldsWithinTheGpuRetentionBoundAfterCompact) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  for (const std::uint64_t seed : {std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{15}}) {
    const trace t = seed == 1 ? read_bundled_trace("loader.csv.gz") : make_loader_trace(seed);
    const replay_result pool = replay_trace(t, "tidepool", std::make_shared<sim_driver>());
    const double bound = static_cast<double>(pool.live_end_bytes) * 1.02 + static_cast<double>(64 * mib);
    ASSERT_TRUE(pool.held_after_compact_bytes.has_value()) << "sim compacts: seed " << seed;
    const std::size_t compacted = *pool.held_after_compact_bytes;
    std::printf("loader seed %llu: held after release %zu MiB, after compact %zu MiB, for %zu MiB live, bound %.0f "
                "MiB\n",
                static_cast<unsigned long long>(seed), pool.held_after_release_bytes / mib, compacted / mib,
                pool.live_end_bytes / mib, bound / static_cast<double>(mib));
    EXPECT_GT(pool.live_end_bytes, 0u) << "seed " << seed;
    EXPECT_LE(static_cast<double>(compacted), bound) << "seed " << seed;
    EXPECT_LE(compacted, pool.held_after_release_bytes) << "seed " << seed;
  }
}

}  // namespace
}  // namespace tidepool::replay::testing
