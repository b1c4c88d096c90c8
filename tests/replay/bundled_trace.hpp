// A trace of the repository's traces/ folder, read for a test (TIDEPOOL_TRACES_DIR is set by
// tests/replay/CMakeLists.txt).
#pragma once

#include <string>

#include "replay/trace.hpp"
#include "replay/trace_reader.hpp"

namespace tidepool::replay::testing {

/// traces/`name` (e.g. "gpt_vary.csv.gz"), read whole.
inline trace read_bundled_trace(const std::string& name) {
  return read_trace(std::string(TIDEPOOL_TRACES_DIR) + "/" + name);
}

}  // namespace tidepool::replay::testing
