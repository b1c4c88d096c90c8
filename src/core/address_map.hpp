// The map from the address of a live allocation to its block: open addressing, linear probing.
//
// deallocate() must find a block from a pointer in a few instructions. std::unordered_map costs a
// node allocation per insert and a pointer chase per lookup; this table is one flat array of
// (address, block) pairs with backward-shift deletion (no tombstones, so lookups stay short however
// many allocations come and go). It is kept at most a quarter full: each probe past the home slot
// is a branch the CPU cannot predict, and at half full those probes were the largest cost of an
// allocate and a free in the random mix that the pool's own work could shed (docs/RESULTS.md,
// section 3, "The live-allocation table at a quarter full"), for 64 bytes of host memory per live
// allocation instead of 32. Address 0 marks an empty slot; no device allocation starts at 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/block.hpp"
#include "tidepool/driver.hpp"

namespace tidepool::detail {

class address_map {
 public:
  address_map() { slots_.resize(initial_capacity); mask_ = initial_capacity - 1; }

  /// The block at `address`, or nullptr.
  [[nodiscard]] block* find(device_address address) const noexcept {
    for (std::size_t i = home(address);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.address == address) return s.value;
      if (s.address == 0) return nullptr;
    }
  }

  /// Adds `address` -> `value` (`address` must not be present).
  void insert(device_address address, block* value) {
    if ((size_ + 1) * max_load_inverse > slots_.size()) grow();
    place(address, value);
    ++size_;
  }

  /// Removes `address` (must be present).
  void erase(device_address address) noexcept {
    std::size_t i = home(address);
    while (slots_[i].address != address) i = (i + 1) & mask_;
    // Backward-shift: move later entries of the probe run into the hole when that brings them
    // no further from home than they were.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].address == 0) break;
      const std::size_t want = home(slots_[j].address);
      if (((j - want) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = slot{};
    --size_;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  /// Calls f(address, block*) for every entry.
  template <class F>
  void for_each(F&& f) const {
    for (const slot& s : slots_) {
      if (s.address != 0) f(s.address, s.value);
    }
  }

 private:
  struct slot {
    device_address address = 0;
    block* value = nullptr;
  };
  static constexpr std::size_t initial_capacity = 1024;
  static constexpr std::size_t max_load_inverse = 4;  // at most 1 / max_load_inverse of the slots used

  [[nodiscard]] std::size_t home(device_address address) const noexcept {
    // Addresses are multiples of 512: drop those bits, then a Fibonacci hash spreads the rest.
    return static_cast<std::size_t>(((address >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
  }
  void place(device_address address, block* value) noexcept {
    std::size_t i = home(address);
    while (slots_[i].address != 0) i = (i + 1) & mask_;
    slots_[i] = slot{address, value};
  }
  void grow() {
    std::vector<slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const slot& s : old) {
      if (s.address != 0) place(s.address, s.value);
    }
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace tidepool::detail
