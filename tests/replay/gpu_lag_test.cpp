// The replay's model of a GPU running behind the program (replay_options::gpu_lag_us), and what it
// shows: tidepool's footprint on a recorded training loop is the same whether the GPU keeps up or
// runs tens of milliseconds behind, as on the H200, where a block freed on the stream stays that
// stream's until an event completes. Before growth joined the request stream's own free blocks,
// the loop held more with the GPU behind than with it keeping up, as it did on the H200 (the
// figures are in docs/RESULTS.md, section 0).
#include <gtest/gtest.h>

#include <memory>

#include "bundled_trace.hpp"
#include "replay/replay_engine.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::replay::testing {
namespace {

double held_over_live(const trace& t, const char* allocator, double lag_us, unsigned passes = 1) {
  replay_options options;
  options.gpu_lag_us = lag_us;
  options.passes = passes;
  const replay_result r = replay_trace(t, allocator, std::make_shared<sim_driver>(), options);
  return static_cast<double>(r.peak_held_bytes) / static_cast<double>(r.peak_live_bytes);
}

TEST(ReplayGpuLag, QueuedWorkKeepsAFreedBlockItsStreamsUntilItCompletes) {
  // A stream's free is done for the other streams only once the work queued before it completes:
  // the lag model queues work on the stream of every row.
  auto sim = std::make_shared<sim_driver>();
  ASSERT_EQ(sim->open_context(0), driver_status::success);
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  event_t e = nullptr;
  ASSERT_EQ(sim->event_create(0, &e), driver_status::success);
  sim->launch(0, s, 1000.0);
  ASSERT_EQ(sim->event_record(0, e, s), driver_status::success);
  EXPECT_EQ(sim->event_query(0, e), driver_status::not_ready);
  sim->advance(1000.0);
  EXPECT_EQ(sim->event_query(0, e), driver_status::success);
  (void)sim->event_destroy(0, e);
  (void)sim->stream_destroy(0, s);
}

TEST(ReplayGpuLag, TidepoolHoldsTheSameOnARecordedLoopWhetherTheGpuKeepsUpOrNot) {
  const trace t = read_bundled_trace("gpt_vary.csv.gz");
  const double keeping_up = held_over_live(t, "tidepool", 0.0);
  const double behind = held_over_live(t, "tidepool", 30'000.0);
  std::printf("gpt_vary, tidepool: held / live %.4f with the GPU keeping up, %.4f 30 ms behind\n", keeping_up,
              behind);
  EXPECT_NEAR(behind, keeping_up, 0.005);
  // And no further from expandable segments, whose single segment never looks at streams.
  EXPECT_LE(behind, held_over_live(t, "expandable", 30'000.0) + 0.005);
}

}  // namespace
}  // namespace tidepool::replay::testing
