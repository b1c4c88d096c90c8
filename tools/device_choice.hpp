// tools/device_choice.hpp: makes the driver a command asked for with --device sim|cuda.
#pragma once

#include <memory>
#include <string>

#include "tidepool/driver.hpp"

namespace tidepool::cli {

/// A fresh simulated H200 for "sim"; the CUDA driver for "cuda" (throws tidepool::error with the
/// reason when it is not available).
[[nodiscard]] std::shared_ptr<driver> make_driver(const std::string& device);

}  // namespace tidepool::cli
