// CUDA graph captures (pool_options::follow_graph_captures): what a capture allocates stays its
// graph's while the graph may launch. Freed in the capture or after it, on any stream, it serves
// only that capture on that stream; release(), device-wide waits and other streams never get it;
// once the driver says the graph is gone it is free for everyone. No event goes on a stream being
// captured. The sim driver captures as CUDA does (sim.hpp, "CUDA graphs").
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

class PoolGraphCapture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sim->stream_create(0, &capturing), driver_status::success);
    ASSERT_EQ(sim->stream_create(0, &other), driver_status::success);
  }
  // Allocates `count` blocks of `bytes` on `stream` and returns their addresses (kept live).
  std::vector<void*> allocate_many(std::size_t count, std::size_t bytes, stream_t stream) {
    std::vector<void*> out;
    for (std::size_t i = 0; i < count; ++i) out.push_back(p.allocate(bytes, stream));
    return out;
  }
  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool p{sim, 0};
  stream_t capturing = nullptr;
  stream_t other = nullptr;
};

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

TEST_F(PoolGraphCapture, WhatTheCaptureFreedIsHandedToNoOtherWorkWhileTheGraphLives) {
  sim->begin_capture(0, capturing);
  void* hidden = p.allocate(8 * MiB, capturing);  // an intermediate: freed inside the capture
  void* output = p.allocate(4 * MiB, capturing);  // the graph's output, kept by the program
  p.deallocate(hidden, capturing);
  void* graph = sim->end_capture(0, capturing);
  EXPECT_EQ(p.stats().graphs, 1u);

  // The program frees the output while the graph lives, then settles everything it can.
  p.deallocate(output, nullptr);
  EXPECT_EQ(p.stats().graph_kept_bytes, 12 * MiB);
  EXPECT_EQ(p.release(), 0u) << "release() leaves what the graph's launches write to";
  EXPECT_EQ(p.stats().mapped_bytes, 12 * MiB);
  for (stream_t s : {static_cast<stream_t>(nullptr), other, capturing}) {
    for (void* q : allocate_many(4, 4 * MiB, s)) {
      EXPECT_FALSE(overlaps(q, 4 * MiB, hidden, 8 * MiB))
          << "eager work got the graph's intermediate";
      EXPECT_FALSE(overlaps(q, 4 * MiB, output, 4 * MiB)) << "eager work got the graph's output";
      p.deallocate(q, s);
    }
  }
  p.release();
  EXPECT_EQ(p.stats().mapped_bytes, 12 * MiB)
      << "what eager work freed goes back, the graph's stays";

  sim->destroy_graph(graph);
  EXPECT_EQ(p.release(), 12 * MiB) << "the graph is gone: its memory goes back with the rest";
  EXPECT_EQ(p.stats().graphs, 0u);
  EXPECT_EQ(p.stats().graph_kept_bytes, 0u);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST_F(PoolGraphCapture, TheCaptureReusesWhatItFreedOnItsStream) {
  sim->begin_capture(0, capturing);
  void* first = p.allocate(16 * MiB, capturing);
  p.deallocate(first, capturing);
  void* second = p.allocate(16 * MiB, capturing);
  EXPECT_EQ(second, first) << "stream order holds inside the graph as on a stream";
  p.deallocate(second, capturing);
  void* graph = sim->end_capture(0, capturing);
  EXPECT_EQ(p.stats().mapped_bytes, 16 * MiB);

  // A second capture on the same stream is another graph: it gets memory of its own.
  sim->begin_capture(0, capturing);
  void* next = p.allocate(16 * MiB, capturing);
  EXPECT_FALSE(overlaps(next, 16 * MiB, first, 16 * MiB));
  p.deallocate(next, capturing);
  void* graph2 = sim->end_capture(0, capturing);
  EXPECT_EQ(p.stats().graphs, 2u);
  sim->destroy_graph(graph);
  sim->destroy_graph(graph2);
  EXPECT_EQ(p.release(), 32 * MiB);
}

TEST_F(PoolGraphCapture, AGraphsLiveBlockFreedAfterItIsGoneIsAnOrdinaryFree) {
  sim->begin_capture(0, capturing);
  void* output = p.allocate(6 * MiB, capturing);
  void* graph = sim->end_capture(0, capturing);
  sim->destroy_graph(graph);
  EXPECT_EQ(p.stats().graphs, 0u);
  p.deallocate(output, other);
  void* again = p.allocate(6 * MiB, other);
  EXPECT_EQ(again, output) << "freed on `other` after the graph went: reused there at once";
  p.deallocate(again, other);
  EXPECT_EQ(p.release(), 6 * MiB);
}

TEST_F(PoolGraphCapture, NoEventIsRecordedOnAStreamBeingCaptured) {
  // An ordinary block of the stream, freed inside the capture (a warm-up tensor the program drops).
  void* eager = p.allocate(2 * MiB, capturing);
  sim->begin_capture(0, capturing);
  void* in_graph = p.allocate(2 * MiB, capturing);
  p.deallocate(eager, capturing);
  p.deallocate(in_graph, capturing);
  void* graph = sim->end_capture(0, capturing);
  EXPECT_EQ(sim->captured_event_records(), 0u);
  // After the capture the stream's next call records as usual, and its free is released; the
  // graph's block stays.
  void* probe = p.allocate(2 * MiB, capturing);
  EXPECT_EQ(probe, eager) << "the stream reuses its own free at once";
  p.deallocate(probe, capturing);
  EXPECT_EQ(p.release(), 2 * MiB);
  EXPECT_EQ(p.stats().mapped_bytes, 2 * MiB);
  sim->destroy_graph(graph);
  EXPECT_EQ(p.release(), 2 * MiB);
}

TEST_F(PoolGraphCapture, StreamsJoinedToOneCaptureKeepTheirBlocksApart) {
  stream_t side = nullptr;
  ASSERT_EQ(sim->stream_create(0, &side), driver_status::success);
  sim->begin_capture(0, capturing);
  sim->join_capture(0, side, capturing);
  void* on_main = p.allocate(4 * MiB, capturing);
  p.deallocate(on_main, capturing);
  void* on_side = p.allocate(4 * MiB, side);
  EXPECT_NE(on_side, on_main)
      << "the graph orders each stream's work, not the two against each other";
  p.deallocate(on_side, side);
  void* graph = sim->end_capture(0, capturing);
  EXPECT_EQ(p.stats().graphs, 2u) << "one state per stream of the capture";
  sim->destroy_graph(graph);
  EXPECT_EQ(p.stats().graphs, 0u);
  EXPECT_EQ(p.release(), 8 * MiB);
}

TEST_F(PoolGraphCapture, TheOutOfMemoryPathLeavesAGraphsMemoryAlone) {
  auto sim_small = std::make_shared<sim_driver>(small_device(64 * MiB));
  stream_t s = nullptr;
  ASSERT_EQ(sim_small->stream_create(0, &s), driver_status::success);
  pool small{sim_small, 0};
  sim_small->begin_capture(0, s);
  void* kept = small.allocate(32 * MiB, s);
  small.deallocate(kept, s);
  void* graph = sim_small->end_capture(0, s);
  // 48 MiB more does not fit beside the graph's 32: the pool says so rather than take them.
  EXPECT_THROW((void)small.allocate(48 * MiB, nullptr), out_of_memory);
  void* fits = small.allocate(24 * MiB, nullptr);
  EXPECT_FALSE(overlaps(fits, 24 * MiB, kept, 32 * MiB));
  small.deallocate(fits, nullptr);
  sim_small->destroy_graph(graph);
  void* now_fits = small.allocate(48 * MiB, nullptr);
  small.deallocate(now_fits, nullptr);
  EXPECT_EQ(sim_small->unsafe_unmap_count(), 0u);
}

TEST_F(PoolGraphCapture, TheGraphsMemoryIsKeptEvenPastThePoolsEnd) {
  // The driver may call the graph's watch after the pool is gone: nothing breaks (ASan checks).
  void* graph = nullptr;
  {
    pool short_lived{sim, 0};
    sim->begin_capture(0, capturing);
    void* b = short_lived.allocate(2 * MiB, capturing);
    short_lived.deallocate(b, capturing);
    graph = sim->end_capture(0, capturing);
  }
  sim->destroy_graph(graph);
  SUCCEED();
}

TEST_F(PoolGraphCapture, AGraphTheDriverCannotWatchKeepsItsMemoryUntilThePoolGoes) {
  sim->refuse_graph_watches();
  sim->begin_capture(0, capturing);
  void* b = p.allocate(8 * MiB, capturing);
  p.deallocate(b, capturing);
  void* graph = sim->end_capture(0, capturing);
  sim->destroy_graph(graph);  // the pool is never told
  EXPECT_EQ(p.stats().graphs, 1u);
  EXPECT_EQ(p.release(), 0u) << "nothing is handed out under a graph that may still launch";
  void* other_block = p.allocate(8 * MiB, other);
  EXPECT_FALSE(overlaps(other_block, 8 * MiB, b, 8 * MiB));
  p.deallocate(other_block, other);
}

TEST_F(PoolGraphCapture, SwitchedOffTheCaptureIsAnOrdinaryStream) {
  pool_options options;
  options.follow_graph_captures = false;
  pool plain{sim, 0, options};
  sim->begin_capture(0, capturing);
  void* b = plain.allocate(2 * MiB, capturing);
  plain.deallocate(b, capturing);
  void* graph = sim->end_capture(0, capturing);
  EXPECT_EQ(plain.stats().graphs, 0u);
  void* again = plain.allocate(2 * MiB, capturing);
  EXPECT_EQ(again, b);
  plain.deallocate(again, capturing);
  sim->destroy_graph(graph);
}

}  // namespace
}  // namespace tidepool::testing
