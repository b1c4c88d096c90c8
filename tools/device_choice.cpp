// tools/device_choice.cpp: the sim (sized as an H200 by sim_config's defaults, or as replay's
// --capacity asks) or the CUDA driver.
#include "device_choice.hpp"

#include <fmt/format.h>

#include "tidepool/errors.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::cli {

std::shared_ptr<driver> make_driver(const std::string& device, std::size_t sim_capacity) {
  if (device == "sim") {
    sim_config config;
    if (sim_capacity != 0) config.capacity = sim_capacity;
    return std::make_shared<sim_driver>(config);
  }
  if (device == "cuda") {
    if (const std::string reason = cuda_driver_unavailable_reason(); !reason.empty()) {
      throw error(error_code::unavailable, fmt::format("--device cuda: {}", reason));
    }
    return make_cuda_driver();
  }
  throw error(error_code::invalid_argument, fmt::format("unknown device \"{}\" (sim or cuda)", device));
}

}  // namespace tidepool::cli
