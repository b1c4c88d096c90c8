// libFuzzer target: the trace reader (src/replay/trace_reader) on any bytes, plain, gzip or xz
// (the reader recognises gzip and xz by content). It must read rows or stop with a tidepool::error
// naming the file and line; anything else (another exception, a crash, a sanitizer report) is a
// bug. A trace that reads whole is written back and must read back identically (the writer's
// promise).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "replay/trace_reader.hpp"
#include "replay/trace_writer.hpp"
#include "tidepool/errors.hpp"

namespace {

// The input as a file the reader can open by name: a memfd, read through /proc/self/fd.
class memory_file {
 public:
  memory_file(const std::uint8_t* data, std::size_t size) : fd_(memfd_create("fuzz-trace", 0)) {
    if (fd_ < 0) std::abort();
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~memory_file() { ::close(fd_); }
  memory_file(const memory_file&) = delete;
  memory_file& operator=(const memory_file&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const memory_file file(data, size);
  tidepool::replay::trace trace;
  try {
    // A device of 1 TiB: the reader's own size check runs too.
    trace = tidepool::replay::read_trace(file.path(), std::size_t{1} << 40);
  } catch (const tidepool::error& e) {
    const std::string what = e.what();
    // Every refusal names the file (and, past the header, the line).
    if (what.find(file.path()) == std::string::npos) {
      std::fprintf(stderr, "error without the file's name: %s\n", what.c_str());
      std::abort();
    }
    return 0;
  }
  // Written back and read again, a trace is the same rows.
  char out_path[] = "/tmp/tidepool-fuzz-XXXXXX";
  const int fd = mkstemp(out_path);
  if (fd < 0) std::abort();
  ::close(fd);
  {
    tidepool::replay::trace_writer writer(out_path);
    for (const tidepool::replay::trace_event& e : trace.events) writer.write(e);
    writer.close();
  }
  const tidepool::replay::trace again = tidepool::replay::read_trace(out_path, std::size_t{1} << 40);
  ::unlink(out_path);
  if (again.events != trace.events) {
    std::fprintf(stderr, "a trace read back differently after writing\n");
    std::abort();
  }
  return 0;
}
