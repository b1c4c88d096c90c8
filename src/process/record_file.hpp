// record_file: the file a recording streams to, plain CSV or gzip, written with write(2) so that
// what was flushed survives the process being killed.
//
// libtidepool.so links no zlib (docs/DESIGN.md, "What the library shows a process"), so a path
// ending in ".gz" is written as gzip with "stored" (uncompressed) deflate blocks: valid gzip that
// zlib, gzip and Python read, at the size of the plain text. Each flush is one complete gzip
// member (gzip readers read concatenated members as one stream), so a file cut short by a kill
// holds every earlier flush whole, and only the member being written can be incomplete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tidepool::detail {

class record_file {
 public:
  /// Creates (or truncates) `path`; throws tidepool::error naming it and why if it cannot.
  explicit record_file(const std::string& path);
  ~record_file();
  record_file(const record_file&) = delete;
  record_file& operator=(const record_file&) = delete;

  /// Writes `text` (whole lines) to the file at once; throws tidepool::error if it cannot.
  void write(std::string_view text);
  [[nodiscard]] bool compressed() const noexcept { return gzip_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  void write_all(const std::string& bytes);

  std::string path_;
  int fd_ = -1;
  bool gzip_ = false;
  std::string member_;  // reused between flushes
};

/// CRC-32 (IEEE 802.3, as gzip's trailer) of `data`, continuing from `crc`.
[[nodiscard]] std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size) noexcept;

}  // namespace tidepool::detail
