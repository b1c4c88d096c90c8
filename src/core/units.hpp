// Sizes and rounding shared by the core: the alignment every block keeps, and round-up helpers.
//
// Every block starts and ends on a multiple of `block_alignment` (512 B, like PyTorch's caching
// allocator): that is the 256-byte alignment the public API promises, with one more bit to spare,
// and it lets the free index count sizes in 512-byte units.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tidepool::detail {

inline constexpr std::size_t block_alignment = 512;
inline constexpr unsigned block_alignment_shift = 9;
inline constexpr std::size_t mib = std::size_t{1} << 20;

/// `value` rounded up to a multiple of `multiple` (any non-zero value).
[[nodiscard]] constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

/// `value` rounded down to a multiple of `multiple` (any non-zero value).
[[nodiscard]] constexpr std::size_t round_down(std::size_t value, std::size_t multiple) noexcept {
  return value / multiple * multiple;
}

}  // namespace tidepool::detail
