// The synthetic address space of one simulated device: a region of its own ((device + 1) << 44,
// 16 TiB long), from which reservations and plain allocations take ranges that never overlap.
//
// Ranges are found first fit from a moving hint (the end of the last range handed out), so that
// the common case is O(log n) and freed ranges are reused only once the region has wrapped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

namespace tidepool::detail {

/// Occupied ranges of one device's synthetic region.
class sim_address_space {
 public:
  static constexpr unsigned region_shift = 44;

  /// The region of `device`: [(device + 1) << 44, (device + 2) << 44).
  explicit sim_address_space(int device);

  /// A free range of `size` bytes aligned to `alignment` (any non-zero value), marked occupied;
  /// nullopt when the region has no such gap.
  [[nodiscard]] std::optional<std::uintptr_t> take(std::size_t size, std::size_t alignment);
  /// Frees the range that starts at `address` (from take()).
  void give_back(std::uintptr_t address);
  /// Whether `address` lies in this device's region.
  [[nodiscard]] bool contains(std::uintptr_t address) const noexcept;

 private:
  [[nodiscard]] std::optional<std::uintptr_t> first_fit_from(std::uintptr_t start, std::size_t size,
                                                             std::size_t alignment) const;

  std::uintptr_t base_;
  std::uintptr_t end_;
  std::uintptr_t hint_;
  std::map<std::uintptr_t, std::size_t> occupied_;  // start -> size
};

}  // namespace tidepool::detail
