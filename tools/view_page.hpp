// tools/view_page.hpp: the page `tidepool view` writes: one self-contained HTML file (inline CSS,
// JavaScript and SVG; nothing fetched) with, per trace, live and held memory over the replay for
// every allocator, driver calls over the replay, the replay table and, with several passes, the
// passes one by one. The numbers come from the same JSON `tidepool replay --json` prints,
// embedded in the page, so the page and --json agree by construction; the charts come from the
// replay engine's samples.
#pragma once

#include <string>
#include <vector>

#include "replay/replay_engine.hpp"
#include "replay/trace.hpp"

namespace tidepool::cli {

/// One trace of the page: its own figures and every allocator's replay (with samples).
struct view_trace {
  std::string name;
  bool truncated = false;
  replay::trace_summary summary;
  std::vector<replay::replay_result> results;
};

/// The whole page.
[[nodiscard]] std::string render_view_page(const std::vector<view_trace>& traces, const std::string& version);

}  // namespace tidepool::cli
