// thread_lifetime.hpp: each thread's lifetime hint for callers that pass none (PyTorch's and
// CuPy's allocator entry points). A thread starts with lifetime::scratch.
#pragma once

#include "tidepool/pool.hpp"

namespace tidepool::detail {

/// The calling thread's hint for allocations made without one. Never throws.
lifetime thread_lifetime() noexcept;
/// Sets it for the calling thread.
void set_thread_lifetime(lifetime hint) noexcept;

}  // namespace tidepool::detail
