// What each recorded event carries besides its own fields: the time (steady clock, nanoseconds)
// and the calling thread's id, read once per thread (gettid is a system call).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>

#include "tidepool/pool.hpp"

namespace tidepool::detail {

[[nodiscard]] inline std::uint32_t recording_thread_id() noexcept {
  static thread_local const auto id = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return id;
}

[[nodiscard]] inline recorded_event make_recorded_event(recorded_event::kind what, std::uintptr_t address,
                                                        std::size_t size, std::uintptr_t stream) noexcept {
  recorded_event e;
  e.what = what;
  e.thread = recording_thread_id();
  e.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now().time_since_epoch())
                  .count();
  e.address = address;
  e.size = size;
  e.stream = stream;
  return e;
}

}  // namespace tidepool::detail
