// CUDA graphs on the simulated GPU: stream capture and graph lifetimes.
//
// begin_capture() puts a stream in capture; join_capture() adds another to the same capture (a
// fork); end_capture() hands back the graph; destroy_graph() stands for the moment the driver
// drops the graph's last reference (the graph and every executable graph made from it destroyed,
// their launches done) and calls the watchers, as CUDA runs a user object's destructor. While a
// stream is captured, launched work is not run and an event recorded on it cannot be queried
// later (CUDA refuses both a query and a wait on such an event).
#include <fmt/format.h>

#include "device/sim/sim_state.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/sim.hpp"

namespace tidepool {
namespace {

bool capturable(stream_t stream) {
  const auto raw = reinterpret_cast<std::uintptr_t>(stream);
  return raw != 0 && raw != detail::legacy_stream_handle;
}

}  // namespace

std::uint64_t sim_driver::begin_capture(int device, stream_t stream) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  if (!state.valid_device(device) || !capturable(stream) ||
      state.stream_tail(state.devices[static_cast<std::size_t>(device)], stream) == nullptr) {
    throw error(error_code::invalid_stream,
                fmt::format("sim begin_capture: stream {} of device {} cannot be captured",
                            fmt::ptr(stream), device));
  }
  if (state.capturing_streams.count({device, stream}) != 0) {
    throw error(error_code::invalid_stream,
                fmt::format("sim begin_capture: stream {} is captured already", fmt::ptr(stream)));
  }
  const std::uintptr_t token = state.make_token(device);
  detail::sim_graph graph;
  graph.capture_id = state.next_capture_id++;
  state.graphs.emplace(token, graph);
  state.capturing_streams.emplace(std::make_pair(device, stream), token);
  state.capture_count.fetch_add(1, std::memory_order_relaxed);
  return graph.capture_id;
}

void sim_driver::join_capture(int device, stream_t stream, stream_t capturing) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto found = state.capturing_streams.find({device, capturing});
  if (found == state.capturing_streams.end() || !capturable(stream) ||
      state.capturing_streams.count({device, stream}) != 0) {
    throw error(error_code::invalid_stream,
                "sim join_capture: no capture to join, or the stream is captured already");
  }
  state.capturing_streams.emplace(std::make_pair(device, stream), found->second);
  state.capture_count.fetch_add(1, std::memory_order_relaxed);
}

void* sim_driver::end_capture(int device, stream_t stream) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto found = state.capturing_streams.find({device, stream});
  if (found == state.capturing_streams.end()) {
    throw error(error_code::invalid_stream,
                fmt::format("sim end_capture: stream {} is not captured", fmt::ptr(stream)));
  }
  const std::uintptr_t token = found->second;
  for (auto it = state.capturing_streams.begin(); it != state.capturing_streams.end();) {
    if (it->second == token) {
      it = state.capturing_streams.erase(it);
      state.capture_count.fetch_sub(1, std::memory_order_relaxed);
    } else {
      ++it;
    }
  }
  state.graphs.at(token).capturing = false;
  return reinterpret_cast<void*>(token);
}

void sim_driver::destroy_graph(void* graph) {
  std::vector<std::pair<graph_gone_fn, void*>> watchers;
  {
    std::lock_guard lock(state_->mutex);
    detail::sim_state& state = *state_;
    const auto found = state.graphs.find(reinterpret_cast<std::uintptr_t>(graph));
    if (found == state.graphs.end() || found->second.capturing) {
      throw error(error_code::invalid_argument,
                  "sim destroy_graph: not a graph whose capture ended");
    }
    watchers = std::move(found->second.watchers);
    state.graphs.erase(found);
  }
  // As CUDA's destructors, with no lock of the driver held.
  for (const auto& [gone, context] : watchers) gone(context);
}

std::uint64_t sim_driver::captured_event_records() const {
  std::lock_guard lock(state_->mutex);
  return state_->captured_event_records;
}

void sim_driver::refuse_graph_watches() {
  std::lock_guard lock(state_->mutex);
  state_->graph_watches_refused = true;
}

driver_status sim_driver::capture_of(int device, stream_t stream, stream_capture* out) {
  *out = stream_capture{};
  if (state_->capture_count.load(std::memory_order_relaxed) == 0 || !capturable(stream))
    return driver_status::success;
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto found = state.capturing_streams.find({device, stream});
  if (found == state.capturing_streams.end()) return driver_status::success;
  out->active = true;
  out->id = state.graphs.at(found->second).capture_id;
  out->graph = reinterpret_cast<void*>(found->second);
  return driver_status::success;
}

driver_status sim_driver::watch_graph(int device, void* graph, graph_gone_fn gone, void* context) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  if (!state.valid_device(device) || gone == nullptr) return driver_status::invalid_value;
  if (state.graph_watches_refused) return driver_status::not_supported;
  const auto found = state.graphs.find(reinterpret_cast<std::uintptr_t>(graph));
  if (found == state.graphs.end()) return driver_status::invalid_value;
  found->second.watchers.emplace_back(gone, context);
  return driver_status::success;
}

}  // namespace tidepool
