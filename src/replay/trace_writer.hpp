// replay/trace_writer.hpp: writes RMM replay logs, the format trace_reader reads.
//
// A path ending in ".gz" is written gzip-compressed, anything else as plain CSV. The pool can use
// this to record what a program asked of it, and `tidepool generate-loader` writes its workload.
#pragma once

#include <filesystem>

#include "replay/trace.hpp"

namespace tidepool::replay {

/// Writes rows of one log file, header first.
class trace_writer {
 public:
  /// Creates (or truncates) `path` and writes the header. Throws tidepool::error if it cannot.
  explicit trace_writer(const std::filesystem::path& path);
  ~trace_writer();
  trace_writer(const trace_writer&) = delete;
  trace_writer& operator=(const trace_writer&) = delete;

  /// Appends one row.
  void write(const trace_event& event);
  /// Flushes and closes the file; throws tidepool::error if the data could not be written.
  void close();

 private:
  void put(const char* data, std::size_t size);
  void close_quietly() noexcept;

  std::filesystem::path path_;
  void* file_ = nullptr;  // gzFile when compressing, FILE* otherwise
  bool compress_ = false;
};

/// Writes a whole trace to `path`.
void write_trace(const trace& t, const std::filesystem::path& path);

}  // namespace tidepool::replay
