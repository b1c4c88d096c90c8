// tests/replay/baseline_fixture.hpp: a simulated H200 and one baseline on it, with a check that
// the allocator's own count of held memory is the driver's exact figure.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "replay/replay_allocator.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::replay::testing {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;

/// A fresh sim with a context on device 0 and the named allocator on it.
struct baseline {
  explicit baseline(const std::string& name) : sim(std::make_shared<sim_driver>()) {
    EXPECT_EQ(sim->open_context(0), driver_status::success);
    allocator = make_allocator(name, sim, 0);
  }
  /// Allocates and expects success.
  device_address alloc(std::size_t bytes, stream_t stream = nullptr) {
    const auto address = allocator->allocate(bytes, stream);
    EXPECT_TRUE(address.has_value()) << "allocation of " << bytes << " failed";
    return address.value_or(0);
  }
  void free(device_address address, std::size_t bytes, stream_t stream = nullptr) {
    allocator->deallocate(address, bytes, stream);
  }
  /// Held bytes, checked equal between the driver and the allocator's own count.
  std::size_t held() {
    const std::size_t physical = sim->physical_bytes(0);
    EXPECT_EQ(physical, allocator->held_bytes()) << "own count disagrees with the driver";
    return physical;
  }

  std::shared_ptr<sim_driver> sim;
  std::unique_ptr<replay_allocator> allocator;
};

}  // namespace tidepool::replay::testing
