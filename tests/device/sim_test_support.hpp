// Helpers shared by the simulated GPU's tests: sizes, a small machine, and one-line map / unmap.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>

#include "tidepool/sim.hpp"

namespace tidepool::test {

inline constexpr std::size_t mib = std::size_t{1} << 20;
inline constexpr std::size_t gib = std::size_t{1} << 30;
inline constexpr std::size_t granule = 2 * mib;

/// A machine of `devices` GPUs of `capacity` bytes each, every one with a context.
inline sim_config small_machine(int devices = 1, std::size_t capacity = 1 * gib) {
  sim_config config;
  config.device_count = devices;
  config.capacity = capacity;
  for (int d = 0; d < devices; ++d) config.devices_with_context.push_back(d);
  return config;
}

/// Reserves `size` bytes on `device`, failing the test if the driver refuses.
inline device_address reserve(sim_driver& sim, int device, std::size_t size) {
  device_address address = 0;
  EXPECT_EQ(sim.address_reserve(device, size, 0, &address), driver_status::success);
  return address;
}

/// Creates a handle of `size` bytes on `device`, failing the test if the driver refuses.
inline physical_handle create(sim_driver& sim, int device, std::size_t size) {
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(device, size, &handle), driver_status::success);
  return handle;
}

}  // namespace tidepool::test
