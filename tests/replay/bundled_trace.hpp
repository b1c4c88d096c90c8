// A trace of the repository's traces/ folder, read for a test (TIDEPOOL_TRACES_DIR is set by
// tests/replay/CMakeLists.txt), and a skip for the xz traces where the build has no liblzma.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "replay/trace.hpp"
#include "replay/trace_reader.hpp"

namespace tidepool::replay::testing {

/// traces/`name` (e.g. "gpt_vary.csv.gz"), read whole.
inline trace read_bundled_trace(const std::string& name) {
  return read_trace(std::string(TIDEPOOL_TRACES_DIR) + "/" + name);
}

/// Whether this build reads traces/`name`: an xz trace needs liblzma (replay/xz_input.hpp).
inline bool bundled_trace_readable(const std::string& name) {
  return !name.ends_with(".xz") || detail::xz_input::available();
}

}  // namespace tidepool::replay::testing

/// Skips the running test where this build cannot read traces/`name` (an xz trace, no liblzma).
#define TIDEPOOL_SKIP_UNLESS_READABLE(name)                                  \
  if (::tidepool::replay::testing::bundled_trace_readable(name)) {           \
  } else                                                                     \
    GTEST_SKIP() << "this build has no liblzma to read " << (name)
