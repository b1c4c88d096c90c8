// A stream's last free is parked whole for a request of the same size (pool_impl::allocate, the
// fast path of a loop that frees and makes one tensor again and again). It is handed out again
// only where best fit would place the request (arena::parked_is_best_fit); anywhere else it goes
// back to its free index first. Handing it out unconditionally took the request away from a block
// of its size at a lower address, or from an exact fit while the parked block would have joined a
// free neighbour, and held more than expandable segments where best fit did not (RESULTS section 0,
// "The parked block and best fit").
#include <gtest/gtest.h>

#include <memory>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

class PoolParking : public ::testing::Test {
 protected:
  static pool_options no_stealing() {
    pool_options options;
    options.growth_slack = 10.0;  // growth makes new handles: the blocks stay where they are
    return options;
  }
  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool p{sim, 0, no_stealing()};
};

TEST_F(PoolParking, AnEqualFitAtALowerAddressGoesFirst) {
  void* x = p.allocate(4 * MiB);
  void* keeper = p.allocate(2 * MiB);  // keeps x from joining y
  void* y = p.allocate(4 * MiB);
  void* top = p.allocate(2 * MiB);  // keeps y away from the frontier
  p.deallocate(x);
  p.deallocate(y);  // parked: the stream's last free
  void* again = p.allocate(4 * MiB);
  EXPECT_EQ(again, x) << "the parked block at " << y << " was handed out over the lower one";
  p.deallocate(again);
  p.deallocate(keeper);
  p.deallocate(top);
}

TEST_F(PoolParking, AnExactFitGoesFirstWhenTheParkedBlockWouldJoinAFreeNeighbour) {
  void* parked = p.allocate(4 * MiB);
  void* neighbour = p.allocate(3 * MiB);
  void* keeper = p.allocate(2 * MiB);
  void* exact = p.allocate(4 * MiB);
  void* top = p.allocate(2 * MiB);
  p.deallocate(neighbour);
  p.deallocate(exact);
  p.deallocate(parked);  // with its free neighbour it makes a 7 MiB block: exact is the better fit
  void* again = p.allocate(4 * MiB);
  EXPECT_EQ(again, exact) << "the parked block at " << parked << " was handed out over the exact fit";
  p.deallocate(again);
  p.deallocate(keeper);
  p.deallocate(top);
}

TEST_F(PoolParking, TheParkedBlockIsHandedOutAgainWhereBestFitWouldPlaceIt) {
  void* below = p.allocate(4 * MiB);
  void* keeper = p.allocate(2 * MiB);
  void* t = p.allocate(4 * MiB);
  void* top = p.allocate(2 * MiB);
  void* const first = t;
  for (int i = 0; i < 100; ++i) {
    p.deallocate(t);
    t = p.allocate(4 * MiB);  // the parked block is the lowest block of its size: the same address
    ASSERT_EQ(t, first);
  }
  p.deallocate(below);  // now a lower block of the same size is free: it goes first
  p.deallocate(t);
  EXPECT_EQ(p.allocate(4 * MiB), below);
  p.deallocate(below);
  p.deallocate(keeper);
  p.deallocate(top);
}

}  // namespace
}  // namespace tidepool::testing
