// The modelled cost of each driver call on the simulated GPU, from the per-call times measured on
// an H200 (driver 580, CUDA 13; shared/DESIGN.md 2a and 1.4).
//
// The virtual memory calls cost per handle, not per byte, and were measured at five handle sizes
// (2, 20, 64, 512 MiB, 2 GiB): between them the cost is interpolated linearly in log2(size), below
// 2 MiB it is the 2 MiB figure, above 2 GiB it grows linearly in size along the last measured
// segment (never below the smallest measured figure of that call). cudaMalloc and cudaFree grow
// linearly in log2(size) from 2 MiB to 2 GiB (and on beyond). Host copies and pinned host memory
// cost their bytes at an assumed rate. Every other call costs a constant.
//
// The tables in cost_model.cpp are the one source of these figures: docs/DESIGN.md (section 1,
// "The simulated driver's costs") quotes them, and tests/device/sim_cost_model_test.cpp checks
// that the quoted table is what this model returns.
#pragma once

#include <cstddef>

#include "tidepool/driver.hpp"

namespace tidepool::detail {

/// Modelled microseconds of one `call` on `bytes` (the handle size for the virtual memory calls,
/// the allocation size for mem_alloc / mem_free; ignored by the calls of constant cost).
[[nodiscard]] double sim_call_cost_us(driver_call call, std::size_t bytes) noexcept;

}  // namespace tidepool::detail
