// tidepool's pool as a replay allocator: a thin adapter over the public API.
#include "replay/tidepool_allocator.hpp"

namespace tidepool::replay {

tidepool_allocator::tidepool_allocator(std::shared_ptr<driver> drv, int device, const pool_options& options)
    : pool_(std::move(drv), device, options) {}

std::optional<device_address> tidepool_allocator::allocate(std::size_t bytes, stream_t stream) {
  try {
    return reinterpret_cast<device_address>(pool_.allocate(bytes, stream));
  } catch (const out_of_memory&) {
    return std::nullopt;
  } catch (const error& e) {
    if (e.code() == error_code::invalid_size && bytes != 0) return std::nullopt;
    throw;
  }
}

void tidepool_allocator::deallocate(device_address address, std::size_t, stream_t stream) {
  pool_.deallocate(reinterpret_cast<void*>(address), stream);
}

std::size_t tidepool_allocator::release() { return pool_.release(); }

std::optional<std::size_t> tidepool_allocator::compact() {
  try {
    return pool_.compact();
  } catch (const error& e) {
    if (e.code() == error_code::unavailable) return std::nullopt;
    throw;
  }
}

std::size_t tidepool_allocator::held_bytes() const noexcept { return pool_.stats().mapped_bytes; }
std::optional<pool_description> tidepool_allocator::describe() const { return pool_.describe(); }

}  // namespace tidepool::replay
