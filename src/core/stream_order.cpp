// Stream ordering: the stream registry and the event pool.
#include "core/stream_order.hpp"

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::detail {

stream_state& stream_registry::add(stream_t stream) {
  auto state = std::make_unique<stream_state>();
  state->stream = stream;
  state->slot = static_cast<std::uint32_t>(states_.size()) + 1;
  stream_state* raw = state.get();
  states_.push_back(std::move(state));
  by_stream_.emplace(stream, raw);
  last_ = raw;
  return *raw;
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
