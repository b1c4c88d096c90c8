// Stream ordering: the stream registry and the event pool.
#include "core/stream_order.hpp"

#include <fmt/format.h>

#include <atomic>

#include "tidepool/errors.hpp"

namespace tidepool::detail {

std::uint64_t this_thread_key() noexcept {
  static std::atomic<std::uint64_t> next{1};
  // A counter, not the thread's id or the address of a thread-local: both come back for a later
  // thread, which must not take over the state of a stream that died with the first one.
  thread_local const std::uint64_t key = next.fetch_add(1, std::memory_order_relaxed);
  return key;
}

stream_registry::key stream_registry::key_of(stream_t stream) noexcept {
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  if (handle == legacy_stream_handle) return key{nullptr, 0};
  if (handle == per_thread_stream_handle) return key{stream, this_thread_key()};
  return key{stream, 0};
}

bool stream_registry::names(const stream_state& state, stream_t stream) noexcept {
  const key k = key_of(stream);
  return k.stream == state.stream && k.thread == state.thread;
}

stream_state* stream_registry::find_slow(stream_t stream) {
  const auto it = by_key_.find(key_of(stream));
  if (it == by_key_.end()) return nullptr;
  last_ = it->second;
  return last_;
}

stream_state& stream_registry::add(stream_t stream) {
  stream_state& s = add_in_free_slot(key_of(stream));
  by_key_.emplace(key{s.stream, s.thread}, &s);
  last_ = &s;
  return s;
}

stream_state* stream_registry::find_capture(std::uint64_t capture, stream_t stream) {
  const auto it = by_capture_.find(key{stream, capture});
  return it == by_capture_.end() ? nullptr : it->second;
}

stream_state& stream_registry::add_capture(std::uint64_t capture, stream_t stream) {
  stream_state& s = add_in_free_slot(key{stream, 0});
  s.capture = capture;
  by_capture_.emplace(key{stream, capture}, &s);
  return s;
}

void stream_registry::alias_capture(std::uint64_t capture, stream_t stream, stream_state& state) {
  by_capture_.emplace(key{stream, capture}, &state);
}

void stream_registry::unkey(const stream_state& state) {
  if (state.capture != 0) {
    // Its own key and those of the captures that joined it; few, and retiring one is rare.
    std::erase_if(by_capture_, [&](const auto& entry) { return entry.second == &state; });
  } else {
    by_key_.erase(key{state.stream, state.thread});
  }
}

stream_state& stream_registry::add_in_free_slot(key k) {
  std::uint32_t slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(by_slot_.size());
    by_slot_.emplace_back();
  }
  auto state = std::make_unique<stream_state>();
  state->stream = k.stream;
  state->thread = k.thread;
  state->slot = slot;
  stream_state* raw = state.get();
  by_slot_[slot] = std::move(state);
  ++size_;
  return *raw;
}

void stream_registry::retire(stream_state& state) {
  if (state.retired) return;
  unkey(state);
  state.retired = true;
  state.record_due = false;
  if (last_ == &state) last_ = nullptr;
}

void stream_registry::recycle(stream_state& state) {
  if (!state.retired) unkey(state);
  if (last_ == &state) last_ = nullptr;
  const std::uint32_t slot = state.slot;
  by_slot_[slot].reset();
  free_slots_.push_back(slot);
  --size_;
}

event_t event_pool::acquire() {
  if (!free_.empty()) {
    event_t event = free_.back();
    free_.pop_back();
    return event;
  }
  event_t event = nullptr;
  const driver_status status = calls_.event_create(&event);
  if (status != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("tidepool: event_create failed on device {}: {}", calls_.device(), to_string(status)));
  }
  return event;
}

void event_pool::destroy_all() noexcept {
  for (event_t event : free_) (void)calls_.event_destroy(event);
  free_.clear();
}

}  // namespace tidepool::detail
