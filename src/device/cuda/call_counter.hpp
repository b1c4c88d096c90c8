// call_counter.hpp: counts every driver call the cuda driver makes and the wall time it took.
// Atomics, not a lock: pools of several devices call one driver from several threads at once.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "tidepool/driver.hpp"

namespace tidepool::detail {

class call_counter {
 public:
  /// Runs `call` (returning a CUresult or anything else), counting it as one `kind`; the time it
  /// took goes to `*elapsed_us` too when given.
  template <class Call>
  auto timed(driver_call kind, Call&& call, double* elapsed_us = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    auto result = call();
    const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    const auto k = static_cast<std::size_t>(kind);
    calls_[k].fetch_add(1, std::memory_order_relaxed);
    nanoseconds_[k].fetch_add(static_cast<std::uint64_t>(elapsed.count()), std::memory_order_relaxed);
    if (elapsed_us != nullptr) *elapsed_us = static_cast<double>(elapsed.count()) / 1000.0;
    return result;
  }

  /// The counts so far.
  [[nodiscard]] driver_call_counts snapshot() const noexcept {
    driver_call_counts out;
    for (std::size_t k = 0; k < driver_call_kinds; ++k) {
      out.calls[k] = calls_[k].load(std::memory_order_relaxed);
      out.microseconds[k] = static_cast<double>(nanoseconds_[k].load(std::memory_order_relaxed)) / 1000.0;
    }
    return out;
  }

 private:
  std::array<std::atomic<std::uint64_t>, driver_call_kinds> calls_{};
  std::array<std::atomic<std::uint64_t>, driver_call_kinds> nanoseconds_{};
};

}  // namespace tidepool::detail
