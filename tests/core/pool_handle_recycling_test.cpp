// Handles recycled on the out-of-memory path (handle_recycling.cpp): at the device's limit the
// handles a miss hands back are mapped again by the growth that follows when it makes handles of
// their size, with no mem_release and no mem_create; the rest go back to the driver. The layout is
// the one releasing gives; only the driver's calls are fewer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>

#include "call_hook_driver.hpp"
#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

std::uint64_t calls_of(const pool& p, driver_call call) { return p.stats().driver.of(call); }

// The calls of one allocation, by kind.
struct allocation_calls {
  std::uint64_t create = 0;
  std::uint64_t release = 0;
  std::uint64_t map = 0;
  std::uint64_t unmap = 0;
};

void* allocate_counting(pool& p, pool_checker& checker, std::size_t size, allocation_calls& calls) {
  const std::uint64_t create = calls_of(p, driver_call::mem_create);
  const std::uint64_t release = calls_of(p, driver_call::mem_release);
  const std::uint64_t map = calls_of(p, driver_call::mem_map);
  const std::uint64_t unmap = calls_of(p, driver_call::mem_unmap);
  void* ptr = checker.allocate(size);
  calls.create = calls_of(p, driver_call::mem_create) - create;
  calls.release = calls_of(p, driver_call::mem_release) - release;
  calls.map = calls_of(p, driver_call::mem_map) - map;
  calls.unmap = calls_of(p, driver_call::mem_unmap) - unmap;
  return ptr;
}

// At the limit (a device with 96 MiB of room, met once), a 56 MiB free block in seven of the
// limit's 8 MiB handles lies between two live blocks, and a 58 MiB request fits nowhere: the
// out-of-memory path hands the seven back and growth maps 58 MiB in a new room above, seven 8 MiB
// handles and one of 2 MiB.
class PoolHandleRecyclingAtTheLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    p.emplace(sim, 0);
    checker.emplace(*sim, *p);
    void* a = checker->allocate(48 * MiB);
    b = checker->allocate(24 * MiB);
    checker->free(a);
    void* c = checker->allocate(60 * MiB);  // the limit: a's handle goes back, c in 8 MiB handles
    d = checker->allocate(8 * MiB);         // in a's room
    checker->free(c);
    void* below = checker->allocate(56 * MiB);  // c's seven 8 MiB handles
    above = checker->allocate(4 * MiB);         // c's 4 MiB end handle
    checker->free(below);
    sizes_before = handle_sizes(*p);
    ASSERT_EQ(sizes_before.count(8 * MiB), 8u) << "c's seven and d's";
  }
  void TearDown() override {
    for (void* x : {b, d, above}) {
      if (x != nullptr) checker->free(x);
    }
    (void)p->release();
    EXPECT_EQ(sim->physical_bytes(0), 0u);
  }

  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>(device_with_room(96 * MiB));
  std::optional<pool> p;
  std::optional<pool_checker> checker;
  void* b = nullptr;
  void* d = nullptr;
  void* above = nullptr;
  std::multiset<std::size_t> sizes_before;
};

// The seven are the ones handed back, mapped again: one create, no release, where releasing made
// eight creates and seven releases.
TEST_F(PoolHandleRecyclingAtTheLimit, TheHandlesHandedBackAreMappedAgainWithNoCreateOrRelease) {
  allocation_calls calls;
  void* e = allocate_counting(*p, *checker, 58 * MiB, calls);
  EXPECT_EQ(calls.unmap, 7u) << "the free block's seven handles leave it";
  EXPECT_EQ(calls.map, 8u);
  EXPECT_EQ(calls.create, 1u) << "only the 2 MiB end handle is new";
  EXPECT_EQ(calls.release, 0u) << "the seven are mapped again, not released";
  std::multiset<std::size_t> sizes_after = sizes_before;
  sizes_after.insert(2 * MiB);
  EXPECT_EQ(handle_sizes(*p), sizes_after);
  EXPECT_EQ(p->stats().mapped_bytes, sim->physical_bytes(0)) << "what the pool counts is what the driver holds";
  EXPECT_EQ(p->stats().mapped_bytes, 94 * MiB);
  checker->check();
  checker->check_patterns();
  checker->free(e);
}

// The device refuses the one new handle after the hand-back: the growth's handles go back, none
// is lost or counted twice, and a later retry of the path serves the request.
TEST_F(PoolHandleRecyclingAtTheLimit, ACreateRefusedAfterTheHandBackLosesNoHandle) {
  sim->fail_nth(driver_call::mem_create, 1, driver_status::out_of_memory);
  void* e = checker->allocate(58 * MiB);
  EXPECT_EQ(p->stats().mapped_bytes, sim->physical_bytes(0));
  EXPECT_EQ(p->stats().mapped_bytes, 94 * MiB);
  checker->check();
  checker->check_patterns();
  checker->free(e);
}

// A recycled handle's map fails: the allocation fails with the driver's error, the handles kept
// and not yet mapped go back to the driver, and the pool still counts what the driver holds.
TEST_F(PoolHandleRecyclingAtTheLimit, AFailedMapOfARecycledHandleLosesNoHandle) {
  sim->fail_nth(driver_call::mem_map, 3, driver_status::error);
  EXPECT_EQ(code_of([&] { (void)checker->allocate(58 * MiB); }), error_code::driver_failure);
  EXPECT_EQ(p->stats().mapped_bytes, sim->physical_bytes(0));
  checker->check();
  void* e = checker->allocate(58 * MiB);
  EXPECT_EQ(p->stats().mapped_bytes, sim->physical_bytes(0));
  checker->check_patterns();
  checker->free(e);
}

// A handle the pool exported may be mapped by another process: recycled, that process would see
// the new allocation's bytes. Here the free block's seven handles were exported once: they go back
// to the driver and growth makes new ones, as before recycling.
TEST_F(PoolHandleRecyclingAtTheLimit, ExportedHandlesAreReleasedNotRecycled) {
  checker->free(above);
  above = nullptr;
  void* below = checker->allocate(56 * MiB);  // the same seven handles, best fit
  exported_allocation exported = p->export_allocation(below);
  for (const int fd : exported.fds) ::close(fd);
  ASSERT_EQ(exported.handle_sizes.size(), 7u);
  above = checker->allocate(4 * MiB);
  checker->free(below);
  allocation_calls calls;
  void* e = allocate_counting(*p, *checker, 58 * MiB, calls);
  EXPECT_EQ(calls.release, 7u) << "the exported handles went back to the driver";
  EXPECT_EQ(calls.create, 8u);
  EXPECT_EQ(p->stats().mapped_bytes, sim->physical_bytes(0));
  checker->check();
  checker->check_patterns();
  checker->free(e);
}

// Handles of no size the growth makes go back to the driver before it creates any: here a's 48 MiB
// handle, handed back for c's 60 MiB growth under a 96 MiB byte cap (in granule handles: a 256th
// of the cap is less than a granule). Kept until the growth ends, the driver would hold 24 + 48 +
// 58 MiB at its last create.
TEST(PoolHandleRecycling, HandlesOfNoSizeTheGrowthMakesGoBackBeforeItCreates) {
  auto sim = std::make_shared<sim_driver>(device_with_room(1024 * MiB));
  constexpr std::size_t cap = 96 * MiB;
  std::size_t most_held_at_a_create = 0;
  auto counting = std::make_shared<call_hook_driver>(sim, [&](driver_call call, std::size_t bytes) {
    if (call == driver_call::mem_create) {
      most_held_at_a_create = std::max(most_held_at_a_create, sim->physical_bytes(0) + bytes);
    }
  });
  pool p(counting, 0);
  pool_checker checker(*sim, p);
  void* a = checker.allocate(48 * MiB);  // made with the device's room: a handle each
  void* b = checker.allocate(24 * MiB);
  p.set_byte_cap(cap);
  checker.free(a);
  allocation_calls calls;
  void* c = allocate_counting(p, checker, 60 * MiB, calls);
  EXPECT_EQ(calls.release, 1u) << "a's handle";
  EXPECT_EQ(calls.create, 30u) << "thirty granules";
  EXPECT_LE(most_held_at_a_create, cap) << "the driver held more than the byte cap";
  EXPECT_EQ(p.stats().mapped_bytes, 84 * MiB);
  EXPECT_EQ(sim->physical_bytes(0), 84 * MiB);
  checker.check();
  checker.check_patterns();
  checker.free(b);
  checker.free(c);
}

}  // namespace
}  // namespace tidepool::testing
