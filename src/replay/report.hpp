// replay/report.hpp: the replay results as a text table (one per trace, tidepool first) and as
// one JSON array (one object per trace and allocator).
#pragma once

#include <string>
#include <vector>

#include "replay/replay_engine.hpp"
#include "replay/trace.hpp"

namespace tidepool::replay {

/// Bytes in the unit that reads best: "512 B", "36.0 KiB", "1.20 MiB", "14.24 GiB".
[[nodiscard]] std::string format_bytes(std::size_t bytes);

/// The table of one trace: a heading with the trace's own figures, then one row per allocator in
/// the order given (put tidepool first).
[[nodiscard]] std::string format_table(const trace_summary& summary, const std::vector<replay_result>& results);

/// The goals tidepool must reach on a trace (issue 15), checked against the results of the same
/// trace: peak held / peak live <= 1.03 and no more than expandable segments' (over every pass);
/// first-pass driver time no more than expandable segments'; with three passes or more, no driver
/// call after the second pass; held after release <= bytes live at the end rounded up to 2 MiB,
/// plus 2%. Empty when there is no tidepool result; the expandable comparisons are left out
/// when there is no expandable result.
[[nodiscard]] std::string format_goals(const std::vector<replay_result>& results);

/// One JSON array with an object per result, keys: trace, allocator, device, operations, failures,
/// peak_live_bytes, peak_held_bytes, held_ratio, held_end_bytes, held_after_release_bytes,
/// live_end_bytes, live_end_allocations, driver_calls, driver_us, ns_per_op, process_used_end_bytes,
/// process_used_after_release_bytes (null where unknown), released_bytes (what release() said it
/// returned), cached_end_bytes, largest_free_end_bytes, releasable_end_bytes (before the release;
/// null for allocators that cannot describe themselves: all but tidepool), passes (one object per pass: peak_live_bytes,
/// peak_held_bytes, held_ratio, driver_calls, driver_us, driver_by_kind: {kind: {calls, us}} for each
/// call that moves memory, e.g. "mem_create"), first_pass and steady_state (the same keys;
/// the steady state is the worst pass after the first, or the first when there is one).
[[nodiscard]] std::string format_json(const std::vector<replay_result>& results);

}  // namespace tidepool::replay
