// Stream-ordered reuse: a block freed on stream A is reused at once on A, reaches stream B only
// after the work queued on A before the free has completed (at B's next allocation when A is not
// the stream it was allocated on), and record_stream() holds a block back until the work of every
// recorded stream is done. release() waits for pending frees rather than unmap memory under
// queued work.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

class PoolStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sim->stream_create(0, &a), driver_status::success);
    ASSERT_EQ(sim->stream_create(0, &b), driver_status::success);
  }
  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p{sim, 0};
  stream_t a = nullptr;
  stream_t b = nullptr;
};

TEST_F(PoolStreams, SameStreamReusesAtOnce) {
  void* x = p.allocate(2 * MiB, a);
  sim->launch(0, a, 100.0, reinterpret_cast<device_address>(x), 2 * MiB);
  p.deallocate(x, a);
  void* y = p.allocate(2 * MiB, a);
  EXPECT_EQ(y, x) << "a block freed on a stream is reused at once on the same stream";
  p.deallocate(y, a);
}

TEST_F(PoolStreams, OtherStreamWaitsForTheEvent) {
  void* x = p.allocate(2 * MiB, a);
  const auto address = reinterpret_cast<device_address>(x);
  sim->launch(0, a, 100.0, address, 2 * MiB);
  p.deallocate(x, a);

  void* y = p.allocate(2 * MiB, b);  // A's work is still queued: must not be x
  EXPECT_NE(y, x);
  const auto y_address = reinterpret_cast<device_address>(y);
  EXPECT_TRUE(y_address + 2 * MiB <= address || address + 2 * MiB <= y_address);

  sim->advance(150.0);  // A's work is done
  void* z = p.allocate(2 * MiB, b);
  EXPECT_EQ(z, x) << "once A's event completed, B reuses the block";
  p.deallocate(y, b);
  p.deallocate(z, b);
  p.release();
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST_F(PoolStreams, RecordStreamHoldsTheBlockUntilTheOtherStreamIsDone) {
  void* x = p.allocate(2 * MiB, a);
  const auto address = reinterpret_cast<device_address>(x);
  p.record_stream(x, b);
  sim->launch(0, b, 100.0, address, 2 * MiB);
  p.deallocate(x, a);  // nothing queued on A: only B's work holds it

  void* y = p.allocate(2 * MiB, a);
  EXPECT_NE(y, x) << "B still uses the block: not even A may reuse it";
  sim->advance(150.0);
  void* z = p.allocate(2 * MiB, a);
  EXPECT_EQ(z, x);
  p.deallocate(y, a);
  p.deallocate(z, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST_F(PoolStreams, ReleaseWaitsForPendingFrees) {
  void* x = p.allocate(8 * MiB, a);
  sim->launch(0, a, 1000.0, reinterpret_cast<device_address>(x), 8 * MiB);
  p.deallocate(x, a);
  const std::size_t returned = p.release();
  EXPECT_EQ(returned, 8 * MiB);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_GE(sim->now(), 1000.0) << "release() waited for A's work";
}

TEST_F(PoolStreams, FreesOfDifferentStreamsDoNotMerge) {
  // Two neighbours freed on different streams with work queued: a request for both together
  // must not get their union while either stream is busy.
  void* x = p.allocate(2 * MiB, a);
  void* y = p.allocate(2 * MiB, a);
  sim->launch(0, a, 100.0, reinterpret_cast<device_address>(x), 2 * MiB);
  sim->launch(0, b, 100.0, reinterpret_cast<device_address>(y), 2 * MiB);
  p.deallocate(x, a);
  p.deallocate(y, b);
  void* z = p.allocate(4 * MiB, a);
  const auto lo = reinterpret_cast<device_address>(std::min(x, y));
  const auto zz = reinterpret_cast<device_address>(z);
  EXPECT_TRUE(zz + 4 * MiB <= lo || lo + 4 * MiB <= zz) << "the union of two streams' frees was handed out";
  p.deallocate(z, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// A block freed on a stream other than the one it was allocated on (memory handed to a
// communication stream that only frees) reaches the allocating stream at its next allocation once
// the freeing stream's work is done, not only at its next miss: before, best fit had by then
// placed the request in other free memory (the data-parallel traces, RESULTS section 0).
TEST_F(PoolStreams, AFreeOnAnotherStreamReachesTheAllocatingStreamAtItsNextAllocation) {
  void* wide = p.allocate(8 * MiB, a);
  void* between = p.allocate(2 * MiB, a);  // keeps x from joining wide's free memory
  void* x = p.allocate(4 * MiB, a);
  void* keeper = p.allocate(2 * MiB, a);   // keeps x inside the mapped memory
  p.deallocate(wide, a);                   // a's own free memory, larger than x
  const std::size_t held = p.stats().mapped_bytes;
  sim->launch(0, b, 100.0, reinterpret_cast<device_address>(x), 4 * MiB);
  p.deallocate(x, b);
  void* early = p.allocate(4 * MiB, a);
  EXPECT_EQ(early, wide) << "b's work still uses x: a's request goes to a's own free memory";
  p.deallocate(early, a);
  sim->advance(150.0);
  void* later = p.allocate(4 * MiB, a);
  EXPECT_EQ(later, x) << "b's work is done: x is the best fit, without a miss first";
  EXPECT_EQ(p.stats().mapped_bytes, held) << "every request was served from the cache";
  for (void* ptr : {later, between, keeper}) p.deallocate(ptr, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// The same for a block record_stream() held back: it reaches its stream once the recorded
// stream's work is done, at the next allocation.
TEST_F(PoolStreams, ARecordStreamFreeReachesItsStreamAtItsNextAllocation) {
  void* wide = p.allocate(8 * MiB, a);
  void* between = p.allocate(2 * MiB, a);
  void* x = p.allocate(4 * MiB, a);
  void* keeper = p.allocate(2 * MiB, a);
  p.deallocate(wide, a);
  const std::size_t held = p.stats().mapped_bytes;
  p.record_stream(x, b);
  sim->launch(0, b, 100.0, reinterpret_cast<device_address>(x), 4 * MiB);
  p.deallocate(x, a);
  void* early = p.allocate(4 * MiB, a);
  EXPECT_EQ(early, wide);
  p.deallocate(early, a);
  sim->advance(150.0);
  void* later = p.allocate(4 * MiB, a);
  EXPECT_EQ(later, x);
  EXPECT_EQ(p.stats().mapped_bytes, held);
  for (void* ptr : {later, between, keeper}) p.deallocate(ptr, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// A block freed on another stream does not take its neighbours into the freeing stream's list while
// that stream's work runs: y, freed on a (a's own: a keeps what it frees while it allocates), stays
// a's, reused there at once and not by b, where a first form of cross-stream frees had dragged it.
TEST_F(PoolStreams, AFreeOnAnotherStreamLeavesItsNeighboursWhereTheyWere) {
  stream_t c = nullptr;
  ASSERT_EQ(sim->stream_create(0, &c), driver_status::success);
  void* x = p.allocate(4 * MiB, a);
  void* y = p.allocate(4 * MiB, a);
  void* keeper = p.allocate(2 * MiB, a);
  void* elsewhere = p.allocate(2 * MiB, a);
  void* keeper_above = p.allocate(2 * MiB, a);
  ASSERT_EQ(reinterpret_cast<device_address>(y), reinterpret_cast<device_address>(x) + 4 * MiB);
  p.deallocate(y, a);
  void* miss = p.allocate(16 * MiB, a);  // a slow path: y, a's free with no work queued, settles as a's
  sim->launch(0, b, 100.0, reinterpret_cast<device_address>(x), 4 * MiB);
  p.deallocate(x, b);
  p.deallocate(elsewhere, b);  // b's next free: x would be in b's free list now, were it not kept aside
  void* on_b = p.allocate(4 * MiB, b);
  EXPECT_NE(on_b, y) << "y went with x to b's free list";
  void* on_a = p.allocate(4 * MiB, a);
  EXPECT_EQ(on_a, y) << "y is a's own, reused there at once";
  p.deallocate(on_b, b);
  for (void* ptr : {on_a, miss, keeper, keeper_above}) p.deallocate(ptr, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// Each stream grows in address ranges of its own; when the address space has no room for another
// (many streams, each with ranges of its own), a stream grows in another's free room rather
// than fail.
TEST_F(PoolStreams, AStreamWithNoAddressSpaceOfItsOwnGrowsInAnothers) {
  void* on_a = p.allocate(8 * MiB, a);
  p.deallocate(on_a, a);  // a's range: mapped free memory, then unmapped room
  (void)p.release();      // all of a's range is room now
  for (std::uint64_t nth = 1; nth <= 16; ++nth) {  // no address space for b, however often it asks
    sim->fail_nth(driver_call::address_reserve, nth, driver_status::out_of_memory);
  }
  void* on_b = p.allocate(8 * MiB, b);  // b's first growth: its own range cannot be reserved
  EXPECT_NE(on_b, nullptr);
  void* again = p.allocate(2 * MiB, a);
  EXPECT_NE(again, on_b);
  p.deallocate(on_b, b);
  p.deallocate(again, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// The stream a block was allocated on is forgotten (destroyed, its queued work running on), before
// or after the block is freed on another stream: no other stream reuses it under work still queued
// where it was allocated, and nothing is stranded: release() waits for the device and hands it
// back. `forget_first`: forgotten before the free.
void expect_a_forgotten_streams_work_respected(sim_driver& sim, pool& p, stream_t a, stream_t b, bool forget_first) {
  void* x = p.allocate(4 * MiB, a);
  void* keeper = p.allocate(2 * MiB, b);
  sim.launch(0, a, 300.0, reinterpret_cast<device_address>(x), 4 * MiB);  // a's earlier work there
  sim.launch(0, b, 100.0, reinterpret_cast<device_address>(x), 4 * MiB);
  if (forget_first) p.forget_stream(a);
  p.deallocate(x, b);
  if (!forget_first) p.forget_stream(a);
  sim.advance(150.0);  // b's work done, a's not
  void* on_b = p.allocate(4 * MiB, b);
  EXPECT_NE(on_b, x) << "reused under a's queued work";
  p.deallocate(on_b, b);
  p.deallocate(keeper, b);
  (void)p.release();
  EXPECT_EQ(p.stats().mapped_bytes, 0u) << "every byte went back";
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u);
}

TEST_F(PoolStreams, AFreeOnAnotherStreamOutlivesTheStreamItWasAllocatedOn) {
  expect_a_forgotten_streams_work_respected(*sim, p, a, b, false);
}

TEST_F(PoolStreams, AFreeOnAnotherStreamOfAForgottenStreamsBlockWaitsForTheDevice) {
  expect_a_forgotten_streams_work_respected(*sim, p, a, b, true);
}

// A block handed out on stream a over a's own earlier free, whose work is still queued, then freed
// on stream b: b's work done, the block must still reach no stream but a until a's work is done
// (the randomized test found b's and the default stream's reuse under it).
TEST_F(PoolStreams, AFreeOnAnotherStreamWaitsForTheWorkQueuedWhereItWasAllocated) {
  void* x = p.allocate(4 * MiB, a);
  void* keeper = p.allocate(2 * MiB, a);
  sim->launch(0, a, 1000.0, reinterpret_cast<device_address>(x), 4 * MiB);
  p.deallocate(x, a);
  void* again = p.allocate(4 * MiB, a);  // a reuses at once: its own order
  ASSERT_EQ(again, x);
  p.deallocate(again, b);  // b has no work: its event completes at once
  void* on_b = p.allocate(4 * MiB, b);
  EXPECT_NE(on_b, x) << "b reused it under a's queued work";
  void* on_a = p.allocate(4 * MiB, a);
  EXPECT_EQ(on_a, x) << "a reuses it: its own order";
  sim->advance(1100.0);
  p.deallocate(on_a, a);
  for (void* ptr : {on_b, keeper}) p.deallocate(ptr, ptr == on_b ? b : a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// Memory freed while another stream's work still uses it (record_stream) counts as in use for the
// growth budget: the program cannot have it back before that work is done, so a new request grows
// the pool rather than steal or wait for the device. A copy stream offloading activations made the
// pool steal in every step before (gpt-offload, RESULTS section 0).
TEST_F(PoolStreams, HeldBackFreesCountAsInUseForTheGrowthBudget) {
  pool_options options;
  options.growth_slack = 0.1;
  pool q(sim, 0, options);
  // Free memory that stealing could take: four 4 MiB holes between live blocks, every stream's.
  std::vector<void*> keepers;
  std::vector<void*> holes;
  for (int i = 0; i < 4; ++i) {
    holes.push_back(q.allocate(4 * MiB, a));
    keepers.push_back(q.allocate(2 * MiB, a));
  }
  for (void* h : holes) q.deallocate(h, a);
  void* miss = q.allocate(32 * MiB, a);  // a slow path: the holes become every stream's
  q.deallocate(miss, a);
  std::vector<void*> first;
  for (int i = 0; i < 8; ++i) first.push_back(q.allocate(8 * MiB, a));
  sim->launch(0, b, 1000.0);
  for (void* x : first) {
    q.record_stream(x, b);
    q.deallocate(x, a);  // b's work may still read it
  }
  const std::size_t unmapped = q.stats().driver.of(driver_call::mem_unmap);
  std::vector<void*> second;
  for (int i = 0; i < 8; ++i) second.push_back(q.allocate(8 * MiB, a));
  for (void* y : second) EXPECT_EQ(std::find(first.begin(), first.end(), y), first.end()) << "reused under b's work";
  EXPECT_EQ(q.stats().driver.of(driver_call::device_synchronize), 0u) << "waited for the device instead of growing";
  EXPECT_EQ(q.stats().driver.of(driver_call::mem_unmap), unmapped) << "stole the holes' handles instead of growing";
  for (void* y : second) q.deallocate(y, a);
  for (void* k : keepers) q.deallocate(k, a);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// The frontier rule holds across the two places a stream's request looks: a block free for every
// stream inside the mapped memory serves it before the stream's own free block at the frontier
// (which has unmapped room above it), though the frontier block is the smaller fit. Placement
// must not depend on whether another stream's frees were known complete (the GPU running behind):
// the serving and loader traces held more than expandable segments through this (RESULTS section 0).
TEST_F(PoolStreams, TheFrontierRuleHoldsAcrossAStreamsOwnFreesAndThoseOfEveryStream) {
  pool_options options;
  options.growth_slack = 10.0;  // growth makes new handles: nothing is stolen from under the blocks
  pool q(sim, 0, options);
  void* x = q.allocate(8 * MiB, b);
  void* keeper = q.allocate(2 * MiB, b);  // keeps x inside the mapped memory, away from the frontier
  sim->launch(0, b, 100.0, reinterpret_cast<device_address>(x), 8 * MiB);
  q.deallocate(x, b);
  void* small_b = q.allocate(4096, b);  // x joins b's free blocks; b's work still runs
  // b makes no more calls: what it freed is every stream's once done (a stream that still
  // allocates keeps its frees within the growth budget).
  q.forget_stream(b);
  void* t = q.allocate(3 * MiB, a);     // grows at the frontier: x is b's until its event completes
  sim->launch(0, a, 10000.0, reinterpret_cast<device_address>(t), 3 * MiB);
  q.deallocate(t, a);                   // a free block at the frontier, a's own while a's work runs
  sim->advance(150.0);                  // b's work done, a's not
  // Two small requests fill the rest of the small arena's granule and then miss there: the miss
  // settles b's frees, so x is every stream's now.
  void* small_a = q.allocate(MiB - 512, a);
  void* small_miss = q.allocate(MiB - 512, a);
  void* request = q.allocate(2 * MiB + 512 * 1024, a);
  EXPECT_EQ(request, x) << "the request went to the frontier block at " << t << ", not inside the mapped memory";
  q.deallocate(request, a);
  q.deallocate(small_a, a);
  q.deallocate(small_miss, a);
  q.deallocate(keeper, a);
  q.deallocate(small_b, a);
}

// Two free blocks of the request's size inside the mapped memory: y, the request's own stream's
// (its work still running), and x, at a lower address, free for every stream. The lower address
// wins, as between two blocks of one index: which index holds a block says only whether an event
// was seen to complete. The stream's own block won such ties, and a checkpointed loop's second pass
// laid out apart from its first (RESULTS section 0, "The 1 MiB boundary and equal fits").
TEST_F(PoolStreams, EqualFitsGoToTheLowerAddressWhicheverStreamFreedThem) {
  pool_options options;
  options.growth_slack = 10.0;  // growth makes new handles: nothing is stolen from under the blocks
  pool q(sim, 0, options);
  // Each stream grows in address ranges of its own; the sim reserves a later range below an earlier.
  void* y = q.allocate(4 * MiB, a);
  void* keeper_a = q.allocate(2 * MiB, a);  // keeps y away from the frontier
  void* x = q.allocate(4 * MiB, b);
  void* keeper_b = q.allocate(2 * MiB, b);  // keeps x from joining free memory above it
  ASSERT_LT(reinterpret_cast<device_address>(x), reinterpret_cast<device_address>(y));
  sim->launch(0, b, 100.0, reinterpret_cast<device_address>(x), 4 * MiB);
  q.deallocate(x, b);
  void* small_b = q.allocate(4096, b);  // x joins b's free blocks; b's work still runs
  q.forget_stream(b);                   // b makes no more calls: its frees are every stream's once done
  sim->launch(0, a, 10000.0, reinterpret_cast<device_address>(y), 4 * MiB);
  q.deallocate(y, a);                   // a's own free block while a's work runs
  sim->advance(150.0);                  // b's work done, a's not
  // Two small requests fill the rest of the small arena's granule and then miss there: the miss
  // settles b's frees, so x is every stream's now.
  void* small_a = q.allocate(MiB - 512, a);
  void* small_miss = q.allocate(MiB - 512, a);
  void* request = q.allocate(4 * MiB, a);
  EXPECT_EQ(request, x) << "the request took a's own block at " << y << " over the lower one";
  q.deallocate(request, a);
  q.deallocate(small_a, a);
  q.deallocate(small_miss, a);
  q.deallocate(keeper_a, a);
  q.deallocate(keeper_b, a);
  q.deallocate(small_b, a);
}

// x and y adjacent, x held back by record_stream(x, c), y freed on another stream (so it joins
// a's frees once b's work is done): when x's free completes it merges with y. The merged block
// must become safe for every stream once both parts are (it used to keep y's later free number in
// x's stream, which x's stream never reached).
class PoolStreamsMerged : public ::testing::Test {
 protected:
  static pool_options no_stealing() {
    pool_options options;
    options.growth_slack = 1.0;  // growth makes new handles: x + y stay where they are
    return options;
  }
  void SetUp() override {
    for (stream_t* s : {&a, &b, &c}) ASSERT_EQ(sim->stream_create(0, s), driver_status::success);
    x = p.allocate(2 * MiB, a);
    y = p.allocate(2 * MiB, a);
    above = p.allocate(2 * MiB, a);  // keeps y from joining free space above it
    ASSERT_EQ(reinterpret_cast<device_address>(y), reinterpret_cast<device_address>(x) + 2 * MiB);
    p.record_stream(x, c);
    sim->launch(0, c, 1000.0, reinterpret_cast<device_address>(x), 2 * MiB);
    p.deallocate(x, a);
    p.deallocate(y, b);
    other = p.allocate(8 * MiB, a);  // a slow path on a
    sim->advance(1500.0);            // c's work is done
    // A call on a: y, freed on b, joined a's frees, and a's next event covers it.
    poke = p.allocate(4096, a);
  }
  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p{sim, 0, no_stealing()};
  stream_t a = nullptr;
  stream_t b = nullptr;
  stream_t c = nullptr;
  void* x = nullptr;
  void* y = nullptr;
  void* above = nullptr;
  void* other = nullptr;
  void* poke = nullptr;  // live: its small granule stays mapped
};

TEST_F(PoolStreamsMerged, ReleaseReturnsTheMergedBlock) {
  EXPECT_EQ(p.release(), 4 * MiB) << "x + y";
  EXPECT_EQ(p.stats().mapped_bytes, 12 * MiB) << "above, other and poke's granule";
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

TEST_F(PoolStreamsMerged, AnotherStreamReusesTheMergedBlock) {
  // a keeps what it frees while it allocates; once it holds nothing, its frees that an event of
  // its shows done reach every stream at the next miss.
  for (void* ptr : {above, other, poke}) p.deallocate(ptr, a);
  p.deallocate(p.allocate(32 * MiB, a), a);  // a miss on a (its events settle), and an event covering its frees
  void* both = p.allocate(4 * MiB, b);
  EXPECT_EQ(both, x) << "x + y, safe for every stream, serve a request on b";
  EXPECT_EQ(p.stats().driver.of(driver_call::device_synchronize), 0u);
  p.deallocate(both, b);
}

TEST_F(PoolStreamsMerged, OutOfMemoryReportIsConsistent) {
  // Fill the device: what is left is x + y (and less than a granule).
  const std::size_t free_now = sim->memory_info(0).free;
  void* filler = p.allocate(free_now - free_now % (2 * MiB), b);
  void* both = nullptr;
  try {
    both = p.allocate(4 * MiB, b);
  } catch (const out_of_memory& e) {
    FAIL() << "4 MiB refused: " << e.what();
  }
  EXPECT_EQ(both, x);
  p.deallocate(both, b);
  p.deallocate(filler, b);
}

// The other order: x's free completes (c is done) while a's own work on x is still queued, so x
// joins a's free list and merges there with y (freed on b, which joined a's frees). Once a's
// work is done and an event of a covers both, the merged block must reach every stream (it used
// to carry a later free number, which a's event never covered).
TEST(PoolStreamsMergedLater, MergedBlockReachesEveryStreamWithItsOwnStreamsEvent) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool_options options;
  options.growth_slack = 1.0;
  pool p(sim, 0, options);
  stream_t a = nullptr;
  stream_t b = nullptr;
  stream_t c = nullptr;
  for (stream_t* s : {&a, &b, &c}) ASSERT_EQ(sim->stream_create(0, s), driver_status::success);
  void* x = p.allocate(2 * MiB, a);
  void* y = p.allocate(2 * MiB, a);
  void* above = p.allocate(2 * MiB, a);
  ASSERT_EQ(reinterpret_cast<device_address>(y), reinterpret_cast<device_address>(x) + 2 * MiB);
  p.record_stream(x, c);
  sim->launch(0, c, 1000.0, reinterpret_cast<device_address>(x), 2 * MiB);
  sim->launch(0, a, 2000.0, reinterpret_cast<device_address>(x), 2 * MiB);
  p.deallocate(x, a);
  p.deallocate(y, b);
  void* first = p.allocate(8 * MiB, b);  // a slow path: y, freed on b (no work), joins a's frees
  sim->advance(1500.0);                  // c is done, a is not
  void* other = p.allocate(8 * MiB, b);  // another: x's free completes, x joins a's list and y
  sim->advance(1000.0);                  // a is done
  p.deallocate(above, a);                // a holds nothing now: its frees reach every stream once done
  p.deallocate(p.allocate(4096, a), a);  // a call on a: its event covers x, y and above
  void* both = p.allocate(4 * MiB, b);
  EXPECT_EQ(both, x) << "x + y, safe for every stream once a's event completed, serve b";
  EXPECT_EQ(p.stats().driver.of(driver_call::device_synchronize), 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  for (void* ptr : {both, first, other}) p.deallocate(ptr, b);
}

// A program may destroy a stream it freed memory on before release() or the pool's end: the pool
// then waits for the device, never records on the stream (a crash on the real driver).
TEST(PoolStreamsDestroyed, ReleaseAfterTheStreamIsGone) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  void* x = p.allocate(8 * MiB, s);
  sim->launch(0, s, 500.0, reinterpret_cast<device_address>(x), 8 * MiB);
  p.deallocate(x, s);
  ASSERT_EQ(sim->stream_destroy(0, s), driver_status::success);
  const std::uint64_t recorded = p.stats().driver.of(driver_call::event_record);
  EXPECT_EQ(p.release(), 8 * MiB);
  EXPECT_EQ(p.stats().driver.of(driver_call::event_record), recorded) << "no event recorded by release()";
  EXPECT_GE(p.stats().driver.of(driver_call::device_synchronize), 1u);
  EXPECT_GE(sim->now(), 500.0) << "release() waited for the stream's work";
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
}

TEST(PoolStreamsDestroyed, DestructorAfterTheStreamIsGone) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  {
    pool p(sim, 0);
    void* x = p.allocate(8 * MiB, s);
    void* kept = p.allocate(4 * MiB, s);  // still live at the end: unmapped by the destructor
    sim->launch(0, s, 500.0, reinterpret_cast<device_address>(x), 8 * MiB);
    sim->launch(0, s, 500.0, reinterpret_cast<device_address>(kept), 4 * MiB);
    p.deallocate(x, s);
    ASSERT_EQ(sim->stream_destroy(0, s), driver_status::success);
    sim->reset_call_counts();
  }
  EXPECT_EQ(sim->call_counts().of(driver_call::event_record), 0u) << "no event recorded by the destructor";
  EXPECT_GE(sim->now(), 1000.0) << "the destructor waited for the work";
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  EXPECT_EQ(sim->physical_bytes(0), 0u);
}

}  // namespace
}  // namespace tidepool::testing
