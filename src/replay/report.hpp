// replay/report.hpp: the replay results as a text table (one per trace, tidepool first) and as
// one JSON array (one object per trace and allocator).
#pragma once

#include <optional>
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

/// The verdicts format_goals prints, as values. A comparison that cannot be made is unset: the
/// expandable ones without an expandable result, the late calls with fewer than three passes.
struct goal_verdicts {
  std::string trace;
  double held_ratio = 0;                        ///< tidepool's peak held / peak live, worst pass
  double first_ratio = 0;                       ///< the same, first pass
  std::optional<double> expandable_ratio;       ///< expandable segments', worst pass
  bool held_within_1_03 = false;                ///< held_ratio <= 1.03
  std::optional<bool> not_above_expandable;     ///< held_ratio <= expandable_ratio
  std::optional<bool> first_pass_driver_time;   ///< first-pass driver time <= expandable's
  std::optional<bool> no_calls_after_pass_two;  ///< no driver call in pass 3 or later
  bool after_release_within_bound = false;      ///< held after release <= live at end in 2 MiB pages + 2%
  /// held after release <= the granules tidepool's own blocks live at the end touch + 2%: what its
  /// layout allows; the difference from the line above is the layout's, beyond it the handles'
  bool after_release_within_layout = false;
  /// held after compact() <= live at end in 2 MiB pages + 2% (nullopt: no compact figure)
  std::optional<bool> after_compact_within_bound;
  /// held after compact() <= the granules its blocks live at the end touch: all it should hold
  std::optional<bool> after_compact_within_layout;
  std::optional<double> driver_time_ratio;      ///< first-pass driver time over expandable's (both > 0)
  std::optional<double> after_release_ratio;    ///< held after release over expandable's (both > 0)
  std::uint64_t failures = 0;                   ///< tidepool's failed allocations (a device too small)
  std::optional<std::uint64_t> expandable_failures;  ///< expandable segments' failed allocations
  std::optional<std::uint64_t> late_calls;             ///< tidepool's driver calls in pass 3 and later
  std::optional<std::uint64_t> expandable_late_calls;  ///< expandable segments' (both with 3+ passes)
  std::uint64_t first_calls = 0;                        ///< tidepool's driver calls in the first pass
  std::optional<std::uint64_t> expandable_first_calls;  ///< expandable segments'
};

/// format_goals' checks on one trace's results; nullopt when there is no tidepool result (or it
/// saw nothing live).
[[nodiscard]] std::optional<goal_verdicts> check_goals(const std::vector<replay_result>& results);

/// The goals over many traces: on how many each is met, and where tidepool holds most above
/// expandable segments. A figure that holds only on the traces it was tuned on shows here when the
/// traces include workloads it was not (`scripts/main.sh` replays generated ones).
struct goal_tally {
  unsigned traces = 0;
  unsigned held_within_1_03 = 0;
  unsigned compared_with_expandable = 0;  ///< traces with an expandable result
  unsigned not_above_expandable = 0;
  unsigned first_pass_driver_time = 0;
  unsigned with_three_passes = 0;         ///< traces replayed three times or more
  unsigned no_calls_after_pass_two = 0;
  unsigned after_release_within_bound = 0;
  unsigned after_release_within_layout = 0;
  unsigned with_compact = 0;  ///< traces with a figure after compact()
  unsigned after_compact_within_bound = 0;
  unsigned after_compact_within_layout = 0;
  double worst_above_expandable = 0;      ///< largest held_ratio - expandable_ratio (0 if never above)
  std::string worst_trace;                ///< the trace it was measured on
  /// Geometric means of the ratios to expandable segments (worst pass, first-pass driver time,
  /// held after release), kept as sums of logarithms over `count` traces: one figure per goal
  /// that moves when a change helps some traces and hurts others, where a count of traces met
  /// moves only when one crosses the line.
  struct log_mean {
    double sum = 0;
    unsigned count = 0;
    void add(double ratio);
    [[nodiscard]] double value() const;  ///< 1 when empty
  };
  log_mean held_over_expandable;
  log_mean driver_time_over_expandable;
  log_mean after_release_over_expandable;
  unsigned after_release_not_above_expandable = 0;  ///< of after_release_over_expandable.count
  /// On a device too small for some traces (`replay --capacity`): traces where each allocator
  /// failed an allocation, and the driver calls of pass 3 and later summed over the traces both
  /// were replayed on three times or more (the steady state a loop reaches at its capacity), with
  /// the first pass's calls over the same traces (what one run of each program makes).
  unsigned with_failures = 0;
  unsigned expandable_with_failures = 0;  ///< of compared_with_expandable
  std::uint64_t late_calls = 0;
  std::uint64_t expandable_late_calls = 0;
  std::uint64_t first_calls = 0;
  std::uint64_t expandable_first_calls = 0;
  unsigned with_late_calls_of_both = 0;   ///< traces counted in the four sums

  void add(const goal_verdicts& v);
};

/// One line per trace (tidepool's first pass and worst pass beside expandable's, the failed
/// allocations of either when there are any, and the goals missed), for replays of many traces
/// (`tidepool replay --brief`).
[[nodiscard]] std::string format_goals_brief(const goal_verdicts& v);

/// The tally as a few lines: each goal, met on how many traces of how many, and the geometric
/// means of tidepool's figures over expandable segments'; where any allocation failed or any call
/// came after the second pass, those of each allocator too.
[[nodiscard]] std::string format_goal_tally(const goal_tally& tally);

/// One JSON array with an object per result, keys: trace, allocator, device, operations, failures,
/// first_failure (null, or pass, row, bytes, live_bytes and held_bytes of the first),
/// peak_live_bytes, peak_held_bytes, held_ratio, held_end_bytes, held_after_release_bytes,
/// live_end_bytes, live_end_allocations, live_end_granule_bytes, driver_calls, driver_us, ns_per_op, process_used_end_bytes,
/// process_used_after_release_bytes (null where unknown), released_bytes (what release() said it
/// returned), cached_end_bytes, largest_free_end_bytes, releasable_end_bytes (before the release;
/// null for allocators that cannot describe themselves: all but tidepool), passes (one object per pass: peak_live_bytes,
/// peak_held_bytes, held_ratio, driver_calls, driver_us, driver_by_kind: {kind: {calls, us}} for each
/// call that moves memory, e.g. "mem_create"), first_pass and steady_state (the same keys;
/// the steady state is the worst pass after the first, or the first when there is one).
[[nodiscard]] std::string format_json(const std::vector<replay_result>& results);

}  // namespace tidepool::replay
