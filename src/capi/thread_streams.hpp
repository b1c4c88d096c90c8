// thread_streams.hpp: each thread's current stream per device, for callers that pass no stream
// (CuPy's CFunctionAllocator). A thread starts with the legacy default stream (nullptr) everywhere.
#pragma once

#include "tidepool/driver.hpp"

namespace tidepool::detail {

/// The calling thread's current stream on `device` (nullptr unless set). Never throws.
stream_t current_stream(int device) noexcept;
/// Sets it; `device` must be a valid ordinal (checked by the caller).
void set_current_stream(int device, stream_t stream);

}  // namespace tidepool::detail
