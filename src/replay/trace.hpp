// replay/trace.hpp: one allocation trace in memory, as an RMM replay log describes it.
//
// An RMM replay log is a CSV file with the header `Thread,Time,Action,Pointer,Size,Stream`; each
// row is one `allocate`, `free` or `allocate failure`, with the pointer and stream in hex. The
// replay tool reads such logs (trace_reader.hpp), writes them (trace_writer.hpp) and replays them
// against an allocator (replay_engine.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tidepool::replay {

/// What one row of a trace does.
enum class trace_action : std::uint8_t {
  allocate,          ///< `allocate`: Pointer is the new allocation of Size bytes
  free,              ///< `free`: Pointer, allocated earlier, goes back
  allocate_failure,  ///< `allocate failure`: the recorded allocator could not give Size bytes
};

/// The text of an action as it appears in a log, e.g. "allocate failure".
[[nodiscard]] std::string_view to_string(trace_action action) noexcept;

/// One row of a trace.
struct trace_event {
  trace_action action = trace_action::allocate;
  std::uint32_t thread = 0;
  /// Time of day in microseconds (the log's HH:MM:SS.ffffff), kept so a trace can be written back.
  std::int64_t time_us = 0;
  std::uintptr_t pointer = 0;
  std::size_t size = 0;
  /// The recorded stream (0 is the legacy default stream).
  std::uintptr_t stream = 0;

  friend bool operator==(const trace_event&, const trace_event&) = default;
};

/// A whole trace: its name (the file it came from) and its rows in order.
struct trace {
  std::string name;
  std::vector<trace_event> events;
  /// The file ended early (a recording cut short) and was read up to its last whole row.
  bool truncated = false;
};

/// The allocations of a trace whose sizes fall in (previous class's upper_bytes, upper_bytes].
struct size_class {
  std::size_t upper_bytes = 0;  ///< SIZE_MAX for the last class
  std::size_t allocations = 0;
  std::size_t bytes = 0;
};

/// Figures of a trace that need no allocator: what the program itself had live.
struct trace_summary {
  std::size_t rows = 0;
  std::size_t allocations = 0;
  std::size_t frees = 0;
  std::size_t failures = 0;
  std::size_t peak_live_bytes = 0;
  std::size_t peak_live_allocations = 0;  ///< allocations live at the moment of peak_live_bytes
  std::size_t live_bytes_at_end = 0;      ///< bytes never freed by the end of the trace
  std::size_t live_allocations_at_end = 0;
  std::size_t streams = 0;                ///< distinct streams seen
  std::size_t threads = 0;                ///< distinct threads seen
  std::size_t allocated_bytes = 0;        ///< all allocations together
  std::size_t smallest_allocation = 0;    ///< 0 when there is none
  std::size_t largest_allocation = 0;
  /// Allocations by size: up to 4 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB, 4 GiB, and larger.
  std::array<size_class, 7> sizes{};
};

/// Computes the summary of a trace (which the reader has already checked for consistency).
[[nodiscard]] trace_summary summarize(const trace& t);

}  // namespace tidepool::replay
