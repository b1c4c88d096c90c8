// Writing RMM replay logs, plain through stdio or compressed through zlib.
#include "replay/trace_writer.hpp"

#include <zlib.h>

#include <cstdio>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::replay {

trace_writer::trace_writer(const std::filesystem::path& path)
    : path_(path), compress_(path.extension() == ".gz") {
  // Level 9: committed traces are small, and writing is not on any hot path.
  file_ = compress_ ? static_cast<void*>(gzopen(path.c_str(), "wb9"))
                    : static_cast<void*>(std::fopen(path.c_str(), "wb"));
  if (file_ == nullptr) {
    throw error(error_code::invalid_argument, fmt::format("{}: cannot create the trace", path.string()));
  }
  static constexpr char header[] = "Thread,Time,Action,Pointer,Size,Stream\n";
  try {
    put(header, sizeof(header) - 1);
  } catch (...) {
    close_quietly();  // the destructor does not run for a throwing constructor
    throw;
  }
}

trace_writer::~trace_writer() { close_quietly(); }

void trace_writer::close_quietly() noexcept {
  if (file_ == nullptr) return;
  if (compress_) {
    gzclose(static_cast<gzFile>(file_));
  } else {
    std::fclose(static_cast<std::FILE*>(file_));
  }
  file_ = nullptr;
}

void trace_writer::put(const char* data, std::size_t size) {
  if (file_ == nullptr) {
    throw error(error_code::invalid_argument, fmt::format("{}: write after close", path_.string()));
  }
  const bool ok = compress_
                      ? gzwrite(static_cast<gzFile>(file_), data, static_cast<unsigned>(size)) ==
                            static_cast<int>(size)
                      : std::fwrite(data, 1, size, static_cast<std::FILE*>(file_)) == size;
  if (!ok) throw error(error_code::invalid_argument, fmt::format("{}: write failed", path_.string()));
}

void trace_writer::write(const trace_event& e) {
  const std::int64_t seconds = e.time_us / 1'000'000;
  const std::int64_t micros = e.time_us % 1'000'000;
  const auto row = fmt::format("{},{:02}:{:02}:{:02}.{:06},{},{:#x},{},{:#x}\n", e.thread,
                               seconds / 3600, (seconds / 60) % 60, seconds % 60, micros,
                               to_string(e.action), e.pointer, e.size, e.stream);
  put(row.data(), row.size());
}

void trace_writer::close() {
  if (file_ == nullptr) return;
  const bool ok = compress_ ? gzclose(static_cast<gzFile>(file_)) == Z_OK
                            : std::fclose(static_cast<std::FILE*>(file_)) == 0;
  file_ = nullptr;
  if (!ok) throw error(error_code::invalid_argument, fmt::format("{}: cannot finish writing", path_.string()));
}

void write_trace(const trace& t, const std::filesystem::path& path) {
  trace_writer writer(path);
  for (const trace_event& e : t.events) writer.write(e);
  writer.close();
}

}  // namespace tidepool::replay
