// record_file: plain or gzip ("stored" deflate blocks, one member per flush) through write(2).
#include "process/record_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::detail {

namespace {

// CRC-32 by slicing eight bytes at a time (tables[k][b]: the CRC of byte b followed by k zero
// bytes): about a quarter of the byte-at-a-time loop's time, which was a third of the writer's.
using crc_tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr crc_tables make_crc_tables() {
  crc_tables t{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][n] = c;
  }
  for (std::uint32_t n = 0; n < 256; ++n) {
    for (std::size_t k = 1; k < 8; ++k) t[k][n] = (t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xFFu];
  }
  return t;
}
constexpr crc_tables crc_table = make_crc_tables();

void put32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    const std::uint32_t lo = crc ^ (static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                                    static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24);
    crc = crc_table[7][lo & 0xFFu] ^ crc_table[6][(lo >> 8) & 0xFFu] ^ crc_table[5][(lo >> 16) & 0xFFu] ^
          crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
  }
  for (; size > 0; --size, ++p) crc = crc_table[0][(crc ^ *p) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

record_file::record_file(const std::string& path) : path_(path), gzip_(ends_with(path, ".gz")) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw error(error_code::invalid_argument,
                fmt::format("tidepool: cannot create the recording {}: {}", path, std::strerror(errno)));
  }
}

record_file::~record_file() {
  if (fd_ >= 0) ::close(fd_);
}

void record_file::write(std::string_view text) {
  if (text.empty()) return;
  if (!gzip_) {
    member_.assign(text);
    write_all(member_);
    return;
  }
  // One gzip member: header (no name, no time, OS unknown), stored blocks of at most 65,535
  // bytes, the last one marked final, then CRC-32 and size.
  member_.clear();
  member_.append("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = std::min<std::size_t>(text.size() - at, 65535);
    const bool final = at + n == text.size();
    member_.push_back(final ? '\x01' : '\x00');
    member_.push_back(static_cast<char>(n & 0xFF));
    member_.push_back(static_cast<char>(n >> 8));
    member_.push_back(static_cast<char>(~n & 0xFF));
    member_.push_back(static_cast<char>((~n >> 8) & 0xFF));
    member_.append(text.substr(at, n));
    at += n;
  }
  put32(member_, crc32_update(0, text.data(), text.size()));
  put32(member_, static_cast<std::uint32_t>(text.size()));  // ISIZE is the size modulo 2^32
  write_all(member_);
}

void record_file::write_all(const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw error(error_code::invalid_argument,
                  fmt::format("tidepool: cannot write the recording {}: {}", path_,
                              n < 0 ? std::strerror(errno) : "nothing written"));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace tidepool::detail
