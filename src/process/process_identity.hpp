// process_identity.hpp: who a process is, beyond its pid: the kernel reuses pids, so an entry in a
// ledger names its process by pid and start time (/proc/PID/stat field 22), and a process whose
// pid no longer has that start time is gone.
#pragma once

#include <cstdint>
#include <optional>

namespace tidepool::detail {

/// Largest pid Linux hands out (PID_MAX_LIMIT, 2^22).
inline constexpr std::uint64_t largest_pid = std::uint64_t{1} << 22;

/// Field 22 of /proc/PID/stat (clock ticks after boot), or nullopt when there is no such process,
/// it has exited (a zombie, not yet reaped), or the file cannot be read or parsed.
[[nodiscard]] std::optional<std::uint64_t> process_start_time(std::uint64_t pid) noexcept;

/// This process's start time (read once per pid: a forked child reads its own).
[[nodiscard]] std::uint64_t own_start_time() noexcept;

/// The ledger's owner word of (pid, start time): pid in the high 32 bits, the start time's low 32.
[[nodiscard]] constexpr std::uint64_t owner_word(std::uint64_t pid, std::uint64_t start_time) noexcept {
  return (pid << 32) | (start_time & 0xffffffffULL);
}

/// Whether `owner` names a process that is running now: a pid in range whose start time matches.
[[nodiscard]] bool owner_alive(std::uint64_t owner) noexcept;

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the machine.
[[nodiscard]] std::uint64_t monotonic_ns() noexcept;

}  // namespace tidepool::detail
