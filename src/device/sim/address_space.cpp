// First-fit search over a simulated device's synthetic address region.
#include "device/sim/address_space.hpp"

#include <iterator>

namespace tidepool::detail {
namespace {

// Rounds up to a multiple of `alignment`; nullopt on overflow.
std::optional<std::uintptr_t> align_up(std::uintptr_t value, std::size_t alignment) {
  const std::uintptr_t remainder = value % alignment;
  if (remainder == 0) return value;
  const std::uintptr_t step = alignment - remainder;
  if (value + step < value) return std::nullopt;
  return value + step;
}

}  // namespace

sim_address_space::sim_address_space(int device)
    : base_(static_cast<std::uintptr_t>(device + 1) << region_shift),
      end_(static_cast<std::uintptr_t>(device + 2) << region_shift),
      hint_(base_) {}

bool sim_address_space::contains(std::uintptr_t address) const noexcept {
  return address >= base_ && address < end_;
}

std::optional<std::uintptr_t> sim_address_space::first_fit_from(std::uintptr_t start, std::size_t size,
                                                                std::size_t alignment) const {
  auto candidate = align_up(start, alignment);
  if (!candidate) return std::nullopt;
  auto next = occupied_.upper_bound(*candidate);
  if (next != occupied_.begin()) {
    const auto before = std::prev(next);
    if (before->first + before->second > *candidate) candidate = align_up(before->first + before->second, alignment);
  }
  while (candidate) {
    if (*candidate >= end_ || size > end_ - *candidate) return std::nullopt;
    if (next == occupied_.end() || *candidate + size <= next->first) return candidate;
    candidate = align_up(next->first + next->second, alignment);
    ++next;
  }
  return std::nullopt;
}

std::optional<std::uintptr_t> sim_address_space::take(std::size_t size, std::size_t alignment) {
  if (size == 0 || alignment == 0) return std::nullopt;
  auto found = first_fit_from(hint_, size, alignment);
  if (!found && hint_ != base_) found = first_fit_from(base_, size, alignment);
  if (!found) return std::nullopt;
  occupied_.emplace(*found, size);
  hint_ = *found + size;
  return found;
}

void sim_address_space::give_back(std::uintptr_t address) { occupied_.erase(address); }

}  // namespace tidepool::detail
