// Decoding xz files for trace_reader through liblzma (where the build found it:
// TIDEPOOL_HAVE_LZMA), a buffer of decoded bytes at a time, handed out line by line.
#include "replay/xz_input.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

#if TIDEPOOL_HAVE_LZMA
#include <lzma.h>
#endif

namespace tidepool::replay::detail {

namespace {

// The xz format's stream header magic.
constexpr std::string_view xz_magic("\xFD" "7zXZ\0", 6);
constexpr std::size_t chunk_bytes = std::size_t{1} << 16;
constexpr std::uint64_t memory_limit_bytes = std::uint64_t{256} << 20;

}  // namespace

bool xz_input::starts_xz(std::string_view first_bytes) noexcept { return first_bytes.starts_with(xz_magic); }

#if TIDEPOOL_HAVE_LZMA

struct xz_input::decoder {
  lzma_stream stream = LZMA_STREAM_INIT;
  std::array<std::uint8_t, chunk_bytes> in{};
  bool input_done = false;  // the file has no more bytes
  ~decoder() { lzma_end(&stream); }
};

bool xz_input::available() noexcept { return true; }

namespace {

std::string lzma_failure(lzma_ret code) {
  switch (code) {
    case LZMA_FORMAT_ERROR: return "not xz data";
    case LZMA_DATA_ERROR: return "corrupt xz data";
    case LZMA_OPTIONS_ERROR: return "xz options this liblzma does not support";
    case LZMA_MEM_ERROR: return "out of memory";
    case LZMA_MEMLIMIT_ERROR: return "the xz data needs more memory than allowed";
    case LZMA_UNSUPPORTED_CHECK: return "an xz integrity check this liblzma does not support";
    default: return fmt::format("liblzma error {}", static_cast<int>(code));
  }
}

}  // namespace

xz_input::xz_input(std::FILE* file) : file_(file) {
  // Every stream of a concatenated file. The memory limit is four times what xz -9's 64 MiB
  // dictionary needs: a damaged or hostile header cannot make the decoder take gigabytes.
  lzma_ret started = LZMA_MEM_ERROR;
  try {
    decoder_ = std::make_unique<decoder>();
    started = lzma_stream_decoder(&decoder_->stream, memory_limit_bytes, LZMA_CONCATENATED);
  } catch (const std::bad_alloc&) {
    // started stays LZMA_MEM_ERROR: refused below like any decoder that cannot start.
  }
  if (started != LZMA_OK) {
    std::fclose(file_);
    file_ = nullptr;
    throw error(error_code::unavailable, fmt::format("liblzma cannot start a decoder: {}", lzma_failure(started)));
  }
}

void xz_input::decode_more() {
  decoded_.erase(0, decoded_used_);
  decoded_used_ = 0;
  // Decoded straight onto the end of decoded_, then cut back to what was decoded.
  const std::size_t kept = decoded_.size();
  decoded_.resize(kept + chunk_bytes);
  lzma_stream& stream = decoder_->stream;
  stream.next_out = reinterpret_cast<std::uint8_t*>(decoded_.data() + kept);
  stream.avail_out = chunk_bytes;
  while (stream.avail_out == chunk_bytes) {  // until something is decoded, or the data ends
    if (stream.avail_in == 0 && !decoder_->input_done) {
      stream.next_in = decoder_->in.data();
      stream.avail_in = std::fread(decoder_->in.data(), 1, decoder_->in.size(), file_);
      if (std::ferror(file_) != 0) {
        status_ = result::error;
        error_ = fmt::format("cannot read the trace: {}", std::strerror(errno));
        break;
      }
      decoder_->input_done = stream.avail_in == 0 || std::feof(file_) != 0;
    }
    const lzma_ret code = lzma_code(&stream, decoder_->input_done ? LZMA_FINISH : LZMA_RUN);
    if (code == LZMA_STREAM_END) {
      status_ = result::end;
      break;
    }
    if (code == LZMA_BUF_ERROR && decoder_->input_done) {
      // No progress with all the input given: the file ends inside a stream.
      status_ = result::truncated;
      break;
    }
    if (code != LZMA_OK) {
      status_ = result::error;
      error_ = fmt::format("cannot decompress ({})", lzma_failure(code));
      break;
    }
  }
  decoded_.resize(kept + chunk_bytes - stream.avail_out);
}

#else  // no liblzma in this build

struct xz_input::decoder {};

bool xz_input::available() noexcept { return false; }

xz_input::xz_input(std::FILE* file) : file_(nullptr) {
  std::fclose(file);
  throw error(error_code::unavailable,
              "an xz-compressed trace, and this build of tidepool reads none: it was configured "
              "without liblzma (install liblzma-dev, e.g. `./scripts/deps.sh`, and configure again)");
}

void xz_input::decode_more() { status_ = result::error; }

#endif

xz_input::~xz_input() {
  if (file_ != nullptr) std::fclose(file_);
}

xz_input::result xz_input::read_line(std::string& out) {
  while (true) {
    const std::size_t newline = decoded_.find('\n', decoded_used_);
    if (newline != std::string::npos) {
      out.append(decoded_, decoded_used_, newline + 1 - decoded_used_);
      decoded_used_ = newline + 1;
      return result::line;
    }
    if (status_ != result::line) break;  // the data is done
    decode_more();
  }
  // What is left is the file's last line, with no newline: given where the data ended where a
  // stream ends, dropped where it was cut (as trace_reader drops a cut gzip stream's).
  if (status_ == result::end && decoded_used_ < decoded_.size()) {
    out.append(decoded_, decoded_used_, std::string::npos);
    decoded_used_ = decoded_.size();
    return result::line;
  }
  return status_;
}

}  // namespace tidepool::replay::detail
