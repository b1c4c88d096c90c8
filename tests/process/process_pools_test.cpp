// Tests of the process's pools: one per device, made on first use, thread safe, with the
// process's driver and default options.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "process/process_fixture.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

using ProcessPools = process_test;

TEST_F(ProcessPools, MadeOnFirstUseOnePerDevice) {
  auto& sim = use_small_sim(2);
  EXPECT_TRUE(existing_pools().empty());
  pool& first = device_pool(0);
  EXPECT_EQ(&first, &device_pool(0));
  EXPECT_EQ(first.device(), 0);
  EXPECT_EQ(first.get_driver().get(), &sim);
  const auto pools = existing_pools();
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0], &first);
  EXPECT_EQ(pools[1], nullptr);
  EXPECT_TRUE(sim.has_context(0));
  EXPECT_FALSE(sim.has_context(1));  // no pool there, so no context either
}

TEST_F(ProcessPools, UnknownDeviceIsRefusedByName) {
  use_small_sim(2);
  for (int device : {2, -1, 100}) {
    try {
      (void)device_pool(device);
      FAIL() << "device " << device << " was accepted";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), error_code::invalid_device);
      EXPECT_NE(std::string(e.what()).find("device " + std::to_string(device)), std::string::npos)
          << e.what();
    }
  }
  for (pool* p : existing_pools()) EXPECT_EQ(p, nullptr);
}

TEST_F(ProcessPools, ConcurrentFirstUseMakesOnePool) {
  use_small_sim(2);
  constexpr int threads = 8;
  std::vector<pool*> seen(threads, nullptr);
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      seen[static_cast<std::size_t>(t)] = &device_pool(t % 2);
    });
  }
  go = true;
  for (auto& w : workers) w.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(seen[static_cast<std::size_t>(t)], seen[static_cast<std::size_t>(t % 2)]);
  EXPECT_NE(seen[0], seen[1]);
}

TEST_F(ProcessPools, DriverCanOnlyBeReplacedBeforeTheFirstPool) {
  use_small_sim();
  set_default_driver(std::make_shared<sim_driver>(sim_config{}));  // no pool yet: allowed
  (void)device_pool(0);
  try {
    set_default_driver(std::make_shared<sim_driver>(sim_config{}));
    FAIL() << "the driver was replaced under a live pool";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_argument);
  }
  EXPECT_THROW(set_default_driver(nullptr), error);
}

TEST_F(ProcessPools, DefaultOptionsApplyToPoolsMadeAfterwards) {
  use_small_sim(2);
  pool_options options;
  options.byte_cap = 256 * MiB;
  options.headroom = 64 * MiB;
  set_default_pool_options(options);
  EXPECT_EQ(device_pool(1).options().byte_cap, 256 * MiB);
  EXPECT_EQ(device_pool(1).options().headroom, 64 * MiB);
}

TEST_F(ProcessPools, OptionsSetOnceAPoolExistsAreRefused) {
  use_small_sim(2);
  (void)device_pool(1);
  pool_options options;
  options.byte_cap = 256 * MiB;
  try {
    set_default_pool_options(options);
    FAIL() << "options were taken while the pool of device 1 keeps its own";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("device(s) 1 exists"), std::string::npos) << e.what();
  }
  EXPECT_EQ(device_pool(0).options().byte_cap, SIZE_MAX);  // pools made later get the old options
}

// A device's byte cap set before its pool exists is the one the pool is made with (the default
// options' cap elsewhere); once the pool exists it changes the running pool; a device that does not
// exist is refused.
TEST_F(ProcessPools, ADeviceByteCapBeforeAndAfterItsPoolIsMade) {
  use_small_sim(2);
  pool_options options;
  options.byte_cap = 512 * MiB;
  set_default_pool_options(options);
  set_device_byte_cap(1, 64 * MiB);
  EXPECT_EQ(device_byte_cap(1), 64 * MiB);
  EXPECT_EQ(device_byte_cap(0), 512 * MiB);
  EXPECT_EQ(existing_pools().size(), 0u) << "setting or reading a cap makes no pool";
  EXPECT_EQ(device_pool(1).byte_cap(), 64 * MiB);
  EXPECT_EQ(device_pool(0).byte_cap(), 512 * MiB);
  set_device_byte_cap(1, 128 * MiB);
  EXPECT_EQ(device_pool(1).byte_cap(), 128 * MiB);
  EXPECT_EQ(device_byte_cap(1), 128 * MiB);
  try {
    set_device_byte_cap(2, 64 * MiB);
    FAIL() << "a cap for a device that does not exist was taken";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_device);
  }
  EXPECT_EQ(device_byte_cap(0), 512 * MiB);
}

}  // namespace
}  // namespace tidepool::testing
