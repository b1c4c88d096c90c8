// replay/expandable_segment.hpp: one expandable segment as PyTorch's allocator keeps it
// (c10/cuda/CUDACachingAllocator.cpp, struct ExpandableSegment): a reserved address range of
// 1 1/8 times the device's memory, backed page by page with physical handles of one size
// (2 MiB for the small pool, 20 MiB for the large one), mapped on demand and unmapped when free.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "tidepool/driver.hpp"

namespace tidepool::replay::detail {

/// An address range [begin, begin + size).
struct segment_range {
  device_address begin = 0;
  std::size_t size = 0;
};

/// A growable, shrinkable segment built on the driver's virtual memory calls.
class expandable_segment {
 public:
  /// Reserves the address range; throws tidepool::error if the driver refuses.
  expandable_segment(std::shared_ptr<driver> drv, int device, stream_t stream, std::size_t page_size);
  /// Unmaps and releases every page and frees the address range.
  ~expandable_segment();
  expandable_segment(const expandable_segment&) = delete;
  expandable_segment& operator=(const expandable_segment&) = delete;

  /// Backs the pages covering `range` (range.begin page aligned) with new handles. Returns the
  /// range mapped, rounded up to whole pages, or an empty one when the device is out of memory
  /// (then nothing was kept).
  segment_range map(segment_range range);
  /// Unmaps and releases the whole pages inside `range`. Returns the range unmapped (empty when
  /// no whole page lies inside).
  segment_range unmap(segment_range range);

  [[nodiscard]] device_address base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return page_size_ * max_pages_; }
  [[nodiscard]] std::size_t page_size() const noexcept { return page_size_; }
  [[nodiscard]] stream_t stream() const noexcept { return stream_; }
  /// Physical bytes mapped now.
  [[nodiscard]] std::size_t mapped_bytes() const noexcept { return mapped_pages_ * page_size_; }

 private:
  void unmap_pages(std::size_t first, std::size_t last);

  std::shared_ptr<driver> driver_;
  int device_;
  stream_t stream_;
  std::size_t page_size_;
  std::size_t max_pages_;
  device_address base_ = 0;
  std::vector<std::optional<physical_handle>> handles_;
  std::size_t mapped_pages_ = 0;
};

}  // namespace tidepool::replay::detail
