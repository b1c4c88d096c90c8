// pool_impl's recording: every allocate, free, failed allocation, map and unmap goes into a buffer
// under the pool's lock, so the buffer holds them in the order the pool did them (a free always
// after the allocation it frees, even across threads), and a recorder (src/process/recorder.cpp)
// takes the buffer away. The lock is never held while the recorder writes: the thread that fills
// the buffer tells it (call_on_full) once the lock is dropped.
#include <fmt/format.h>

#include "core/pool_impl.hpp"
#include "core/recording_clock.hpp"

namespace tidepool::detail {

void pool_impl::note(recorded_event::kind what, device_address address, std::size_t size, stream_t stream) {
  recorded_.push_back(make_recorded_event(what, address, size, reinterpret_cast<std::uintptr_t>(stream)));
  if (recorded_.size() >= next_notify_) {
    next_notify_ += notify_at_;
    recording_full_.store(true, std::memory_order_relaxed);
  }
}

void pool_impl::start_recording(std::size_t notify_at, recording_full_fn on_full, void* context) {
  if (notify_at == 0) throw error(error_code::invalid_argument, "tidepool: start_recording with notify_at 0");
  std::lock_guard guard(lock_);
  if (recording_) {
    throw error(error_code::invalid_argument, fmt::format("tidepool: the pool of device {} records already", device_));
  }
  recorded_.clear();
  take_back_lent(true);  // every allocation and free from here on takes the lock, which records it
  // The allocations live now come first, as allocations by no thread, so that every later free
  // names an allocation the recording holds.
  const recorded_event start = make_recorded_event(recorded_event::kind::allocate, 0, 0, 0);
  for (const auto& a : arenas_) {
    a->for_each_block([&](const block& b) {
      if (b.state != block_state::live) return;
      recorded_event e = start;
      e.thread = 0;
      e.address = b.address;
      e.size = b.requested;
      e.stream = b.owner != 0 ? reinterpret_cast<std::uintptr_t>(streams_.at(b.owner).stream) : 0;
      recorded_.push_back(e);
    });
  }
  notify_at_ = notify_at;
  next_notify_ = recorded_.size() + notify_at;
  on_full_ = on_full;
  on_full_context_ = context;
  recording_ = true;
  calls_.log_mappings(&recorded_);
}

void pool_impl::take_recorded(std::vector<recorded_event>& out) {
  std::lock_guard guard(lock_);
  if (out.empty()) {
    out.swap(recorded_);  // O(1): the recorder hands back its emptied vector next time
  } else {
    out.insert(out.end(), recorded_.begin(), recorded_.end());
  }
  recorded_.clear();
  next_notify_ = notify_at_;
  recording_full_.store(false, std::memory_order_relaxed);
}

void pool_impl::stop_recording(std::vector<recorded_event>& out) {
  std::lock_guard guard(lock_);
  out.insert(out.end(), recorded_.begin(), recorded_.end());
  recorded_ = std::vector<recorded_event>{};
  recording_ = false;
  on_full_ = nullptr;
  on_full_context_ = nullptr;
  calls_.log_mappings(nullptr);
  recording_full_.store(false, std::memory_order_relaxed);
}

void pool_impl::call_on_full() {
  if (!recording_full_.exchange(false, std::memory_order_relaxed)) return;  // another thread took it
  recording_full_fn fn = nullptr;
  void* context = nullptr;
  std::size_t pending = 0;
  {
    std::lock_guard guard(lock_);
    fn = on_full_;
    context = on_full_context_;
    pending = recorded_.size();
  }
  if (fn != nullptr && pending != 0) fn(context, device_, pending);
}

}  // namespace tidepool::detail
