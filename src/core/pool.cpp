// tidepool::pool: the public face of pool_impl. Each call forwards; the implementation and its
// reasons are in pool_impl.hpp and the files it names. allocate and deallocate also tell a
// recording pool's recorder when its buffer filled, once the pool's lock is dropped.
#include "tidepool/pool.hpp"

#include "core/pool_impl.hpp"

namespace tidepool {

pool::pool(std::shared_ptr<driver> drv, int device, pool_options options)
    : impl_(std::make_unique<detail::pool_impl>(std::move(drv), device, options)) {}
pool::~pool() = default;
pool::pool(pool&&) noexcept = default;
pool& pool::operator=(pool&&) noexcept = default;

void* pool::allocate(std::size_t bytes, stream_t stream, lifetime hint) {
  void* p = impl_->allocate(bytes, stream, hint);
  // A recording pool's buffer filled: its recorder is told with no lock held.
  if (impl_->recording_full()) [[unlikely]] impl_->call_on_full();
  return p;
}
void pool::deallocate(void* ptr, stream_t stream) {
  impl_->deallocate(ptr, stream);
  if (impl_->recording_full()) [[unlikely]] impl_->call_on_full();
}
void pool::record_stream(void* ptr, stream_t stream) { impl_->record_stream(ptr, stream); }
void pool::forget_stream(stream_t stream) { impl_->forget_stream(stream); }
std::size_t pool::release() { return impl_->release(); }
std::size_t pool::compact() { return impl_->compact(); }
std::size_t pool::sleep(sleep_keep keep) { return impl_->sleep(keep); }
void pool::wake() { impl_->wake(); }
bool pool::asleep() const { return impl_->asleep(); }
std::size_t pool::allocation_size(const void* ptr) const { return impl_->allocation_size(ptr); }
bool pool::owns(const void* ptr) const { return impl_->owns(ptr); }
exported_allocation pool::export_allocation(const void* ptr) { return impl_->export_allocation(ptr); }
void pool::end_export(const void* ptr) { impl_->end_export(ptr); }
std::size_t pool::available_bytes() const { return impl_->available_bytes(); }
pool_stats pool::stats() const { return impl_->stats(); }
void pool::reset_peak_stats() { impl_->reset_peak_stats(); }
void pool::set_byte_cap(std::size_t bytes) { impl_->set_byte_cap(bytes); }
std::size_t pool::byte_cap() const { return impl_->byte_cap(); }
int pool::device() const noexcept { return impl_->device(); }
const pool_options& pool::options() const noexcept { return impl_->options(); }
const std::shared_ptr<driver>& pool::get_driver() const noexcept { return impl_->get_driver(); }
void pool::enable_peer_access(int peer_device) { impl_->enable_peer_access(peer_device); }
pool_description pool::describe() const { return impl_->describe(); }
void pool::start_recording(std::size_t notify_at, recording_full_fn on_full, void* context) {
  impl_->start_recording(notify_at, on_full, context);
}
void pool::take_recorded(std::vector<recorded_event>& out) { impl_->take_recorded(out); }
void pool::stop_recording(std::vector<recorded_event>& out) { impl_->stop_recording(out); }
void pool::lock_for_fork() noexcept { impl_->lock_for_fork(); }
void pool::unlock_after_fork() noexcept { impl_->unlock_after_fork(); }

}  // namespace tidepool
