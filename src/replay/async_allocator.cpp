// The cudaMallocAsync-like pool: best fit over one address range, 2 MiB pages mapped on first
// touch, unmapped by trimming.
#include "replay/async_allocator.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::replay {

namespace {
constexpr std::size_t rounding = 512;
}

async_allocator::async_allocator(std::shared_ptr<driver> drv, int device, std::size_t release_threshold)
    : driver_(std::move(drv)), device_(device), threshold_(release_threshold) {
  // Twice the device's memory of address space, so fragmentation of addresses never limits it.
  const std::size_t total = driver_->memory_info(device_).total;
  range_bytes_ = (2 * total + page_size - 1) / page_size * page_size;
  const driver_status status = driver_->address_reserve(device_, range_bytes_, page_size, &base_);
  if (status != driver_status::success) detail::throw_driver_failure("async", driver_call::address_reserve, status);
  page_users_.assign(range_bytes_ / page_size, 0);
  handles_.resize(range_bytes_ / page_size);
  give_free_range(base_, range_bytes_);
}

async_allocator::~async_allocator() {
  for (std::size_t i = 0; i < handles_.size(); ++i) {
    if (handles_[i]) {
      (void)driver_->mem_unmap(device_, base_ + i * page_size, page_size);
      (void)driver_->mem_release(device_, *handles_[i]);
    }
  }
  (void)driver_->address_free(device_, base_, range_bytes_);
}

std::optional<std::pair<device_address, std::size_t>> async_allocator::take_free_range(std::size_t size) {
  const auto it = free_by_size_.lower_bound({size, 0});
  if (it == free_by_size_.end()) return std::nullopt;
  const auto [range_size, address] = *it;
  free_by_size_.erase(it);
  free_by_address_.erase(address);
  if (range_size > size) {
    free_by_address_.emplace(address + size, range_size - size);
    free_by_size_.emplace(range_size - size, address + size);
  }
  return std::pair{address, size};
}

void async_allocator::give_free_range(device_address address, std::size_t size) {
  auto next = free_by_address_.lower_bound(address);
  if (next != free_by_address_.end() && address + size == next->first) {
    free_by_size_.erase({next->second, next->first});
    size += next->second;
    next = free_by_address_.erase(next);
  }
  if (next != free_by_address_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == address) {
      free_by_size_.erase({prev->second, prev->first});
      address = prev->first;
      size += prev->second;
      free_by_address_.erase(prev);
    }
  }
  free_by_address_.emplace(address, size);
  free_by_size_.emplace(size, address);
}

// Counts the allocation as a user of every page it touches and maps the pages not mapped yet.
// On out-of-memory, undoes its own work and returns false.
bool async_allocator::touch_pages(device_address address, std::size_t size) {
  const std::size_t first = (address - base_) / page_size;
  const std::size_t last = (address - base_ + size - 1) / page_size;
  for (std::size_t i = first; i <= last; ++i) {
    if (!handles_[i]) {
      physical_handle handle = 0;
      driver_status status = driver_->mem_create(device_, page_size, &handle);
      if (status == driver_status::success) {
        status = driver_->mem_map(device_, base_ + i * page_size, page_size, handle);
        if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_map, status);
        handles_[i] = handle;
        ++mapped_pages_;
        pages_in_use_end_ = std::max(pages_in_use_end_, i + 1);
      } else if (status == driver_status::out_of_memory) {
        for (std::size_t j = first; j < i; ++j) --page_users_[j];
        return false;
      } else {
        detail::throw_driver_failure(name(), driver_call::mem_create, status);
      }
    }
    ++page_users_[i];
  }
  return true;
}

void async_allocator::untouch_pages(device_address address, std::size_t size) {
  const std::size_t first = (address - base_) / page_size;
  const std::size_t last = (address - base_ + size - 1) / page_size;
  for (std::size_t i = first; i <= last; ++i) --page_users_[i];
}

std::optional<device_address> async_allocator::allocate(std::size_t bytes, stream_t) {
  const std::size_t size = (bytes + rounding - 1) / rounding * rounding;
  const auto range = take_free_range(size);
  if (!range) return std::nullopt;
  if (!touch_pages(range->first, size)) {
    trim_to(0);  // the driver hands the pool's unused memory to a failing allocation
    if (!touch_pages(range->first, size)) {
      give_free_range(range->first, size);
      return std::nullopt;
    }
  }
  live_.emplace(range->first, size);
  return range->first;
}

void async_allocator::deallocate(device_address address, std::size_t, stream_t) {
  const auto it = live_.find(address);
  if (it == live_.end()) {
    throw error(error_code::invalid_pointer, fmt::format("async: free of {:#x}, not allocated here", address));
  }
  const std::size_t size = it->second;
  live_.erase(it);
  untouch_pages(address, size);
  give_free_range(address, size);
  if (threshold_ != keep_everything && held_bytes() > threshold_) trim_to(threshold_);
}

// Unmaps pages no live allocation touches, highest address first, until at most `keep_bytes`
// are mapped. Returns the bytes unmapped.
std::size_t async_allocator::trim_to(std::size_t keep_bytes) {
  std::size_t released = 0;
  for (std::size_t i = pages_in_use_end_; i-- > 0 && held_bytes() > keep_bytes;) {
    if (!handles_[i] || page_users_[i] != 0) continue;
    driver_status status = driver_->mem_unmap(device_, base_ + i * page_size, page_size);
    if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_unmap, status);
    status = driver_->mem_release(device_, *handles_[i]);
    if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_release, status);
    handles_[i].reset();
    --mapped_pages_;
    released += page_size;
  }
  return released;
}

}  // namespace tidepool::replay
