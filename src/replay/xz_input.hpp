// replay/xz_input.hpp: the lines of an xz-compressed file, decoded through liblzma, for
// trace_reader.
//
// Bundled traces that gzip leaves large are kept as .csv.xz: xz stores a recorded loop in far
// fewer bytes than gzip (docs/RESULTS.md, section 0), and the repository must stay small enough
// to travel to a GPU machine whole.
// liblzma is optional at build time (CMake's FindLibLZMA): a build without it says so when it
// meets an xz file, and reads plain and gzip files as before.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace tidepool::replay::detail {

/// Reads one xz file (any number of concatenated streams, as `xz` and `xz -T` write them) line by
/// line.
class xz_input {
 public:
  /// What read_line found.
  enum class result {
    line,       ///< a line was appended (with its '\n', unless it is the file's last)
    end,        ///< the data ended where a stream ends: nothing more
    truncated,  ///< the data ended inside a stream (a cut file); what came before was given
    error,      ///< the data is not valid xz, or reading failed: error_message() says why
  };

  /// Whether this build decodes xz at all (liblzma was found when it was configured).
  [[nodiscard]] static bool available() noexcept;
  /// Whether `first_bytes` (a file's first bytes) begin an xz stream.
  [[nodiscard]] static bool starts_xz(std::string_view first_bytes) noexcept;

  /// Takes `file`, open for reading at its start, and closes it when destroyed (also when this
  /// throws). Throws tidepool::error (code unavailable) where available() is false or liblzma
  /// cannot start a decoder.
  explicit xz_input(std::FILE* file);
  ~xz_input();
  xz_input(const xz_input&) = delete;
  xz_input& operator=(const xz_input&) = delete;

  /// Appends the next line to `out` (which the caller clears).
  result read_line(std::string& out);
  /// Why the last read_line returned result::error.
  [[nodiscard]] const std::string& error_message() const noexcept { return error_; }

 private:
  // Decodes more of the file into decoded_ (at least one byte unless the data ends, which sets
  // status_ to end, truncated or error).
  void decode_more();

  struct decoder;  // liblzma's state, kept out of this header
  std::FILE* file_;
  std::unique_ptr<decoder> decoder_;
  std::string decoded_;             // decoded bytes not yet handed out
  std::size_t decoded_used_ = 0;    // how many of decoded_'s bytes were handed out
  result status_ = result::line;    // line while more data may come; end, truncated or error after
  std::string error_;
};

}  // namespace tidepool::replay::detail
