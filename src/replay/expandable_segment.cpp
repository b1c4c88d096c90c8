// An expandable segment: reserve once, then create + map pages as the segment grows and
// unmap + release them when whole pages are free, following PyTorch's ExpandableSegment.
#include "replay/expandable_segment.hpp"

#include "replay/replay_allocator.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::replay::detail {

expandable_segment::expandable_segment(std::shared_ptr<driver> drv, int device, stream_t stream,
                                       std::size_t page_size)
    : driver_(std::move(drv)), device_(device), stream_(stream), page_size_(page_size) {
  // PyTorch reserves 1 1/8 of the device's memory, so pages unmapped early in the segment can
  // be mapped again at its end.
  const std::size_t total = driver_->memory_info(device_).total;
  max_pages_ = (total + total / 8 + page_size_ - 1) / page_size_;
  const driver_status status =
      driver_->address_reserve(device_, size(), driver_->granularity(device_), &base_);
  if (status != driver_status::success) throw_driver_failure("expandable", driver_call::address_reserve, status);
}

expandable_segment::~expandable_segment() {
  for (std::size_t i = 0; i < handles_.size(); ++i) {
    if (handles_[i]) {
      (void)driver_->mem_unmap(device_, base_ + i * page_size_, page_size_);
      (void)driver_->mem_release(device_, *handles_[i]);
    }
  }
  (void)driver_->address_free(device_, base_, size());
}

segment_range expandable_segment::map(segment_range range) {
  const std::size_t first = (range.begin - base_) / page_size_;
  const std::size_t last = (range.begin + range.size - base_ + page_size_ - 1) / page_size_;
  if (last > handles_.size()) handles_.resize(last);
  for (std::size_t i = first; i < last; ++i) {
    physical_handle handle = 0;
    const driver_status status = driver_->mem_create(device_, page_size_, &handle);
    if (status != driver_status::success) {
      // Out of memory: give back what this call created, as PyTorch does, and report nothing mapped.
      for (std::size_t j = first; j < i; ++j) {
        (void)driver_->mem_release(device_, *handles_[j]);
        handles_[j].reset();
      }
      while (!handles_.empty() && !handles_.back()) handles_.pop_back();
      if (status == driver_status::out_of_memory) return {range.begin, 0};
      throw_driver_failure("expandable", driver_call::mem_create, status);
    }
    handles_[i] = handle;
  }
  // PyTorch maps each handle, then sets access once over the range; the driver's cost of
  // cuMemSetAccess is per handle (DESIGN 2a), so mapping with access per handle costs the same.
  for (std::size_t i = first; i < last; ++i) {
    const driver_status status = driver_->mem_map(device_, base_ + i * page_size_, page_size_, *handles_[i]);
    if (status != driver_status::success) throw_driver_failure("expandable", driver_call::mem_map, status);
    ++mapped_pages_;
  }
  return {base_ + first * page_size_, (last - first) * page_size_};
}

segment_range expandable_segment::unmap(segment_range range) {
  const std::size_t first = (range.begin - base_ + page_size_ - 1) / page_size_;
  const std::size_t last = (range.begin + range.size - base_) / page_size_;
  if (first >= last) return {range.begin, 0};
  unmap_pages(first, last);
  return {base_ + first * page_size_, (last - first) * page_size_};
}

void expandable_segment::unmap_pages(std::size_t first, std::size_t last) {
  for (std::size_t i = first; i < last; ++i) {
    const physical_handle handle = *handles_[i];
    handles_[i].reset();
    driver_status status = driver_->mem_unmap(device_, base_ + i * page_size_, page_size_);
    if (status != driver_status::success) throw_driver_failure("expandable", driver_call::mem_unmap, status);
    status = driver_->mem_release(device_, handle);
    if (status != driver_status::success) throw_driver_failure("expandable", driver_call::mem_release, status);
    --mapped_pages_;
  }
  while (!handles_.empty() && !handles_.back()) handles_.pop_back();
}

}  // namespace tidepool::replay::detail
