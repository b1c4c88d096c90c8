// tools/device_choice.hpp: makes the driver a command asked for with --device sim|cuda.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tidepool/driver.hpp"

namespace tidepool::cli {

/// A fresh simulated H200 for "sim"; the CUDA driver for "cuda" (throws tidepool::error with the
/// reason when it is not available). `sim_capacity`, when not zero, is the simulated device's
/// capacity in bytes instead of an H200's (sim only: a real GPU's size is what it is).
[[nodiscard]] std::shared_ptr<driver> make_driver(const std::string& device, std::size_t sim_capacity = 0);

}  // namespace tidepool::cli
