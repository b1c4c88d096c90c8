// The free index: free mapped blocks of one arena and one stream slot, by size.
//
// Size classes in the manner of TLSF: sizes are counted in 512-byte units; units below 64 get a
// class each, above that every power of two is split into 64 classes (so a class spans at most
// 1/64 of its size). Each class is an intrusive list, and a two-level bitmap says which classes
// are non-empty, so finding a fit is a scan of at most 16 entries of one or two lists and two
// count-trailing-zeros: O(1), not a tree walk (a std::set costs a node allocation per free).
// Classes this narrow hold few blocks each, and a scan costs mostly the cache misses on the blocks
// it reads. Wherever a class holds no more than the scan's 16 blocks, the block found is the best
// fit whatever the width of the classes (docs/RESULTS.md, section 3).
//
// find() is best fit: the smallest block that fits, in the request's own class or else in the
// next non-empty one (a bounded scan of each list), the lower address among blocks of one size,
// the order PyTorch's allocator keeps its free blocks in; blocks of exactly the size asked for
// too. So which block serves a request does not depend on the order of earlier frees, and a
// trace replayed pass after pass lays out as it did before: taking the head of the next class
// (the block freed last) made later passes of many traces hold more than the first, and taking
// the head of the exact size's list did so on a training loop with activation checkpointing
// (docs/RESULTS.md, section 0).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "core/block.hpp"
#include "core/units.hpp"

namespace tidepool::detail {

class free_index {
 public:
  static constexpr unsigned sub_bits = 6;
  static constexpr unsigned subs = 1u << sub_bits;
  static constexpr std::size_t bins = subs * (44 - sub_bits);  // sizes below 2^52 bytes (2^43 units)
  static constexpr std::size_t words = (bins + 63) / 64;
  static_assert(words <= 64, "one summary word covers the bitmap");

  /// The class of a size in bytes (a multiple of 512).
  [[nodiscard]] static unsigned bin_of(std::size_t bytes) noexcept {
    const std::size_t units = bytes >> block_alignment_shift;
    if (units < subs) return static_cast<unsigned>(units);
    const unsigned top = static_cast<unsigned>(std::bit_width(units)) - 1;  // >= sub_bits
    const unsigned sub = static_cast<unsigned>(units >> (top - sub_bits)) & (subs - 1);
    return subs + (top - sub_bits) * subs + sub;
  }

  /// Adds a free block (pushed at the front of its class).
  void insert(block* b) noexcept {
    const unsigned bin = bin_of(b->size);
    b->bin = static_cast<std::uint16_t>(bin);
    b->link_prev = nullptr;
    b->link_next = heads_[bin];
    if (heads_[bin] != nullptr) heads_[bin]->link_prev = b;
    heads_[bin] = b;
    words_[bin >> 6] |= std::uint64_t{1} << (bin & 63);
    summary_ |= std::uint64_t{1} << (bin >> 6);
    ++count_;
    bytes_ += b->size;
  }

  /// Takes a block out of the index.
  void remove(block* b) noexcept {
    const unsigned bin = b->bin;
    if (b->link_prev != nullptr) {
      b->link_prev->link_next = b->link_next;
    } else {
      heads_[bin] = b->link_next;
      if (heads_[bin] == nullptr) {
        words_[bin >> 6] &= ~(std::uint64_t{1} << (bin & 63));
        if (words_[bin >> 6] == 0) summary_ &= ~(std::uint64_t{1} << (bin >> 6));
      }
    }
    if (b->link_next != nullptr) b->link_next->link_prev = b->link_prev;
    --count_;
    bytes_ -= b->size;
  }

  /// The smallest block of at least `bytes` (a multiple of 512) among the first max_scan of its
  /// class, or else of the next non-empty class, the lowest address among equals; nullptr if none.
  /// `skip`, if given, is left out as if it were not in the index (a neighbour a block about to be
  /// given back would absorb: arena::parked_is_best_fit).
  [[nodiscard]] block* find(std::size_t bytes, const block* skip = nullptr) const noexcept {
    if (count_ == 0) return nullptr;
    const unsigned bin = bin_of(bytes);
    block* best = nullptr;
    unsigned scanned = 0;
    for (block* b = heads_[bin]; b != nullptr && scanned < max_scan; b = b->link_next) {
      if (b == skip) continue;
      ++scanned;
      if (b->size >= bytes && better(b, best)) best = b;
    }
    // Any block of a higher class fits: the first non-empty one decides, unless its only block
    // is the skipped one.
    for (unsigned above = next_nonempty(bin + 1); best == nullptr && above < bins; above = next_nonempty(above + 1)) {
      scanned = 0;
      for (block* b = heads_[above]; b != nullptr && scanned < max_scan; b = b->link_next) {
        if (b == skip) continue;
        ++scanned;
        if (better(b, best)) best = b;
      }
    }
    return best;
  }

  /// The first non-empty class at or above `bin`, or `bins` if none.
  [[nodiscard]] unsigned next_nonempty(unsigned bin) const noexcept {
    if (bin >= bins) return bins;
    unsigned word = bin >> 6;
    std::uint64_t bits = words_[word] & (~std::uint64_t{0} << (bin & 63));
    if (bits == 0) {
      const unsigned next_word = word + 1;
      if (next_word >= words) return bins;
      const std::uint64_t rest = summary_ & (~std::uint64_t{0} << next_word);
      if (rest == 0) return bins;
      word = static_cast<unsigned>(std::countr_zero(rest));
      bits = words_[word];
    }
    return (word << 6) + static_cast<unsigned>(std::countr_zero(bits));
  }

  /// The head of a class (for walks over the index, largest classes first).
  [[nodiscard]] block* head(unsigned bin) const noexcept { return heads_[bin]; }
  /// The highest non-empty class, or `bins` if the index is empty.
  [[nodiscard]] unsigned highest_nonempty() const noexcept {
    if (summary_ == 0) return bins;
    const unsigned word = 63 - static_cast<unsigned>(std::countl_zero(summary_));
    return (word << 6) + 63 - static_cast<unsigned>(std::countl_zero(words_[word]));
  }
  /// The highest non-empty class below `bin`, or `bins` if none.
  [[nodiscard]] unsigned previous_nonempty(unsigned bin) const noexcept {
    while (bin > 0) {
      --bin;
      const unsigned word = bin >> 6;
      const std::uint64_t bits = words_[word] & (~std::uint64_t{0} >> (63 - (bin & 63)));
      if (bits != 0) return (word << 6) + 63 - static_cast<unsigned>(std::countl_zero(bits));
      bin = word << 6;
    }
    return bins;
  }

  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  static constexpr unsigned max_scan = 16;

  // Smaller first, then the lower address.
  [[nodiscard]] static bool better(const block* b, const block* best) noexcept {
    return best == nullptr || b->size < best->size || (b->size == best->size && b->address < best->address);
  }

  std::array<block*, bins> heads_{};
  std::array<std::uint64_t, words> words_{};
  std::uint64_t summary_ = 0;
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace tidepool::detail
