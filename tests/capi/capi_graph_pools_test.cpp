// Graph pools through the C API (tidepool/graph_pool.hpp): ids, the calling thread's current one
// and its restoring, a clear status for an id never made or a null out-pointer, two captures
// made under one id sharing their memory in the process's pool, and a graph pool given to a
// capture winning over the allocating thread's.
#include <gtest/gtest.h>

#include <string>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"
#include "tidepool/graph_pool.hpp"

namespace tidepool::testing {
namespace {

std::string last_error() {
  return tidepool_last_error();
}

class CApiGraphPools : public process_test {};

TEST_F(CApiGraphPools, MadeSetRestoredAndRefused) {
  std::uint64_t shared = 0, current = 7, previous = 7;
  ASSERT_EQ(tidepool_new_graph_pool(&shared), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_NE(shared, 0u);
  ASSERT_EQ(tidepool_current_graph_pool(&current), TIDEPOOL_SUCCESS);
  EXPECT_EQ(current, 0u);
  ASSERT_EQ(tidepool_set_graph_pool(shared, &previous), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(previous, 0u);
  ASSERT_EQ(tidepool_current_graph_pool(&current), TIDEPOOL_SUCCESS);
  EXPECT_EQ(current, shared);

  EXPECT_EQ(tidepool_set_graph_pool(shared + 1000000, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("never made"), std::string::npos) << last_error();
  ASSERT_EQ(tidepool_current_graph_pool(&current), TIDEPOOL_SUCCESS);
  EXPECT_EQ(current, shared) << "a refused id changes nothing";

  EXPECT_EQ(tidepool_new_graph_pool(nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_current_graph_pool(nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_set_graph_pool(0, nullptr), TIDEPOOL_SUCCESS)
      << "NULL: the previous one is not wanted";
  ASSERT_EQ(tidepool_current_graph_pool(&current), TIDEPOOL_SUCCESS);
  EXPECT_EQ(current, 0u);

  // The default, for threads with none current.
  ASSERT_EQ(tidepool_default_graph_pool(&current), TIDEPOOL_SUCCESS);
  EXPECT_EQ(current, 0u);
  ASSERT_EQ(tidepool_set_default_graph_pool(shared, &previous), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(previous, 0u);
  ASSERT_EQ(tidepool_default_graph_pool(&current), TIDEPOOL_SUCCESS);
  EXPECT_EQ(current, shared);
  EXPECT_EQ(tidepool_set_default_graph_pool(shared + 1000000, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_default_graph_pool(nullptr), TIDEPOOL_INVALID_ARGUMENT);
  ASSERT_EQ(tidepool_set_default_graph_pool(0, &previous), TIDEPOOL_SUCCESS);
  EXPECT_EQ(previous, shared) << "a refused id changed nothing";
}

TEST_F(CApiGraphPools, TwoCapturesUnderOneIdShareTheirIntermediates) {
  sim_driver& sim = use_small_sim();
  ASSERT_EQ(sim.open_context(0), driver_status::success);  // as the framework does first
  stream_t stream = nullptr;
  ASSERT_EQ(sim.stream_create(0, &stream), driver_status::success);
  auto* s = reinterpret_cast<tidepool_stream_t>(stream);
  std::uint64_t shared = 0;
  ASSERT_EQ(tidepool_new_graph_pool(&shared), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_set_graph_pool(shared, nullptr), TIDEPOOL_SUCCESS);
  void* hidden[2] = {};
  void* graphs[2] = {};
  for (int i = 0; i < 2; ++i) {
    sim.begin_capture(0, stream);
    ASSERT_EQ(tidepool_allocate(64 * MiB, 0, s, TIDEPOOL_SCRATCH, &hidden[i]), TIDEPOOL_SUCCESS)
        << last_error();
    ASSERT_EQ(tidepool_deallocate(hidden[i], 0, s), TIDEPOOL_SUCCESS) << last_error();
    graphs[i] = sim.end_capture(0, stream);
  }
  ASSERT_EQ(tidepool_set_graph_pool(0, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(hidden[1], hidden[0]);
  tidepool_stats_t stats{};
  stats.struct_size = sizeof(stats);
  ASSERT_EQ(tidepool_stats(0, &stats), TIDEPOOL_SUCCESS);
  EXPECT_EQ(stats.graphs, 2u);
  EXPECT_EQ(stats.graph_kept_bytes, 64 * MiB);
  for (void* g : graphs) sim.destroy_graph(g);
  std::size_t released = 0;
  ASSERT_EQ(tidepool_release(0, &released), TIDEPOOL_SUCCESS);
  EXPECT_EQ(released, 64 * MiB);
}

// Two captures overlap on two streams (as two threads capturing a graph each would), each given
// its own graph pool; every allocation is made on this thread, whose current graph pool is a
// third one, and a fourth by the time a later capture given the first pool allocates: that
// capture reuses the first one's intermediate (under the thread's pools alone it would not).
TEST_F(CApiGraphPools, APoolGivenToACaptureWinsOverTheAllocatingThreads) {
  sim_driver& sim = use_small_sim();
  ASSERT_EQ(sim.open_context(0), driver_status::success);
  stream_t first_stream = nullptr, second_stream = nullptr;
  ASSERT_EQ(sim.stream_create(0, &first_stream), driver_status::success);
  ASSERT_EQ(sim.stream_create(0, &second_stream), driver_status::success);
  auto* first = reinterpret_cast<tidepool_stream_t>(first_stream);
  auto* second = reinterpret_cast<tidepool_stream_t>(second_stream);
  std::uint64_t mine = 0, yours = 0, threads = 0;
  for (std::uint64_t* id : {&mine, &yours, &threads}) ASSERT_EQ(tidepool_new_graph_pool(id), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_set_graph_pool(threads, nullptr), TIDEPOOL_SUCCESS);

  EXPECT_EQ(tidepool_set_capture_graph_pool(0, first, mine, nullptr), TIDEPOOL_INVALID_STREAM)
      << "not being captured yet";
  EXPECT_NE(last_error().find("not being captured"), std::string::npos) << last_error();
  sim.begin_capture(0, first_stream);
  sim.begin_capture(0, second_stream);
  std::uint64_t first_capture = 0, second_capture = 0;
  ASSERT_EQ(tidepool_set_capture_graph_pool(0, first, mine, &first_capture), TIDEPOOL_SUCCESS) << last_error();
  ASSERT_EQ(tidepool_set_capture_graph_pool(0, second, yours, &second_capture), TIDEPOOL_SUCCESS);
  EXPECT_NE(first_capture, second_capture);
  EXPECT_EQ(tidepool_set_capture_graph_pool(0, first, mine + 1000000, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_set_capture_graph_pool(9, first, mine, nullptr), TIDEPOOL_INVALID_DEVICE);
  void *first_hidden = nullptr, *second_hidden = nullptr;
  ASSERT_EQ(tidepool_allocate(32 * MiB, 0, first, TIDEPOOL_SCRATCH, &first_hidden), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_allocate(32 * MiB, 0, second, TIDEPOOL_SCRATCH, &second_hidden), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_deallocate(first_hidden, 0, first), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_deallocate(second_hidden, 0, second), TIDEPOOL_SUCCESS);
  void* graphs[3] = {sim.end_capture(0, first_stream), sim.end_capture(0, second_stream), nullptr};
  ASSERT_EQ(tidepool_forget_capture_graph_pool(first_capture), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_forget_capture_graph_pool(second_capture), TIDEPOOL_SUCCESS);
  EXPECT_EQ(capture_graph_pool(first_capture), 0u) << "forgotten";
  EXPECT_THROW(set_capture_graph_pool(0, mine), error) << "capture id 0 names no capture";

  // A later capture on the first stream given `mine` again: the first capture's intermediate.
  std::uint64_t later = 0;
  ASSERT_EQ(tidepool_new_graph_pool(&later), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_set_graph_pool(later, nullptr), TIDEPOOL_SUCCESS);
  sim.begin_capture(0, first_stream);
  std::uint64_t third_capture = 0;
  ASSERT_EQ(tidepool_set_capture_graph_pool(0, first, mine, &third_capture), TIDEPOOL_SUCCESS);
  void* third_hidden = nullptr;
  ASSERT_EQ(tidepool_allocate(32 * MiB, 0, first, TIDEPOOL_SCRATCH, &third_hidden), TIDEPOOL_SUCCESS);
  EXPECT_EQ(third_hidden, first_hidden) << "the first capture's pool, not the thread's";
  ASSERT_EQ(tidepool_deallocate(third_hidden, 0, first), TIDEPOOL_SUCCESS);
  graphs[2] = sim.end_capture(0, first_stream);
  ASSERT_EQ(tidepool_forget_capture_graph_pool(third_capture), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_set_graph_pool(0, nullptr), TIDEPOOL_SUCCESS);
  tidepool_stats_t stats{};
  stats.struct_size = sizeof(stats);
  ASSERT_EQ(tidepool_stats(0, &stats), TIDEPOOL_SUCCESS);
  EXPECT_EQ(stats.graphs, 3u);
  EXPECT_EQ(stats.graph_kept_bytes, 64 * MiB) << "one intermediate per given pool";
  for (void* g : graphs) sim.destroy_graph(g);
  std::size_t released = 0;
  ASSERT_EQ(tidepool_release(0, &released), TIDEPOOL_SUCCESS);
  EXPECT_EQ(released, 64 * MiB);
}

}  // namespace
}  // namespace tidepool::testing
