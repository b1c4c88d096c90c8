// The `cupy` baseline (CuPy's MemoryPool): exact-size driver allocations, any split, coalescing,
// and free_all_blocks() releasing only chunks that are whole allocations.
#include "baseline_fixture.hpp"

namespace tidepool::replay::testing {
namespace {

TEST(CupyAllocator, AllocatesTheRoundedSizeFromTheDriver) {
  baseline b("cupy");
  (void)b.alloc(100 * MiB + 1);
  EXPECT_EQ(b.held(), 102 * MiB) << "100 MiB + 512 B asked, in whole 2 MiB pages";
}

TEST(CupyAllocator, SmallAllocationsShareTheDriversPages) {
  baseline b("cupy");
  const auto a = b.alloc(36 * KiB);
  const auto c = b.alloc(36 * KiB);  // nothing free to split: a second cudaMalloc, the same page
  EXPECT_EQ(b.held(), 2 * MiB);
  b.free(a, 36 * KiB);
  EXPECT_EQ(b.allocator->release(), 0u) << "a's cudaFree leaves the page to c";
  EXPECT_EQ(b.held(), 2 * MiB);
  b.free(c, 36 * KiB);
  EXPECT_EQ(b.allocator->release(), 2 * MiB);
  EXPECT_EQ(b.held(), 0u);
  EXPECT_EQ(b.sim->call_counts().of(driver_call::mem_free), 2u);
}

TEST(CupyAllocator, ASmallArrayCarvedFromAFreedLargeChunkKeepsItHeld) {
  baseline b("cupy");
  const auto scratch = b.alloc(100 * MiB);
  b.free(scratch, 100 * MiB);
  const auto kept = b.alloc(36 * KiB);  // any split: carved out of the 100 MiB chunk
  EXPECT_EQ(kept, scratch);
  EXPECT_EQ(b.allocator->release(), 0u);
  EXPECT_EQ(b.held(), 100 * MiB);
  b.free(kept, 36 * KiB);  // merges back into one whole chunk
  EXPECT_EQ(b.allocator->release(), 100 * MiB);
  EXPECT_EQ(b.held(), 0u);
}

TEST(CupyAllocator, TakesTheSmallestChunkThatFitsAndMergesNeighbours) {
  baseline b("cupy");
  const auto a = b.alloc(8 * MiB);
  const auto c = b.alloc(4 * MiB);
  b.free(a, 8 * MiB);
  b.free(c, 4 * MiB);
  EXPECT_EQ(b.alloc(3 * MiB), c);
  const auto rest = b.alloc(512);  // the 1 MiB left of the 4 MiB chunk is the best fit
  EXPECT_EQ(rest, c + 3 * MiB);
  EXPECT_EQ(b.held(), 12 * MiB);
  b.free(rest, 512);
  b.free(c, 3 * MiB);
  EXPECT_EQ(b.allocator->release(), 12 * MiB);
}

TEST(CupyAllocator, ChunksOfOneStreamAreNotUsedOnAnother) {
  baseline b("cupy");
  stream_t other = nullptr;
  ASSERT_EQ(b.sim->stream_create(0, &other), driver_status::success);
  const auto a = b.alloc(10 * MiB);
  b.free(a, 10 * MiB);
  EXPECT_NE(b.alloc(10 * MiB, other), a);
  EXPECT_EQ(b.held(), 20 * MiB);
}

}  // namespace
}  // namespace tidepool::replay::testing
