// Reading RMM replay logs through zlib, which reads plain and gzip files alike, or through
// xz_input for xz files, with a check of every field and of the allocation state (no free of a
// dead pointer, no double allocation).
#include "replay/trace_reader.hpp"

#include <zlib.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::replay {

namespace {

constexpr std::string_view expected_header = "Thread,Time,Action,Pointer,Size,Stream";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

// Splits on commas; returns the number of fields found (at most fields.size(), plus one more if
// there are extra fields, so the caller can report "too many").
std::size_t split_fields(std::string_view row, std::array<std::string_view, 7>& fields) {
  std::size_t n = 0;
  while (n < fields.size()) {
    const auto comma = row.find(',');
    fields[n++] = trim(row.substr(0, comma));
    if (comma == std::string_view::npos) return n;
    row.remove_prefix(comma + 1);
  }
  return n;
}

template <typename T>
bool parse_unsigned(std::string_view text, int base, T& out) {
  // from_chars takes a minus sign for a signed T: a time of "-10:51:50" was read as negative, and
  // written back in a form the reader refuses.
  if (text.empty() || text.front() == '-') return false;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out, base);
  return ec == std::errc{} && ptr == end;
}

bool parse_hex(std::string_view text, std::uintptr_t& out) {
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
  return parse_unsigned(text, 16, out);
}

// "HH:MM:SS.ffffff" (any number of fraction digits, truncated to microseconds), or a plain
// decimal number of seconds.
// The largest number of whole seconds whose time in microseconds (with up to 999,999 more) fits
// an int64: about 292,000 years.
constexpr std::int64_t max_whole_seconds = (std::numeric_limits<std::int64_t>::max() - 999'999) / 1'000'000;

bool parse_time(std::string_view text, std::int64_t& out_us) {
  std::int64_t whole_seconds = 0;
  std::string_view fraction;
  const auto dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  if (dot != std::string_view::npos) fraction = text.substr(dot + 1);
  if (whole.find(':') != std::string_view::npos) {
    std::array<std::int64_t, 3> hms{};
    for (std::size_t i = 0; i < 3; ++i) {
      const auto colon = whole.find(':');
      if ((i < 2) != (colon != std::string_view::npos)) return false;
      if (!parse_unsigned(whole.substr(0, colon), 10, hms[i])) return false;
      whole = colon == std::string_view::npos ? std::string_view{} : whole.substr(colon + 1);
    }
    if (hms[1] >= 60 || hms[2] >= 60 || hms[0] > max_whole_seconds / 3600) return false;
    whole_seconds = hms[0] * 3600 + hms[1] * 60 + hms[2];
  } else if (!parse_unsigned(whole, 10, whole_seconds)) {
    return false;
  }
  // The time in microseconds must fit an int64 (a time the fuzzer wrote overflowed it).
  if (whole_seconds > max_whole_seconds) return false;
  std::int64_t micros = 0;
  for (std::size_t i = 0; i < fraction.size(); ++i) {
    const char c = fraction[i];
    if (c < '0' || c > '9') return false;
    if (i < 6) micros = micros * 10 + (c - '0');
  }
  for (std::size_t i = fraction.size(); i < 6; ++i) micros *= 10;
  if (dot != std::string_view::npos && fraction.empty()) return false;
  out_us = whole_seconds * 1'000'000 + micros;
  return true;
}

}  // namespace

trace_reader::trace_reader(const std::filesystem::path& path, std::size_t largest_allocation)
    : path_(path), largest_allocation_(largest_allocation) {
  errno = 0;
  // open(2) takes a directory, and reading it fails later: say so here, as for any other file
  // that cannot be opened.
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) errno = EISDIR;
  if (errno == 0) open_xz_if_xz();
  if (xz_ != nullptr) {
    check_header();
    return;
  }
  file_ = errno == 0 ? gzopen(path.c_str(), "rb") : nullptr;
  if (file_ == nullptr) {
    // gzopen fails on open(2) (errno says why) or when zlib has no memory (errno 0).
    throw error(error_code::invalid_argument,
                fmt::format("{}: cannot open the trace: {}", path.string(),
                            errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  gzbuffer(static_cast<gzFile>(file_), 1u << 16);
  try {
    check_header();
  } catch (...) {
    gzclose(static_cast<gzFile>(file_));  // the destructor does not run for a throwing constructor
    file_ = nullptr;
    throw;
  }
}

void trace_reader::open_xz_if_xz() {
  std::FILE* file = std::fopen(path_.c_str(), "rb");
  if (file == nullptr) return;  // errno says why; gzopen is not tried
  std::array<char, 6> magic{};
  const std::size_t got = std::fread(magic.data(), 1, magic.size(), file);
  if (!detail::xz_input::starts_xz(std::string_view(magic.data(), got))) {
    std::fclose(file);
    errno = 0;
    return;
  }
  std::rewind(file);
  try {
    xz_ = std::make_unique<detail::xz_input>(file);  // owns the file, and closes it if it throws
  } catch (const error& e) {
    throw error(e.code(), fmt::format("{}: {}", path_.string(), e.what()));
  }
}

trace_reader::~trace_reader() {
  if (file_ != nullptr) gzclose(static_cast<gzFile>(file_));
}

void trace_reader::fail(const std::string& what) const {
  throw error(error_code::invalid_argument, fmt::format("{}:{}: {}", path_.string(), line_, what));
}

bool trace_reader::read_line(std::string& out) {
  out.clear();
  if (xz_ != nullptr) return read_xz_line(out);
  std::array<char, 512> buffer{};
  auto* f = static_cast<gzFile>(file_);
  while (gzgets(f, buffer.data(), static_cast<int>(buffer.size())) != nullptr) {
    out.append(buffer.data());
    if (!out.empty() && out.back() == '\n') break;
  }
  int zerr = Z_OK;
  const char* message = gzerror(f, &zerr);
  if (zerr == Z_BUF_ERROR) {
    // The gzip stream ends early ("unexpected end of file"): a recording whose process was
    // killed. What came before is read; a cut last line is dropped.
    truncated_ = true;
    if (!out.empty() && out.back() != '\n') out.clear();
  } else if (zerr != Z_OK && zerr != Z_STREAM_END) {
    ++line_;
    // Z_ERRNO: reading failed (an I/O error), and errno says why.
    fail(zerr == Z_ERRNO ? fmt::format("cannot read the trace: {}", std::strerror(errno))
                         : fmt::format("cannot decompress ({})", message));
  }
  if (out.empty()) return false;
  unterminated_ = out.back() != '\n';
  ++line_;
  return true;
}

bool trace_reader::read_xz_line(std::string& out) {
  switch (xz_->read_line(out)) {
    case detail::xz_input::result::line: break;
    case detail::xz_input::result::end: return false;
    case detail::xz_input::result::truncated: truncated_ = true; return false;
    case detail::xz_input::result::error: ++line_; fail(xz_->error_message());
  }
  unterminated_ = out.back() != '\n';
  ++line_;
  return true;
}

void trace_reader::check_header() {
  std::string header;
  if (!read_line(header)) {
    line_ = 1;
    fail(fmt::format("empty file; expected the header \"{}\"", expected_header));
  }
  std::string_view text = trim(header);
  if (text.size() >= 3 && static_cast<unsigned char>(text[0]) == 0xEF) text.remove_prefix(3);  // BOM
  if (text != expected_header) {
    fail(fmt::format("bad header \"{}\"; expected \"{}\"", text, expected_header));
  }
}

bool trace_reader::next(trace_event& event) {
  std::string row;
  do {
    if (!read_line(row)) return false;
  } while (trim(row).empty());
  if (!unterminated_) {
    parse_row(row, event);
    return true;
  }
  // The file's last line, with no newline: a whole row (a hand-written file), or one cut short.
  try {
    parse_row(row, event);
  } catch (const error&) {
    truncated_ = true;
    return false;
  }
  return true;
}

void trace_reader::parse_row(const std::string& row, trace_event& event) {
  std::array<std::string_view, 7> fields{};
  const std::size_t n = split_fields(trim(row), fields);
  if (n != 6) fail(fmt::format("expected 6 fields, found {}{}", n > 6 ? "more than " : "", n > 6 ? 6 : n));

  trace_event e;
  if (!parse_unsigned(fields[0], 10, e.thread)) fail(fmt::format("bad thread \"{}\"", fields[0]));
  if (!parse_time(fields[1], e.time_us)) fail(fmt::format("bad time \"{}\"", fields[1]));
  if (fields[2] == "allocate") {
    e.action = trace_action::allocate;
  } else if (fields[2] == "free") {
    e.action = trace_action::free;
  } else if (fields[2] == "allocate failure") {
    e.action = trace_action::allocate_failure;
  } else {
    fail(fmt::format("unknown action \"{}\" (expected allocate, free or allocate failure)", fields[2]));
  }
  if (!parse_hex(fields[3], e.pointer)) fail(fmt::format("bad pointer \"{}\"", fields[3]));
  if (!parse_unsigned(fields[4], 10, e.size)) fail(fmt::format("bad size \"{}\"", fields[4]));
  if (!parse_hex(fields[5], e.stream)) fail(fmt::format("bad stream \"{}\"", fields[5]));

  switch (e.action) {
    case trace_action::allocate: {
      if (e.size == 0) fail("allocation of 0 bytes");
      if (e.size > largest_allocation_) {
        fail(fmt::format("allocation of {} bytes is larger than the device it is replayed on ({} bytes)", e.size,
                         largest_allocation_));
      }
      const auto [it, inserted] = live_.try_emplace(e.pointer, e.size);
      if (!inserted) fail(fmt::format("allocation of pointer {:#x}, which is already live", e.pointer));
      break;
    }
    case trace_action::free: {
      const auto it = live_.find(e.pointer);
      if (it == live_.end()) fail(fmt::format("free of pointer {:#x}, which is not live", e.pointer));
      live_.erase(it);
      break;
    }
    case trace_action::allocate_failure:
      break;
  }
  event = e;
}

trace read_trace(const std::filesystem::path& path, std::size_t largest_allocation) {
  trace t;
  t.name = path.filename().string();
  trace_reader reader(path, largest_allocation);
  trace_event e;
  while (reader.next(e)) t.events.push_back(e);
  t.truncated = reader.truncated();
  return t;
}

}  // namespace tidepool::replay
