// Tests of available_bytes(device): the pool's answer where a pool exists; without one, the
// driver's free less the default headroom, within the default byte cap, opening no context.
#include <gtest/gtest.h>

#include "process/process_fixture.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

using AvailableBytes = process_test;

TEST_F(AvailableBytes, WithoutAPoolIsTheDriversFreeAndOpensNothing) {
  auto& sim = use_small_sim();
  sim.set_other_processes_bytes(0, 100 * MiB);
  EXPECT_EQ(available_bytes(0), GiB - 100 * MiB);
  EXPECT_FALSE(sim.has_context(0));
  EXPECT_TRUE(existing_pools().empty());
}

TEST_F(AvailableBytes, WithoutAPoolHonoursDefaultHeadroomAndCap) {
  use_small_sim();
  pool_options options;
  options.headroom = 200 * MiB;
  set_default_pool_options(options);
  EXPECT_EQ(available_bytes(0), GiB - 200 * MiB);
  options.byte_cap = 300 * MiB;
  set_default_pool_options(options);
  EXPECT_EQ(available_bytes(0), 300 * MiB);
  options.headroom = 2 * GiB;  // more than the device: nothing is available, no underflow
  set_default_pool_options(options);
  EXPECT_EQ(available_bytes(0), 0u);
}

TEST_F(AvailableBytes, WithAPoolIsThePoolsAnswerAndCountsItsCache) {
  use_small_sim();
  pool& p = device_pool(0);
  void* live = p.allocate(256 * MiB);
  void* freed = p.allocate(128 * MiB);
  p.deallocate(freed);
  EXPECT_EQ(available_bytes(0), p.available_bytes());
  // The cache counts as available: only the live block is out of reach.
  EXPECT_GE(available_bytes(0), GiB - 256 * MiB - 2 * MiB);
  EXPECT_LE(available_bytes(0), GiB - 256 * MiB);
  p.deallocate(live);
}

TEST_F(AvailableBytes, UnknownDeviceIsRefused) {
  use_small_sim(2);
  EXPECT_THROW((void)available_bytes(2), error);
  EXPECT_THROW((void)available_bytes(-1), error);
}

}  // namespace
}  // namespace tidepool::testing
