// CuPy's default memory pool as a replay baseline, following SingleDeviceMemoryPool's
// malloc / _get_chunk / _try_malloc / free / free_all_blocks.
#include "replay/cupy_allocator.hpp"

#include <vector>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::replay {

namespace {
constexpr std::size_t allocation_unit = 512;  // _allocation_unit_size
}

cupy_allocator::cupy_allocator(std::shared_ptr<driver> drv, int device)
    : driver_(std::move(drv)), device_(device) {}

cupy_allocator::~cupy_allocator() {
  for (const auto& [base, size] : allocations_) (void)driver_->mem_free(device_, base);
}

std::optional<device_address> cupy_allocator::allocate(std::size_t bytes, stream_t stream) {
  const std::size_t size = (bytes + allocation_unit - 1) / allocation_unit * allocation_unit;
  chunk* c = get_chunk(size, stream);
  if (c == nullptr) c = try_malloc(size, stream);
  if (c == nullptr) return std::nullopt;
  c->in_use = true;
  in_use_.emplace(c->address, c);
  return c->address;
}

// _get_chunk(): the smallest free chunk that fits; the remainder, if any, goes back as a chunk.
cupy_allocator::chunk* cupy_allocator::get_chunk(std::size_t size, stream_t stream) {
  const auto found = arenas_.find(stream);
  if (found == arenas_.end()) return nullptr;
  arena& free_chunks = found->second;
  chunk search{};
  search.size = size;
  const auto it = free_chunks.lower_bound(&search);
  if (it == free_chunks.end()) return nullptr;
  chunk* c = *it;
  free_chunks.erase(it);
  if (c->size > size) {  // _Chunk.split: any remainder is split off
    chunk* remaining = nodes_.make();
    remaining->address = c->address + size;
    remaining->size = c->size - size;
    remaining->base = c->base;
    remaining->stream = stream;
    remaining->prev = c;
    remaining->next = c->next;
    if (remaining->next != nullptr) remaining->next->prev = remaining;
    c->next = remaining;
    c->size = size;
    free_chunks.insert(remaining);
  }
  return c;
}

// _try_malloc(): a new allocation of exactly `size`; on out-of-memory, free_all_blocks() and retry.
cupy_allocator::chunk* cupy_allocator::try_malloc(std::size_t size, stream_t stream) {
  device_address address = 0;
  driver_status status = driver_->mem_alloc(device_, size, &address);
  if (status == driver_status::out_of_memory) {
    release();
    status = driver_->mem_alloc(device_, size, &address);
  }
  if (status == driver_status::out_of_memory) return nullptr;
  if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_alloc, status);
  allocations_.emplace(address, size);
  held_.add(address, size);
  chunk* c = nodes_.make();
  c->address = address;
  c->size = size;
  c->base = address;
  c->stream = stream;
  return c;
}

void cupy_allocator::deallocate(device_address address, std::size_t, stream_t) {
  const auto it = in_use_.find(address);
  if (it == in_use_.end()) {
    throw error(error_code::invalid_pointer, fmt::format("cupy: free of {:#x}, not allocated here", address));
  }
  chunk* c = it->second;
  in_use_.erase(it);
  c->in_use = false;
  arena& free_chunks = arenas_[c->stream];
  if (chunk* next = c->next; next != nullptr && !next->in_use) {  // merge the next chunk into c
    free_chunks.erase(next);
    c->size += next->size;
    c->next = next->next;
    if (c->next != nullptr) c->next->prev = c;
    nodes_.recycle(next);
  }
  if (chunk* prev = c->prev; prev != nullptr && !prev->in_use) {  // merge c into the previous chunk
    free_chunks.erase(prev);
    prev->size += c->size;
    prev->next = c->next;
    if (prev->next != nullptr) prev->next->prev = prev;
    nodes_.recycle(c);
    c = prev;
  }
  free_chunks.insert(c);
}

// free_all_blocks(): frees the chunks that are whole allocations; split ones stay.
std::size_t cupy_allocator::release() {
  std::size_t released = 0;
  for (auto& [stream, free_chunks] : arenas_) {
    std::vector<chunk*> whole;
    for (chunk* c : free_chunks) {
      if (c->prev == nullptr && c->next == nullptr) whole.push_back(c);
    }
    for (chunk* c : whole) {
      const driver_status status = driver_->mem_free(device_, c->base);
      if (status != driver_status::success) detail::throw_driver_failure(name(), driver_call::mem_free, status);
      const auto allocation = allocations_.find(c->base);
      const std::size_t held_before = held_.held();
      held_.remove(c->base, allocation->second);
      released += held_before - held_.held();
      allocations_.erase(allocation);
      free_chunks.erase(c);
      nodes_.recycle(c);
    }
  }
  return released;
}

}  // namespace tidepool::replay
