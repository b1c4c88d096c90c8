// Graph pools through the C API (tidepool/graph_pool.hpp): ids, the calling thread's current one
// and its restoring, a clear status for an id never made or a null out-pointer, and two captures
// made under one id sharing their memory in the process's pool.
#include <gtest/gtest.h>

#include <string>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

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

}  // namespace
}  // namespace tidepool::testing
