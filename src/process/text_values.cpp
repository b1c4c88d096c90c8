// Values read from text (text_values.hpp).
#include "process/text_values.hpp"

#include <cctype>
#include <cstdlib>
#include <limits>

namespace tidepool::detail {

std::string_view environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string_view{} : std::string_view{value};
}

namespace {
constexpr auto max_u64 = std::numeric_limits<std::uint64_t>::max();
}  // namespace

std::size_t parse_digits(std::string_view text, std::uint64_t* number) {
  std::size_t i = 0;
  *number = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0; ++i) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (*number > (max_u64 - digit) / 10) return 0;
    *number = *number * 10 + digit;
  }
  return i;
}

bool parse_count(std::string_view text, std::uint64_t* out) {
  return parse_digits(text, out) == text.size() && !text.empty();
}

bool parse_byte_count(std::string_view text, std::size_t* out) {
  std::uint64_t number = 0;
  const std::size_t digits = parse_digits(text, &number);
  if (digits == 0) return false;
  std::string_view suffix = text.substr(digits);
  unsigned shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB") {
    shift = 40;
  } else {
    return false;
  }
  if (shift > 0 && number > (max_u64 >> shift)) return false;
  *out = static_cast<std::size_t>(number << shift);
  return true;
}

}  // namespace tidepool::detail
