// ledger_layout.hpp: the fixed layout of a GPU's ledger, the shared-memory file in which the
// tidepool processes of one user on one GPU publish what they hold and ask each other for memory
// (issue 14). Every field is an atomic of a fixed size at a fixed offset, so processes built from
// different compilers agree on it; a change to the layout changes `ledger_version`, and a ledger
// of another version is refused, not read.
//
// Nothing read from a ledger is trusted: any process of the user can write any bytes into it.
// ledger.cpp validates every field it reads (ledger.hpp says how).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tidepool::detail {

inline constexpr std::uint64_t ledger_magic = 0x31524547444c5054ULL;  // "TPLDGER1", little endian
inline constexpr std::uint32_t ledger_version = 1;
inline constexpr std::uint32_t ledger_slot_count = 64;

/// Written once by the process that creates the ledger; `magic` last, so a reader that sees it
/// sees the rest.
struct ledger_header {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint32_t> version;
  std::atomic<std::uint32_t> header_bytes;
  std::atomic<std::uint32_t> slot_bytes;
  std::atomic<std::uint32_t> slot_count;
  std::atomic<std::uint64_t> uuid_low;   ///< the GPU's UUID, bytes 0-7
  std::atomic<std::uint64_t> uuid_high;  ///< bytes 8-15
  std::atomic<std::uint64_t> reserved[3];
};

/// `flags` bits.
inline constexpr std::uint64_t ledger_flag_gives = 1;  ///< hands cached memory to processes that ask

/// One process's entry.
struct ledger_slot {
  /// 0: free. Else (pid << 32) | (low 32 bits of the process's start time, /proc/PID/stat field
  /// 22): claimed and cleaned by compare-and-swap on this one word, so a pid that the kernel
  /// reuses is not taken for the process that had it.
  std::atomic<std::uint64_t> owner;
  std::atomic<std::uint64_t> start_time;    ///< field 22 in full (clock ticks after boot)
  std::atomic<std::uint64_t> held_bytes;    ///< physical memory its pool holds
  std::atomic<std::uint64_t> in_use_bytes;  ///< in live allocations
  std::atomic<std::uint64_t> cached_bytes;  ///< held, not in use
  std::atomic<std::uint64_t> flags;
  std::atomic<std::uint64_t> updated_ns;    ///< CLOCK_MONOTONIC of the last publication
  std::atomic<std::uint64_t> served_requests;
  std::atomic<std::uint64_t> served_bytes;
  // The request slot: one request at a time. An asker takes `request_lock` (0 -> its pid), sets
  // the deadline after which the lock counts as abandoned, the bytes and its pid, then increments
  // `request_seq` and wakes the owner; the owner hands back what it can, writes `answer_bytes`,
  // sets `answer_seq` to the request's number and wakes the asker.
  std::atomic<std::uint64_t> request_lock;
  std::atomic<std::uint64_t> request_deadline_ns;  ///< CLOCK_MONOTONIC (one clock machine-wide)
  std::atomic<std::uint64_t> request_bytes;
  std::atomic<std::uint64_t> request_from;
  std::atomic<std::uint64_t> answer_bytes;
  std::atomic<std::uint32_t> request_seq;  ///< futex word the owner waits on
  std::atomic<std::uint32_t> answer_seq;   ///< futex word the asker waits on
  std::atomic<std::uint64_t> reserved[1];
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "the ledger's atomics must be lock-free to work across processes");
static_assert(sizeof(ledger_header) == 64);
static_assert(sizeof(ledger_slot) == 128);

inline constexpr std::size_t ledger_file_bytes = sizeof(ledger_header) + ledger_slot_count * sizeof(ledger_slot);

}  // namespace tidepool::detail
