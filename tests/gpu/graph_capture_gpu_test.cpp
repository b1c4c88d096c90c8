// CUDA graph captures on a real GPU: a pool allocation inside a capture in CUDA's default (global)
// capture mode, growth's driver calls included, leaves the capture valid; the graph's blocks are
// kept from other work while it lives, also after its launches run and the program freed them;
// the driver says when the graph is gone, only once its launches are done, and the memory then
// goes back. Two captures under one graph pool share their scratch, and run one after the other
// correctly. Prints how long the capture query costs an allocation (issue 15's pair figures).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "gpu_test.hpp"
#include "tidepool/graph_pool.hpp"
#include "tidepool/pool.hpp"

namespace tidepool {
namespace {

using gpu_test::check;
using gpu_test::cu;
using gpu_test::first_mismatch;

constexpr std::size_t MiB = std::size_t{1} << 20;

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// Waits up to a second for the pool to hear that every graph is gone (the driver's thread runs
// the destructor a moment after the last reference goes).
bool graphs_gone(pool& p) {
  for (int i = 0; i < 1000; ++i) {
    if (p.stats().graphs == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(GraphCaptureOnGpu, AllocationsInAGlobalCaptureAreKeptForTheGraphUntilItIsGone) {
  TIDEPOOL_REQUIRE_GPU();
  if (cu().cuStreamBeginCapture == nullptr || cu().cuUserObjectCreate == nullptr)
    GTEST_SKIP() << "driver without graphs";
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  stream_t s = nullptr;
  stream_t other = nullptr;
  ASSERT_EQ(drv->stream_create(0, &s), driver_status::success);
  ASSERT_EQ(drv->stream_create(0, &other), driver_status::success);
  const auto cs = reinterpret_cast<CUstream>(s);
  {
    pool p(drv, 0);
    check(cu().cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    // 256 MiB the pool does not hold yet: growth's calls run inside the capture.
    void* scratch = p.allocate(256 * MiB, s);
    void* output = p.allocate(64 * MiB, s);
    check(cu().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(scratch), 0x11, 256 * MiB, cs),
          "memset (captured)");
    check(cu().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(output), 0x22, 64 * MiB, cs),
          "memset (captured)");
    p.deallocate(scratch, s);
    CUgraph graph = nullptr;
    ASSERT_EQ(cu().cuStreamEndCapture(cs, &graph), CUDA_SUCCESS)
        << "the pool's calls left the capture valid";
    CUgraphExec exec = nullptr;
    check(cu().cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
    EXPECT_EQ(p.stats().graphs, 1u);
    p.deallocate(output, nullptr);  // the program drops the output; the graph still writes there

    // Eager work on both streams after a release: none of it lands on the graph's blocks.
    EXPECT_EQ(p.release(), 0u);
    std::vector<std::pair<void*, stream_t>> eager;
    for (stream_t on : {static_cast<stream_t>(nullptr), other, s}) {
      for (int i = 0; i < 4; ++i) {
        void* q = p.allocate(64 * MiB, on);
        EXPECT_FALSE(overlaps(q, 64 * MiB, scratch, 256 * MiB) ||
                     overlaps(q, 64 * MiB, output, 64 * MiB));
        check(cu().cuMemsetD8(reinterpret_cast<CUdeviceptr>(q), 0x7e, 64 * MiB), "cuMemsetD8");
        eager.emplace_back(q, on);
      }
    }
    check(cu().cuGraphLaunch(exec, cs), "cuGraphLaunch");
    check(cu().cuStreamSynchronize(cs), "cuStreamSynchronize");
    EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(output), 64 * MiB, 0x22), -1)
        << "the graph ran";
    for (const auto& [q, on] : eager) {
      EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(q), 64 * MiB, 0x7e), -1)
          << "the graph wrote over eager memory";
      p.deallocate(q, on);
    }

    // Gone only once its launches are: a launch queued behind 200 ms of work, then the graph and
    // its executable destroyed at once.
    gpu_test::stream_occupier busy;
    busy.occupy(cs, 200);
    check(cu().cuGraphLaunch(exec, cs), "cuGraphLaunch");
    check(cu().cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    check(cu().cuGraphDestroy(graph), "cuGraphDestroy");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::size_t graphs_while_launch_runs = p.stats().graphs;
    std::printf(
        "[figure] graphs the pool keeps 20 ms after destroying a graph whose launch is queued: %zu "
        "(%s)\n",
        graphs_while_launch_runs, busy.method());
    EXPECT_EQ(graphs_while_launch_runs, 1u)
        << "the driver said the graph was gone before its launch ran";
    check(cu().cuStreamSynchronize(cs), "cuStreamSynchronize");
    ASSERT_TRUE(graphs_gone(p)) << "the driver never said the graph was gone";
    EXPECT_EQ(p.stats().graph_kept_bytes, 0u);
    p.release();
    EXPECT_EQ(p.stats().mapped_bytes, 0u);
  }
  drv->stream_destroy(0, s);
  drv->stream_destroy(0, other);
}

TEST(GraphCaptureOnGpu, CapturesUnderOneGraphPoolShareTheirScratchAndRunInTurn) {
  TIDEPOOL_REQUIRE_GPU();
  if (cu().cuStreamBeginCapture == nullptr || cu().cuUserObjectCreate == nullptr)
    GTEST_SKIP() << "driver without graphs";
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  stream_t s = nullptr;
  ASSERT_EQ(drv->stream_create(0, &s), driver_status::success);
  const auto cs = reinterpret_cast<CUstream>(s);
  {
    pool p(drv, 0);
    const graph_pool_scope scope(new_graph_pool());
    void* scratch[2] = {};
    void* output[2] = {};
    CUgraph graph[2] = {};
    CUgraphExec exec[2] = {};
    for (int i = 0; i < 2; ++i) {
      check(cu().cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
      scratch[i] = p.allocate(128 * MiB, s);
      output[i] = p.allocate(16 * MiB, s);
      const auto value = static_cast<unsigned char>(0x31 + i);
      check(cu().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(scratch[i]), value, 128 * MiB, cs),
            "memset (captured)");
      check(cu().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(output[i]),
                                   reinterpret_cast<CUdeviceptr>(scratch[i]), 16 * MiB, cs),
            "copy (captured)");
      p.deallocate(scratch[i], s);
      ASSERT_EQ(cu().cuStreamEndCapture(cs, &graph[i]), CUDA_SUCCESS);
      check(cu().cuGraphInstantiateWithFlags(&exec[i], graph[i], 0), "cuGraphInstantiateWithFlags");
    }
    EXPECT_EQ(scratch[1], scratch[0]) << "the second capture took the first one's scratch";
    EXPECT_FALSE(overlaps(output[1], 16 * MiB, output[0], 16 * MiB));
    EXPECT_EQ(p.stats().mapped_bytes, 160 * MiB);
    EXPECT_EQ(p.stats().graphs, 2u);
    for (int i = 0; i < 2; ++i) check(cu().cuGraphLaunch(exec[i], cs), "cuGraphLaunch");
    check(cu().cuStreamSynchronize(cs), "cuStreamSynchronize");
    for (int i = 0; i < 2; ++i) {
      const auto value = static_cast<std::uint8_t>(0x31 + i);
      EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(output[i]), 16 * MiB, value), -1)
          << "graph " << i << " ran in turn over the shared scratch";
    }
    for (int i = 0; i < 2; ++i) p.deallocate(output[i], nullptr);
    check(cu().cuGraphExecDestroy(exec[0]), "cuGraphExecDestroy");
    check(cu().cuGraphDestroy(graph[0]), "cuGraphDestroy");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(p.release(), 0u) << "the second graph still writes there";
    check(cu().cuGraphExecDestroy(exec[1]), "cuGraphExecDestroy");
    check(cu().cuGraphDestroy(graph[1]), "cuGraphDestroy");
    ASSERT_TRUE(graphs_gone(p)) << "the driver never said the graphs were gone";
    EXPECT_EQ(p.release(), 160 * MiB);
  }
  drv->stream_destroy(0, s);
}

TEST(GraphCaptureOnGpu, WhatTheCaptureQueryCostsAnAllocation) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  stream_t s = nullptr;
  ASSERT_EQ(drv->stream_create(0, &s), driver_status::success);
  constexpr int pairs = 200000;
  auto time_pairs = [&](pool& p, stream_t on) {
    for (int i = 0; i < 1000; ++i) p.deallocate(p.allocate(4096, on), on);  // warm
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; ++i) p.deallocate(p.allocate(4096, on), on);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
               .count() /
           pairs;
  };
  pool_options off;
  off.follow_graph_captures = false;
  double legacy = 0, created = 0, created_off = 0;
  {
    pool p(drv, 0);
    legacy = time_pairs(p, nullptr);
    created = time_pairs(p, s);
  }
  {
    pool p(drv, 0, off);
    created_off = time_pairs(p, s);
  }
  stream_capture c;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) (void)drv->capture_of(0, s, &c);
  const double query =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
      pairs;
  std::printf(
      "[figure] same-size pair, ns: legacy stream %.1f; created stream %.1f (captures followed), "
      "%.1f (off); "
      "one capture query %.1f ns\n",
      legacy, created, created_off, query);
  EXPECT_FALSE(c.active);
  drv->stream_destroy(0, s);
}

}  // namespace
}  // namespace tidepool
