// Graph pools (tidepool/graph_pool.hpp): captures made under one graph pool share what they free,
// as PyTorch's captures given one `pool=` do, and the memory stays kept until every graph of the
// pool is gone. Captures under no graph pool, or under another, keep memory of their own. The
// current graph pool is the calling thread's, restored by graph_pool_scope; a capture first
// allocating on a thread with none joins the process's default one.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "pool_checker.hpp"
#include "tidepool/graph_pool.hpp"

namespace tidepool::testing {
namespace {

class PoolGraphPool : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sim->stream_create(0, &capturing), driver_status::success);
    ASSERT_EQ(sim->stream_create(0, &other), driver_status::success);
  }
  // One capture on `capturing` as an inference server makes one per batch size: an
  // intermediate of `hidden` bytes allocated and freed inside it, and an output of `out` bytes
  // the program keeps. Returns the graph; the two addresses go to *hidden_at and *out_at.
  void* capture_step(std::size_t hidden, std::size_t out, void** hidden_at, void** out_at) {
    sim->begin_capture(0, capturing);
    *hidden_at = p.allocate(hidden, capturing);
    *out_at = p.allocate(out, capturing);
    p.deallocate(*hidden_at, capturing);
    return sim->end_capture(0, capturing);
  }
  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool p{sim, 0};
  stream_t capturing = nullptr;
  stream_t other = nullptr;
};

TEST_F(PoolGraphPool, CapturesOfOneGraphPoolShareWhatTheyFreed) {
  const graph_pool_scope scope(new_graph_pool());
  void *hidden_a = nullptr, *out_a = nullptr, *hidden_b = nullptr, *out_b = nullptr;
  void* a = capture_step(32 * MiB, 4 * MiB, &hidden_a, &out_a);
  void* b = capture_step(32 * MiB, 4 * MiB, &hidden_b, &out_b);
  EXPECT_EQ(hidden_b, hidden_a) << "the second capture reuses the first one's intermediate";
  EXPECT_NE(out_b, out_a) << "the first graph's output is still the program's";
  EXPECT_EQ(p.stats().mapped_bytes, 40 * MiB) << "one intermediate, two outputs";
  EXPECT_EQ(p.stats().graphs, 2u);
  sim->destroy_graph(a);
  sim->destroy_graph(b);
  p.deallocate(out_a, nullptr);
  p.deallocate(out_b, nullptr);
  EXPECT_EQ(p.release(), 40 * MiB);
}

TEST_F(PoolGraphPool, WithoutOneEachCaptureKeepsItsOwn) {
  void *hidden_a = nullptr, *out_a = nullptr, *hidden_b = nullptr, *out_b = nullptr;
  void* a = nullptr;
  {
    const graph_pool_scope scope(new_graph_pool());
    a = capture_step(32 * MiB, 4 * MiB, &hidden_a, &out_a);
  }
  void* b = capture_step(32 * MiB, 4 * MiB, &hidden_b, &out_b);  // under none
  void *hidden_c = nullptr, *out_c = nullptr;
  void* c = nullptr;
  {
    const graph_pool_scope scope(new_graph_pool());  // under another
    c = capture_step(32 * MiB, 4 * MiB, &hidden_c, &out_c);
  }
  EXPECT_NE(hidden_b, hidden_a);
  EXPECT_NE(hidden_c, hidden_a);
  EXPECT_NE(hidden_c, hidden_b);
  EXPECT_EQ(p.stats().mapped_bytes, 3 * 36 * MiB);
  for (void* g : {a, b, c}) sim->destroy_graph(g);
  for (void* out : {out_a, out_b, out_c}) p.deallocate(out, nullptr);
  EXPECT_EQ(p.release(), 3 * 36 * MiB);
}

TEST_F(PoolGraphPool, TheMemoryIsKeptUntilEveryGraphOfThePoolIsGone) {
  const graph_pool_scope scope(new_graph_pool());
  void *hidden_a = nullptr, *out_a = nullptr, *hidden_b = nullptr, *out_b = nullptr;
  void* a = capture_step(16 * MiB, 2 * MiB, &hidden_a, &out_a);
  void* b = capture_step(16 * MiB, 2 * MiB, &hidden_b, &out_b);
  p.deallocate(out_a, other);  // outputs the program let go stay the graphs'
  p.deallocate(out_b, other);
  sim->destroy_graph(a);
  EXPECT_EQ(p.stats().graphs, 1u);
  EXPECT_EQ(p.release(), 0u) << "the second graph still writes there";
  EXPECT_EQ(p.stats().graph_kept_bytes, 20 * MiB);
  void* eager = p.allocate(16 * MiB, other);
  EXPECT_NE(eager, hidden_a) << "eager work gets none of the graph pool's memory";
  p.deallocate(eager, other);
  sim->destroy_graph(b);
  EXPECT_EQ(p.stats().graphs, 0u);
  EXPECT_EQ(p.release(), 36 * MiB) << "gone with its last graph";
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST_F(PoolGraphPool, AGraphPoolWhoseGraphsAreGoneServesALaterCaptureAfresh) {
  const graph_pool_scope scope(new_graph_pool());
  void *hidden_a = nullptr, *out_a = nullptr, *hidden_b = nullptr, *out_b = nullptr;
  void* a = capture_step(8 * MiB, 2 * MiB, &hidden_a, &out_a);
  sim->destroy_graph(a);
  p.deallocate(out_a, nullptr);
  EXPECT_EQ(p.stats().graphs, 0u);
  EXPECT_EQ(p.stats().graph_kept_bytes, 0u);
  void* b = capture_step(8 * MiB, 2 * MiB, &hidden_b, &out_b);
  EXPECT_EQ(hidden_b, hidden_a) << "what the gone graph held is free for the next capture";
  EXPECT_EQ(p.stats().mapped_bytes, 10 * MiB) << "and nothing more was mapped";
  EXPECT_EQ(p.stats().graphs, 1u);
  sim->destroy_graph(b);
  p.deallocate(out_b, nullptr);
  EXPECT_EQ(p.release(), 10 * MiB);
}

TEST_F(PoolGraphPool, ACaptureKeepsTheGraphPoolItJoined) {
  const std::uint64_t shared = new_graph_pool();
  void *hidden_a = nullptr, *out_a = nullptr;
  void* a = nullptr;
  {
    const graph_pool_scope scope(shared);
    a = capture_step(8 * MiB, 2 * MiB, &hidden_a, &out_a);
  }
  sim->begin_capture(0, capturing);
  void* first = nullptr;
  {
    const graph_pool_scope scope(shared);
    first = p.allocate(1 * MiB, capturing);  // joins `shared` here
  }
  void* later = p.allocate(8 * MiB, capturing);  // the scope is over, the capture still shares
  EXPECT_EQ(later, hidden_a);
  p.deallocate(later, capturing);
  p.deallocate(first, capturing);
  void* b = sim->end_capture(0, capturing);
  EXPECT_EQ(p.stats().graphs, 2u);
  sim->destroy_graph(a);
  sim->destroy_graph(b);
  p.deallocate(out_a, nullptr);
  p.release();
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
}

TEST_F(PoolGraphPool, StreamsJoinedToCapturesOfOneGraphPoolShareStreamByStream) {
  stream_t side = nullptr;
  ASSERT_EQ(sim->stream_create(0, &side), driver_status::success);
  const graph_pool_scope scope(new_graph_pool());
  void* on_side[2] = {};
  void* on_main[2] = {};
  void* graphs[2] = {};
  for (int i = 0; i < 2; ++i) {
    sim->begin_capture(0, capturing);
    sim->join_capture(0, side, capturing);
    on_main[i] = p.allocate(4 * MiB, capturing);
    on_side[i] = p.allocate(4 * MiB, side);
    p.deallocate(on_main[i], capturing);
    p.deallocate(on_side[i], side);
    graphs[i] = sim->end_capture(0, capturing);
  }
  EXPECT_EQ(on_main[1], on_main[0]);
  EXPECT_EQ(on_side[1], on_side[0]);
  EXPECT_NE(on_side[0], on_main[0]) << "the two streams of a graph still keep apart";
  EXPECT_EQ(p.stats().graphs, 4u) << "each capture watched from each stream state it used";
  for (void* g : graphs) sim->destroy_graph(g);
  EXPECT_EQ(p.release(), 8 * MiB);
}

TEST_F(PoolGraphPool, ACaptureFirstAllocatingOnAThreadWithNoneJoinsTheDefault) {
  // As PyTorch's autograd thread allocates a captured backward pass: the capture's first
  // allocation on the stream comes from a thread the program did not give a graph pool.
  auto capture_on_other_thread = [&](void** hidden_at) {
    sim->begin_capture(0, capturing);
    std::thread([&] {
      *hidden_at = p.allocate(16 * MiB, capturing);
      p.deallocate(*hidden_at, capturing);
    }).join();
    return sim->end_capture(0, capturing);
  };
  void* hidden[4] = {};
  void* graphs[4] = {};
  graphs[0] = capture_on_other_thread(&hidden[0]);
  graphs[1] = capture_on_other_thread(&hidden[1]);
  EXPECT_NE(hidden[1], hidden[0]) << "no default: each capture keeps its own";
  const std::uint64_t shared = new_graph_pool();
  EXPECT_EQ(set_default_graph_pool(shared), 0u);
  graphs[2] = capture_on_other_thread(&hidden[2]);
  graphs[3] = capture_on_other_thread(&hidden[3]);
  EXPECT_EQ(set_default_graph_pool(0), shared);
  EXPECT_EQ(hidden[3], hidden[2]) << "both joined the default graph pool";
  EXPECT_EQ(p.stats().mapped_bytes, 48 * MiB);
  for (void* g : graphs) sim->destroy_graph(g);
  EXPECT_EQ(p.release(), 48 * MiB);
}

TEST(GraphPoolScope, NestsRestoresAndIsTheCallingThreadsOwn) {
  EXPECT_EQ(current_graph_pool(), 0u);
  const std::uint64_t outer = new_graph_pool();
  const std::uint64_t inner = new_graph_pool();
  EXPECT_NE(outer, 0u);
  EXPECT_NE(inner, outer);
  {
    const graph_pool_scope a(outer);
    EXPECT_EQ(current_graph_pool(), outer);
    {
      const graph_pool_scope b(inner);
      EXPECT_EQ(current_graph_pool(), inner);
      std::uint64_t seen_elsewhere = 1;
      std::thread([&] { seen_elsewhere = current_graph_pool(); }).join();
      EXPECT_EQ(seen_elsewhere, 0u);
    }
    EXPECT_EQ(current_graph_pool(), outer);
  }
  EXPECT_EQ(current_graph_pool(), 0u);
}

TEST(GraphPoolScope, AnIdNeverMadeIsRefusedAndChangesNothing) {
  const std::uint64_t made = new_graph_pool();
  const graph_pool_scope scope(made);
  try {
    (void)set_current_graph_pool(made + 1000000);
    ADD_FAILURE() << "an id never made was taken";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("never made"), std::string::npos) << e.what();
  }
  EXPECT_EQ(current_graph_pool(), made);
  EXPECT_EQ(set_current_graph_pool(0), made);
  EXPECT_EQ(set_current_graph_pool(made), 0u);
  EXPECT_THROW((void)set_default_graph_pool(made + 1000000), error);
  EXPECT_EQ(default_graph_pool(), 0u) << "a refused id changes nothing";
}

}  // namespace
}  // namespace tidepool::testing
