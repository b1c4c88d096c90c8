// gpu_test.hpp: GoogleTest glue for the GPU tests: a test skips itself where the CUDA driver or
// a device is missing, so the `gpu` label passes (as skipped) on machines without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "gpu_support.hpp"

/// Skips the current test where the CUDA driver or a device is missing.
#define TIDEPOOL_REQUIRE_GPU()                                                            \
  do {                                                                                    \
    const std::string tidepool_gpu_reason = tidepool::cuda_driver_unavailable_reason(); \
    if (!tidepool_gpu_reason.empty()) GTEST_SKIP() << tidepool_gpu_reason;                \
  } while (0)

namespace tidepool::gpu_test {
/// stdout unbuffered: a test that crashes the process (a fault on the GPU) still shows the
/// figures it printed before.
inline const bool stdout_unbuffered = (std::setvbuf(stdout, nullptr, _IONBF, 0), true);
}  // namespace tidepool::gpu_test
