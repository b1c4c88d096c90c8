// Streams, events and the logical clock of the simulated GPU.
//
// Every (device, stream) has a tail: the logical time its queued work completes. launch() queues
// work after the tail; an event captures the tail when recorded and has completed once the clock
// reaches it; waiting and synchronizing move tails and the clock forward. Nothing runs by itself:
// the clock moves only through advance(), run_until_idle() and the synchronizing calls, so event
// completion in tests is deterministic. The default stream (nullptr, or CU_STREAM_LEGACY) is one
// more stream per device (its legacy implicit synchronization with other streams is not modelled);
// CU_STREAM_PER_THREAD names the calling thread's own stream, as in CUDA.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "device/sim/cost_model.hpp"
#include "device/sim/sim_state.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/sim.hpp"

namespace tidepool {
namespace {

// Pointers standing for streams and events: tokens, never dereferenced.
stream_t as_stream(std::uintptr_t token) { return reinterpret_cast<stream_t>(token); }
event_t as_event(std::uintptr_t token) { return reinterpret_cast<event_t>(token); }

double cost_of(driver_call call) { return detail::sim_call_cost_us(call, 0); }

// The event `event` if it exists; events may be waited on from any device.
detail::sim_event* find_event(detail::sim_state& state, event_t event) {
  const auto found = state.events.find(event);
  return found == state.events.end() ? nullptr : &found->second;
}

// The event `event` if it belongs to `device`.
detail::sim_event* find_event_on(detail::sim_state& state, int device, event_t event) {
  detail::sim_event* found = find_event(state, event);
  return found != nullptr && found->device == device ? found : nullptr;
}

}  // namespace

driver_status sim_driver::stream_create(int device, stream_t* out) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::stream_create, cost_of(driver_call::stream_create), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  if (out == nullptr) return driver_status::invalid_value;
  detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  stream_t stream = nullptr;
  if (state.config.reuse_stream_handles && !target.destroyed_streams.empty()) {
    stream = target.destroyed_streams.back();
    target.destroyed_streams.pop_back();
  } else {
    stream = as_stream(state.make_token(device));
  }
  // A new stream starts idle, whatever the handle's last owner left queued (that work still holds
  // the device busy until it completes).
  target.stream_tails.emplace(stream, 0.0);
  *out = stream;
  return driver_status::success;
}

driver_status sim_driver::stream_destroy(int device, stream_t stream) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::stream_destroy, cost_of(driver_call::stream_destroy), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  // Work already queued still completes (the device's busy time keeps it); only the name goes.
  detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  if (target.stream_tails.erase(stream) != 1) return driver_status::invalid_value;
  if (state.config.reuse_stream_handles) target.destroyed_streams.push_back(stream);
  return driver_status::success;
}

bool sim_driver::stream_on_device(stream_t stream, int device) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  if (!state.valid_device(device)) return false;
  return state.stream_tail(state.devices[static_cast<std::size_t>(device)], stream) != nullptr;
}

driver_status sim_driver::event_create(int device, event_t* out) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::event_create, cost_of(driver_call::event_create), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  if (out == nullptr) return driver_status::invalid_value;
  const event_t event = as_event(state.make_token(device));
  state.events.emplace(event, detail::sim_event{device, 0.0, false});
  *out = event;
  return driver_status::success;
}

driver_status sim_driver::event_destroy(int device, event_t event) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::event_destroy, cost_of(driver_call::event_destroy), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  if (find_event_on(state, device, event) == nullptr) return driver_status::invalid_value;
  state.events.erase(event);
  return driver_status::success;
}

driver_status sim_driver::event_record(int device, event_t event, stream_t stream) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::event_record, cost_of(driver_call::event_record), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  detail::sim_event* recorded = find_event_on(state, device, event);
  const double* tail = state.stream_tail(state.devices[static_cast<std::size_t>(device)], stream);
  if (recorded == nullptr || tail == nullptr) return driver_status::invalid_value;
  // The event completes when the work queued so far on the stream does (at once on an idle one).
  recorded->completes_at = std::max(state.now, *tail);
  recorded->recorded_in_capture = state.capturing_streams.count({device, stream}) != 0;
  if (recorded->recorded_in_capture) ++state.captured_event_records;
  return driver_status::success;
}

driver_status sim_driver::event_query(int device, event_t event) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::event_query, cost_of(driver_call::event_query), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  const detail::sim_event* queried = find_event_on(state, device, event);
  if (queried == nullptr) return driver_status::invalid_value;
  // CUDA refuses a query of an event last recorded inside a capture.
  if (queried->recorded_in_capture) return driver_status::error;
  return queried->completes_at <= state.now ? driver_status::success : driver_status::not_ready;
}

driver_status sim_driver::event_synchronize(int device, event_t event) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::event_synchronize, cost_of(driver_call::event_synchronize), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  const detail::sim_event* awaited = find_event_on(state, device, event);
  if (awaited == nullptr) return driver_status::invalid_value;
  if (awaited->recorded_in_capture) return driver_status::error;
  state.now = std::max(state.now, awaited->completes_at);
  return driver_status::success;
}

driver_status sim_driver::stream_wait_event(int device, stream_t stream, event_t event) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::stream_wait_event, cost_of(driver_call::stream_wait_event), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  // The event may belong to another device: cross-device waits are allowed, as in CUDA.
  const detail::sim_event* awaited = find_event(state, event);
  detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  double* tail = state.stream_tail(target, stream);
  if (awaited == nullptr || tail == nullptr) return driver_status::invalid_value;
  *tail = std::max(*tail, awaited->completes_at);
  target.busy_until = std::max(target.busy_until, *tail);
  return driver_status::success;
}

driver_status sim_driver::stream_synchronize(int device, stream_t stream) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::stream_synchronize, cost_of(driver_call::stream_synchronize), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  const double* tail = state.stream_tail(state.devices[static_cast<std::size_t>(device)], stream);
  if (tail == nullptr) return driver_status::invalid_value;
  state.now = std::max(state.now, *tail);
  return driver_status::success;
}

driver_status sim_driver::device_synchronize(int device) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  const auto status = state.begin_call(driver_call::device_synchronize, cost_of(driver_call::device_synchronize), device,
                                       detail::call_needs::context);
  if (status != driver_status::success) return status;
  state.now = std::max(state.now, state.devices[static_cast<std::size_t>(device)].busy_until);
  return driver_status::success;
}

void sim_driver::launch(int device, stream_t stream, double duration_us, device_address address, std::size_t bytes) {
  std::lock_guard lock(state_->mutex);
  detail::sim_state& state = *state_;
  if (!state.valid_device(device)) {
    throw error(error_code::invalid_device, fmt::format("sim launch: device {} does not exist", device));
  }
  detail::sim_device& target = state.devices[static_cast<std::size_t>(device)];
  if (!target.context) {
    throw error(error_code::driver_failure, fmt::format("sim launch: device {} has no context", device));
  }
  double* tail = state.stream_tail(target, stream);
  if (tail == nullptr) {
    throw error(error_code::invalid_stream,
                fmt::format("sim launch: stream {} is not a stream of device {}", static_cast<void*>(stream), device));
  }
  if (!(duration_us >= 0) || !std::isfinite(duration_us)) {
    throw error(error_code::invalid_argument, fmt::format("sim launch: duration {} us is not a finite time >= 0", duration_us));
  }
  if (address + bytes < address) {
    throw error(error_code::invalid_argument,
                fmt::format("sim launch: range of {} bytes at {:#x} wraps around", bytes, address));
  }
  // Captured into a graph, not run.
  if (state.capturing_streams.count({device, stream}) != 0) return;
  *tail = std::max(state.now, *tail) + duration_us;
  target.busy_until = std::max(target.busy_until, *tail);
  // Work on memory that is not mapped (a sleeping tag's, a freed handle's) faults on a GPU
  // (an illegal address): counted, for tests to see.
  if (bytes > 0 && !detail::sim_state::wholly_mapped(target, address, bytes)) state.unmapped_accesses += 1;
  if (bytes > 0) {
    // Keep the record short: completed work can no longer make an unmap unsafe.
    constexpr std::size_t prune_above = 1024;
    if (target.queued_work.size() > prune_above) {
      std::erase_if(target.queued_work, [&](const detail::sim_queued_work& work) { return work.completes_at <= state.now; });
    }
    target.queued_work.push_back({*tail, address, bytes});
  }
}

double sim_driver::now() const {
  std::lock_guard lock(state_->mutex);
  return state_->now;
}

void sim_driver::advance(double microseconds) {
  if (!(microseconds >= 0) || !std::isfinite(microseconds)) {
    throw error(error_code::invalid_argument,
                fmt::format("sim advance: {} us is not a finite time >= 0", microseconds));
  }
  std::lock_guard lock(state_->mutex);
  state_->now += microseconds;
}

void sim_driver::run_until_idle() {
  std::lock_guard lock(state_->mutex);
  for (const detail::sim_device& device : state_->devices) state_->now = std::max(state_->now, device.busy_until);
}

}  // namespace tidepool
