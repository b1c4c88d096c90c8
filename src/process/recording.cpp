// process.hpp's recording calls and TIDEPOOL_RECORD, over the recorder (recorder.hpp).
#include <cstdlib>

#include <fmt/format.h>

#include "process/process_state.hpp"
#include "process/recorder.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

namespace tidepool {

namespace detail {

void start_recording_from_environment(const std::vector<pool*>& pools) {
  const char* path = std::getenv("TIDEPOOL_RECORD");
  if (path == nullptr || *path == '\0') return;
  try {
    recorder::instance().start(path, recording_options{}, pools);
  } catch (const error& e) {
    throw error(e.code(), fmt::format("TIDEPOOL_RECORD={}: {}", path, e.what()));
  }
}

}  // namespace detail

void start_recording(const std::string& path, const recording_options& options) {
  if (path.empty()) throw error(error_code::invalid_argument, "tidepool: start_recording needs a path");
  auto& state = detail::process();
  std::lock_guard lock(state.mutex);
  detail::recorder::instance().start(path, options, existing_pools());
}

void stop_recording() {
  auto& state = detail::process();
  std::lock_guard lock(state.mutex);
  detail::recorder::instance().stop(existing_pools());
}

std::string recording_path() { return detail::recorder::instance().path(); }

std::vector<recorded_event> recent_events(int device) { return detail::recorder::instance().recent(device); }

}  // namespace tidepool
