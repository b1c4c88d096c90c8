// replay/trace_reader.hpp: reads RMM replay logs, plain or gzip-compressed, row by row.
//
// The reader checks every row as it goes and stops at the first bad one with a tidepool::error
// (code invalid_argument) whose message names the file and line: a wrong header, a wrong number
// of fields, a number that does not parse, an unknown action, a free of a pointer that is not
// live, or an allocation of a pointer that is already live. A trace that reads without error is
// therefore consistent, and the replay engine can trust it.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>

#include "replay/trace.hpp"

namespace tidepool::replay {

/// Streams the rows of one log file. Gzip input is recognised by its content, not its name.
class trace_reader {
 public:
  /// Opens `path`, reads and checks the header. Throws tidepool::error if it cannot.
  explicit trace_reader(const std::filesystem::path& path);
  ~trace_reader();
  trace_reader(const trace_reader&) = delete;
  trace_reader& operator=(const trace_reader&) = delete;

  /// Reads the next row into `event`; false at the end of the file. Throws on a bad row.
  bool next(trace_event& event);
  /// Line number of the row read last (the header is line 1).
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  bool read_line(std::string& out);
  void check_header();

  std::filesystem::path path_;
  void* file_ = nullptr;  // gzFile, kept opaque so zlib.h stays out of this header
  std::size_t line_ = 0;
  std::unordered_map<std::uintptr_t, std::size_t> live_;  // pointer -> size, to check frees
};

/// Reads a whole log into memory (name = the file name).
[[nodiscard]] trace read_trace(const std::filesystem::path& path);

}  // namespace tidepool::replay
