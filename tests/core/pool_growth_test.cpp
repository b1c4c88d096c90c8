// Growth of the large arena: recurring requests whose sizes drift a little each round (the loader
// trace's pattern) settle with no driver call and the pool stays correct (every check of
// pool_checker after every step, on a stream of its own and on the default stream); a request
// whose best fit is wasteful extends a smaller free block into the unmapped room above it only
// when growth would pass the budget; resetting the reported peaks leaves the budget alone; the
// budget never widens by itself; and a stream's own frees serve its growth while the GPU runs
// behind.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

// Map and unmap calls of one pool so far.
std::uint64_t moving_calls(const pool& p) {
  const driver_call_counts& d = p.stats().driver;
  return d.of(driver_call::mem_map) + d.of(driver_call::mem_unmap);
}

void run_drifting_rounds(stream_t stream, sim_driver& sim, pool& p) {
  pool_checker checker(sim, p);
  // Six huge scratch requests a round (40 to 100 MiB: above the 32 MiB medium limit), all freed
  // at the end of the round, each size off by up to 2% from its base every round.
  const std::array<std::size_t, 6> base = {48 * MiB, 50 * MiB, 68 * MiB, 44 * MiB, 62 * MiB, 96 * MiB};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> drift(0.98, 1.02);
  constexpr int rounds = 40;
  constexpr int warm_rounds = 10;
  std::uint64_t calls_after_warmup = 0;
  std::size_t peak_live = 0;
  for (int round = 0; round < rounds; ++round) {
    if (round == warm_rounds) calls_after_warmup = moving_calls(p);
    std::vector<void*> live;
    std::size_t live_bytes = 0;
    for (std::size_t b : base) {
      const auto bytes = static_cast<std::size_t>(static_cast<double>(b) * drift(rng)) / 4096 * 4096;
      live.push_back(checker.allocate(bytes, stream));
      live_bytes += bytes;
      peak_live = std::max(peak_live, live_bytes);
      checker.check();
    }
    for (void* ptr : live) {
      checker.free(ptr);
      checker.check();
    }
  }
  checker.check_patterns();
  const std::uint64_t per_round = (moving_calls(p) - calls_after_warmup) / (rounds - warm_rounds);
  std::printf("drifting huge rounds: %llu map/unmap calls per round after warm-up, peak held %.3f x peak live\n",
              static_cast<unsigned long long>(per_round),
              static_cast<double>(p.stats().peak_mapped_bytes) / static_cast<double>(peak_live));
  // A cascade through best fit (each slightly larger request taking the next block, the last one
  // stealing its whole size) moves handles every round; the bound catches it coming back. The
  // figures printed above are in docs/RESULTS.md (section 0).
  EXPECT_LE(per_round, 24u) << "recurring requests keep moving handles";
  // At this scale a 2 MiB granule and a 12-24 MiB handle are large next to the requests; the bound
  // only catches a pool that keeps growing instead of reusing.
  EXPECT_LE(static_cast<double>(p.stats().peak_mapped_bytes), 1.15 * static_cast<double>(peak_live));
  const std::size_t returned = p.release();
  EXPECT_GT(returned, 0u);
  EXPECT_EQ(p.stats().mapped_bytes, 0u) << "nothing is live: release() hands everything back";
}

TEST(PoolGrowth, DriftingHugeRequestsOnTheDefaultStream) {
  auto sim = std::make_shared<sim_driver>(small_device(2048 * MiB));
  pool p(sim, 0);
  run_drifting_rounds(nullptr, *sim, p);
}

TEST(PoolGrowth, DriftingHugeRequestsOnAStreamOfTheirOwn) {
  auto sim = std::make_shared<sim_driver>(small_device(2048 * MiB));
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  {
    pool p(sim, 0);
    run_drifting_rounds(s, *sim, p);
  }
  EXPECT_EQ(sim->stream_destroy(0, s), driver_status::success);
}

// A request whose best fit would waste more than 1/16 of it, beside a smaller free block at the
// frontier that 1/16 more would make fit: within the growth budget the wasteful fit serves it from
// memory held (nothing is stolen there, and extending maps more); past the budget the free block
// is extended, so that a run of slightly larger requests does not end in stealing a whole size.
TEST(PoolGrowth, AWastefulFitServesWithinTheBudgetAndAnExtensionBeyondIt) {
  // Held is 80 MiB at a peak in use of 80: at slack 0.5 growing by 32 MiB fits the budget (120); at
  // 0.1 (88) it does not, while the 2 MiB extension does.
  for (const double slack : {0.5, 0.1}) {
    SCOPED_TRACE(slack);
    auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
    pool_options options;
    options.growth_slack = slack;
    pool p(sim, 0, options);
    void* wasteful = p.allocate(48 * MiB);
    void* keeper = p.allocate(2 * MiB);  // keeps the 48 MiB block away from the frontier
    void* frontier = p.allocate(30 * MiB);
    p.deallocate(wasteful);
    p.deallocate(frontier);
    const std::size_t held = p.stats().mapped_bytes;
    void* request = p.allocate(32 * MiB);  // best fit: 48 MiB; the frontier block needs 2 MiB more
    if (slack == 0.5) {
      EXPECT_EQ(request, wasteful);
      EXPECT_EQ(p.stats().mapped_bytes, held) << "served from memory held";
    } else {
      EXPECT_EQ(request, frontier);
      EXPECT_EQ(p.stats().mapped_bytes, held + 2 * MiB) << "the extension alone mapped";
    }
    p.deallocate(request);
    p.deallocate(keeper);
  }
}

// The frontier is the unmapped room at the end of an address range, not a hole handed back inside
// the mapped memory: the free block beside such a hole keeps its best fit. Passed over as if it
// were the frontier, a loop at the device's limit (where the out-of-memory path opens holes in
// every step) laid out after its hand-backs and never settled (docs/RESULTS.md, section 0, "The
// frontier at the device's limit").
TEST(PoolGrowth, AFreeBlockBesideAHoleHandedBackKeepsItsBestFit) {
  auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
  pool p(sim, 0);
  void* x = p.allocate(6 * MiB);
  void* hole = p.allocate(8 * MiB);
  void* keeper = p.allocate(2 * MiB);
  void* y = p.allocate(8 * MiB);
  void* top = p.allocate(2 * MiB);  // keeps y away from the frontier
  p.deallocate(hole);
  ASSERT_EQ(p.release(), 8 * MiB);  // the hole's handle goes back: unmapped room just above x
  p.deallocate(x);
  p.deallocate(y);
  const std::uint64_t calls = p.stats().driver.memory_calls();
  void* request = p.allocate(6 * MiB);
  EXPECT_EQ(request, x) << "the exact fit beside the hole was passed over for the block at " << y;
  EXPECT_EQ(p.stats().driver.memory_calls(), calls);
  p.deallocate(request);
  p.deallocate(keeper);
  p.deallocate(top);
}

// reset_peak_stats() brings the reported peaks down to now (as torch.cuda.reset_peak_memory_stats)
// and leaves the growth budget its whole history: the wasteful-fit choice above, made after a
// 200 MiB peak, is the same in a pool whose peaks were reset (had the budget forgotten the 200 MiB,
// it would have been 88 MiB and the frontier block extended).
TEST(PoolGrowth, ResettingThePeaksChangesWhatStatsReportNotTheGrowthBudget) {
  struct outcome {
    bool took_the_wasteful_fit = false;
    pool_stats stats;
  };
  const auto run = [](bool reset) {
    auto sim = std::make_shared<sim_driver>(small_device(1024 * MiB));
    pool_options options;
    options.growth_slack = 0.1;
    pool p(sim, 0, options);
    p.deallocate(p.allocate(200 * MiB));
    (void)p.release();
    if (reset) p.reset_peak_stats();
    void* wasteful = p.allocate(48 * MiB);
    void* keeper = p.allocate(2 * MiB);
    void* frontier = p.allocate(30 * MiB);
    p.deallocate(wasteful);
    p.deallocate(frontier);
    void* request = p.allocate(32 * MiB);
    outcome o{request == wasteful, p.stats()};
    p.deallocate(request);
    p.deallocate(keeper);
    return o;
  };
  const outcome kept = run(false);
  const outcome reset = run(true);
  EXPECT_TRUE(kept.took_the_wasteful_fit);
  EXPECT_TRUE(reset.took_the_wasteful_fit) << "the growth budget kept the 200 MiB peak";
  EXPECT_EQ(reset.stats.mapped_bytes, kept.stats.mapped_bytes);
  EXPECT_EQ(kept.stats.peak_in_use_bytes, 200 * MiB);
  EXPECT_EQ(kept.stats.peak_mapped_bytes, 200 * MiB);
  EXPECT_EQ(reset.stats.peak_in_use_bytes, 80 * MiB);  // 48 + 2 + 30, after the reset
  EXPECT_EQ(reset.stats.peak_requested_bytes, 80 * MiB);
  EXPECT_EQ(reset.stats.peak_mapped_bytes, reset.stats.mapped_bytes);
}

// The growth budget is fixed: a random mix that keeps stealing without live memory ever reaching a
// new peak holds no more than (1 + growth_slack) * peak in use however long it runs (the budget
// once widened by itself, and a training loop whose shapes change every step ended at 1.5x).
TEST(PoolGrowth, TheBudgetNeverWidensUnderALongStealingMix) {
  auto sim = std::make_shared<sim_driver>(small_device(2048 * MiB));
  pool_options options;
  options.growth_slack = 0.05;
  pool p(sim, 0, options);
  pool_checker checker(*sim, p);
  constexpr std::size_t slots = 150;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(64.0 * MiB));
  auto draw = [&] { return static_cast<std::size_t>(std::exp(log_size(rng))); };
  std::vector<void*> live(slots);
  for (void*& ptr : live) ptr = checker.allocate(draw());
  double worst = 0.0;
  std::uint64_t stealing_calls = 0;
  for (int round = 0; round < 12; ++round) {
    const std::uint64_t before = moving_calls(p);
    for (int i = 0; i < 2000; ++i) {
      void*& ptr = live[rng() % slots];
      checker.free(ptr);
      ptr = checker.allocate(draw());
      const pool_stats s = p.stats();
      worst = std::max(worst, static_cast<double>(s.mapped_bytes) / static_cast<double>(s.peak_in_use_bytes));
      if (i % 256 == 0) checker.check();
    }
    stealing_calls = moving_calls(p) - before;
  }
  std::printf("stealing mix at growth_slack 0.05: worst held / peak in use %.3f; %llu map/unmap calls in the last 2000\n",
              worst, static_cast<unsigned long long>(stealing_calls));
  EXPECT_GT(stealing_calls, 0u) << "the mix no longer steals: it does not test the budget";
  // Only whole free handles can be stolen, and a large handle part of which a live neighbour covers
  // is not one, so a miss may map new memory past the budget (measured: 1.12 here). What must not
  // happen is the budget widening on its own as the mix goes on (it reached 1.55 that way).
  EXPECT_LE(worst, 1.2);
  checker.check();
  checker.check_patterns();
  for (void* ptr : live) checker.free(ptr);
  checker.check();
}

// The GPU running behind the program: a block freed on a stream a moment ago is that stream's
// until an event completes. Growth on the same stream must neither map beside such a block when it
// could extend it nor map new memory past the budget when stealing it would do: the footprint
// must not depend on how far behind the GPU is.
TEST(PoolGrowth, AStreamsOwnFreesServeItsGrowthWhileTheGpuRunsBehind) {
  auto sim = std::make_shared<sim_driver>(small_device(2048 * MiB));
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  {
    pool_options options;
    options.growth_slack = 0.0;
    pool p(sim, 0, options);
    pool_checker checker(*sim, p);
    // 64 MiB used by queued work and freed: the stream's own until its work completes.
    void* a = checker.allocate(64 * MiB, s);
    checker.free_after_work(a, 1000.0);
    // A larger request on the same stream: held may not pass the budget (peak in use, 128 MiB):
    // the free handle is stolen (after waiting for the stream) rather than new memory mapped.
    void* b = checker.allocate(128 * MiB, s);
    EXPECT_EQ(p.stats().mapped_bytes, 128 * MiB) << "grew past the budget beside the stream's own free block";
    EXPECT_EQ(sim->unsafe_unmap_count(), 0u) << "unmapped memory that queued work still used";
    checker.free_after_work(b, 1000.0);
    // A request just above the free block, with work still queued on it: extended in place.
    void* c = checker.allocate(130 * MiB, s);
    EXPECT_LE(p.stats().mapped_bytes, 130 * MiB + 2 * MiB) << "mapped beside the stream's free block";
    EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
    checker.check();
    checker.free(c);
    checker.check();
  }
  (void)sim->stream_destroy(0, s);
}

}  // namespace
}  // namespace tidepool::testing
