// The `exact` baseline: cudaMalloc per request; and the count of what cudaMalloc'd memory holds.
#include "replay/exact_allocator.hpp"

#include <fmt/format.h>

#include "device/sim/cuda_malloc_rule.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::replay {

namespace {
using tidepool::detail::cuda_malloc_page;
using tidepool::detail::cuda_malloc_shares_pages;
using tidepool::detail::cuda_malloc_whole_pages;

device_address page_of(device_address address) { return address / cuda_malloc_page * cuda_malloc_page; }
}  // namespace

void cuda_malloc_count::add(device_address address, std::size_t bytes) {
  if (!cuda_malloc_shares_pages(bytes)) {
    held_ += cuda_malloc_whole_pages(bytes);
    return;
  }
  if (++shared_pages_[page_of(address)] == 1) held_ += cuda_malloc_page;
}

void cuda_malloc_count::remove(device_address address, std::size_t bytes) {
  if (!cuda_malloc_shares_pages(bytes)) {
    held_ -= cuda_malloc_whole_pages(bytes);
    return;
  }
  const auto page = shared_pages_.find(page_of(address));
  if (--page->second == 0) {
    shared_pages_.erase(page);
    held_ -= cuda_malloc_page;
  }
}

exact_allocator::exact_allocator(std::shared_ptr<driver> drv, int device)
    : driver_(std::move(drv)), device_(device) {}

exact_allocator::~exact_allocator() {
  for (const auto& [address, bytes] : sizes_) (void)driver_->mem_free(device_, address);
}

std::optional<device_address> exact_allocator::allocate(std::size_t bytes, stream_t) {
  device_address address = 0;
  const driver_status status = driver_->mem_alloc(device_, bytes, &address);
  if (status == driver_status::out_of_memory) return std::nullopt;
  if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_alloc, status);
  sizes_.emplace(address, bytes);
  held_.add(address, bytes);
  return address;
}

void exact_allocator::deallocate(device_address address, std::size_t, stream_t) {
  const auto it = sizes_.find(address);
  if (it == sizes_.end()) {
    throw error(error_code::invalid_pointer, fmt::format("exact: free of {:#x}, not allocated here", address));
  }
  const driver_status status = driver_->mem_free(device_, address);
  if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_free, status);
  held_.remove(address, it->second);
  sizes_.erase(it);
}

}  // namespace tidepool::replay
