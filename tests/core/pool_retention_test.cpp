// The retention workload of DESIGN 1.1 at 1/64 scale, on a simulated GPU with 2 MiB granules:
// seven inputs of 16 chunks; each chunk allocates ~37.5 MB of scratch in several arrays, keeps
// ~1.2 MB in several arrays allocated between them, and frees its scratch; then a 62-region merge
// that keeps ~1.5 MB per region; then the inputs close. Caching pools hold 1.4x the peak live
// memory here because kept arrays are carved from freed scratch; tidepool must stay within 1.02x
// with no lifetime hints at all, and after release() hold no more than the live bytes rounded up
// to whole granules plus 2% of live.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

constexpr std::size_t scale = 64;
constexpr double chunk_scratch_bytes = 2.4e9 / scale;
constexpr double chunk_kept_bytes = 76e6 / scale;
constexpr double region_kept_bytes = 95e6 / scale;

// `total` bytes split into `parts` arrays of random share (each 0.5x to 1.5x of an equal share).
std::vector<std::size_t> split(double total, int parts, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> share(0.5, 1.5);
  std::vector<double> weights(static_cast<std::size_t>(parts));
  double sum = 0;
  for (double& w : weights) sum += (w = share(rng));
  std::vector<std::size_t> sizes;
  for (double w : weights) sizes.push_back(static_cast<std::size_t>(total * w / sum) + 1);
  return sizes;
}

struct loader_figures {
  double peak_ratio = 0;
  std::size_t held_after_release = 0;
  std::size_t live_after = 0;
  std::size_t live_granules_after = 0;
};

loader_figures run_loader(bool hints) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  std::mt19937_64 rng(hints ? 7 : 11);
  const lifetime kept_hint = hints ? lifetime::persistent : lifetime::scratch;

  // One step of the loader: scratch arrays, with the kept arrays allocated between them, then the
  // scratch freed (after work on it, in a random order).
  auto chunk = [&](double scratch_total, double kept_total, std::vector<void*>& kept) {
    const std::vector<std::size_t> scratch_sizes = split(scratch_total, 6, rng);
    const std::vector<std::size_t> kept_sizes = split(kept_total, 3, rng);
    std::vector<void*> scratch;
    for (std::size_t i = 0; i < scratch_sizes.size(); ++i) {
      scratch.push_back(checker.allocate(scratch_sizes[i]));
      if (i % 2 == 1) kept.push_back(checker.allocate(kept_sizes[i / 2], nullptr, kept_hint));
      checker.check();
    }
    std::shuffle(scratch.begin(), scratch.end(), rng);
    for (void* s : scratch) {
      checker.free_after_work(s, 20.0);
      checker.check();
    }
    sim->advance(100.0);
  };

  std::vector<std::vector<void*>> inputs(7);
  for (auto& input : inputs) {
    for (int c = 0; c < 16; ++c) chunk(chunk_scratch_bytes, chunk_kept_bytes, input);
  }
  std::vector<void*> merged;
  for (int region = 0; region < 62; ++region) chunk(chunk_scratch_bytes, region_kept_bytes, merged);
  for (auto& input : inputs) {
    for (void* k : input) checker.free(k);
    checker.check();
  }
  const pool_stats peak = p.stats();
  p.release();
  checker.check();
  checker.check_patterns();

  loader_figures f;
  f.peak_ratio = static_cast<double>(peak.peak_mapped_bytes) / static_cast<double>(peak.peak_in_use_bytes);
  const pool_stats after = p.stats();
  f.held_after_release = after.mapped_bytes;
  f.live_after = after.in_use_bytes;
  f.live_granules_after = checker.live_granule_bytes();
  std::printf("loader (%s hints): peak held %.1f MiB / peak live %.1f MiB = %.4f; after release held %.1f MiB, "
              "live %.1f MiB (%.1f MiB in whole granules)\n",
              hints ? "with" : "no", static_cast<double>(peak.peak_mapped_bytes) / MiB,
              static_cast<double>(peak.peak_in_use_bytes) / MiB, f.peak_ratio,
              static_cast<double>(f.held_after_release) / MiB, static_cast<double>(f.live_after) / MiB,
              static_cast<double>(f.live_granules_after) / MiB);
  return f;
}

void expect_no_retention(const loader_figures& f) {
  EXPECT_LE(f.peak_ratio, 1.02);
  EXPECT_LE(static_cast<double>(f.held_after_release),
            static_cast<double>(f.live_granules_after) + 0.02 * static_cast<double>(f.live_after));
}

TEST(PoolRetention, LoaderWorkloadWithoutHints) { expect_no_retention(run_loader(false)); }

TEST(PoolRetention, LoaderWorkloadWithHints) { expect_no_retention(run_loader(true)); }

}  // namespace
}  // namespace tidepool::testing
