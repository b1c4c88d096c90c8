// replay/trace_reader.hpp: reads RMM replay logs, plain, gzip- or xz-compressed, row by row.
//
// The reader checks every row as it goes and stops at the first bad one with a tidepool::error
// (code invalid_argument) whose message names the file and line: a wrong header, a wrong number
// of fields, a number that does not parse, an unknown action, a free of a pointer that is not
// live, an allocation of a pointer that is already live, or one larger than the caller's device.
// A trace that reads without error is therefore consistent, and the replay engine can trust it.
// A file that cannot be opened or read is an error that says why (the system's reason).
//
// A recording cut short (a killed process: tidepool's recorder streams its file) is read up to
// its last whole row: a gzip or xz stream that ends early is the end of the input, and an
// unterminated last line that does not parse (or a last line of a cut stream) is dropped;
// truncated() says so. xz needs a build with liblzma (replay/xz_input.hpp); one without says so.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>

#include "replay/trace.hpp"
#include "replay/xz_input.hpp"

namespace tidepool::replay {

/// Streams the rows of one log file. Gzip and xz input are recognised by their content, not their
/// names.
class trace_reader {
 public:
  /// Opens `path`, reads and checks the header. Throws tidepool::error if it cannot. An
  /// allocation row of more than `largest_allocation` bytes (the capacity of the device it will be
  /// replayed on) is a bad row.
  explicit trace_reader(const std::filesystem::path& path,
                        std::size_t largest_allocation = static_cast<std::size_t>(-1));
  ~trace_reader();
  trace_reader(const trace_reader&) = delete;
  trace_reader& operator=(const trace_reader&) = delete;

  /// Reads the next row into `event`; false at the end of the file. Throws on a bad row.
  bool next(trace_event& event);
  /// Line number of the row read last (the header is line 1).
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Whether the file ended early (a cut gzip or xz stream, or a cut last line that was dropped).
  [[nodiscard]] bool truncated() const noexcept { return truncated_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  // Opens path_ as xz into xz_ where its first bytes say it is xz; errno is set where it cannot
  // be opened at all.
  void open_xz_if_xz();
  bool read_line(std::string& out);
  bool read_xz_line(std::string& out);
  void check_header();
  void parse_row(const std::string& row, trace_event& event);

  std::filesystem::path path_;
  void* file_ = nullptr;                  // gzFile (plain and gzip input), opaque: no zlib.h here
  std::unique_ptr<detail::xz_input> xz_;  // xz input instead
  std::size_t line_ = 0;
  std::size_t largest_allocation_;
  bool unterminated_ = false;  // the line read last had no newline: the file's last
  bool truncated_ = false;
  std::unordered_map<std::uintptr_t, std::size_t> live_;  // pointer -> size, to check frees
};

/// Reads a whole log into memory (name = the file name); `largest_allocation` as above.
[[nodiscard]] trace read_trace(const std::filesystem::path& path,
                               std::size_t largest_allocation = static_cast<std::size_t>(-1));

}  // namespace tidepool::replay
