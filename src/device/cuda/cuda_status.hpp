// cuda_status.hpp: how a CUresult maps onto tidepool's driver_status.
#pragma once

#include <cuda.h>

#include "tidepool/driver.hpp"

namespace tidepool::detail {

/// The driver_status of a CUresult: out of memory, not ready, a bad argument, unsupported, or
/// any other error.
[[nodiscard]] driver_status to_driver_status(CUresult result) noexcept;

}  // namespace tidepool::detail
