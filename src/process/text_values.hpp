// Values the process layer (and the command line) read from text: environment variables, counts,
// and byte counts with a binary suffix, each refusing anything else rather than guessing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tidepool::detail {

/// The environment variable `name`, or "" when it is not set.
[[nodiscard]] std::string_view environment(const char* name);

/// Reads the leading decimal digits of `text` into `number`; returns how many there were (0 on
/// overflow or when there are none).
std::size_t parse_digits(std::string_view text, std::uint64_t* number);

/// A plain decimal count, the whole of `text`.
bool parse_count(std::string_view text, std::uint64_t* out);

/// "<digits>[suffix]", suffix one of K, M, G, T, KiB, MiB, GiB, TiB (powers of 1024, as the
/// driver counts); false on anything else or on overflow.
bool parse_byte_count(std::string_view text, std::size_t* out);

}  // namespace tidepool::detail
