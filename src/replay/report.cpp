// Formatting replay results: aligned text for people, JSON for scripts.
#include "replay/report.hpp"

#include <array>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tidepool::replay {

std::string format_bytes(std::size_t bytes) {
  constexpr std::array<const char*, 4> units = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  if (value >= 100) return fmt::format("{:.1f} {}", value, units[unit]);
  return fmt::format("{:.2f} {}", value, units[unit]);
}

namespace {
// The calls that move memory (tidepool::moves_memory), in the order a handle's life makes them:
// the kinds a report breaks driver calls into.
constexpr std::array<driver_call, 9> memory_kinds = {
    driver_call::address_reserve, driver_call::mem_create, driver_call::mem_map,    driver_call::mem_set_access,
    driver_call::mem_unmap,       driver_call::mem_release, driver_call::address_free, driver_call::mem_alloc,
    driver_call::mem_free};
constexpr bool lists_every_memory_call() {
  std::size_t moving = 0;
  for (std::size_t k = 0; k < driver_call_kinds; ++k) moving += moves_memory(static_cast<driver_call>(k)) ? 1 : 0;
  for (driver_call k : memory_kinds) {
    if (!moves_memory(k)) return false;
  }
  return moving == memory_kinds.size();
}
static_assert(lists_every_memory_call(), "memory_kinds must be the calls tidepool::moves_memory names");

// "create 120 (1.5 ms), map 120 (0.2 ms), ...": the kinds with calls.
std::string format_kinds(const driver_call_counts& c) {
  std::string out;
  for (driver_call k : memory_kinds) {
    if (c.of(k) == 0) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {} ({:.1f} ms)", to_string(k), c.of(k), c.us_of(k) / 1000.0);
  }
  return out.empty() ? std::string("none") : out;
}
}  // namespace

std::string format_table(const trace_summary& s, const std::vector<replay_result>& results) {
  std::string out;
  const std::string name = results.empty() ? std::string("(no allocator)") : results.front().trace;
  out += fmt::format("{}: {} allocations, {} frees, peak live {}", name, s.allocations, s.frees,
                     format_bytes(s.peak_live_bytes));
  if (s.failures != 0) out += fmt::format(", {} recorded allocation failures (skipped)", s.failures);
  out += fmt::format(
      "\n  {} allocations ({}) are live at the end and are left allocated: held at end counts them.\n",
      s.live_allocations_at_end, format_bytes(s.live_bytes_at_end));
  const bool nvml = !results.empty() && results.front().process_used_end_bytes.has_value() &&
                    results.front().device != "sim";
  out += fmt::format("  {:<11} {:>11} {:>11} {:>7} {:>11} {:>13} {:>9} {:>11} {:>8} {:>8}{}\n", "allocator",
                     "peak live", "peak held", "ratio", "held end", "after release", "drv calls", "drv time",
                     "ns/op", "failed", nvml ? "  process (NVML) end / after release" : "");
  for (const replay_result& r : results) {
    out += fmt::format("  {:<11} {:>11} {:>11} {:>7.3f} {:>11} {:>13} {:>9} {:>8.1f} ms {:>8.0f} {:>8}", r.allocator,
                       format_bytes(r.peak_live_bytes), format_bytes(r.peak_held_bytes), r.held_ratio(),
                       format_bytes(r.held_end_bytes), format_bytes(r.held_after_release_bytes), r.driver_calls,
                       r.driver_us / 1000.0, r.ns_per_op, r.failures);
    if (nvml) {
      out += fmt::format("  {} / {}", format_bytes(r.process_used_end_bytes.value_or(0)),
                         format_bytes(r.process_used_after_release_bytes.value_or(0)));
    }
    out += '\n';
  }
  for (const replay_result& r : results) {
    if (!r.releasable_end_bytes) continue;
    out += fmt::format("  {} at the end: held {} = in use {} + cached {}; largest free block {}; release() could return "
                       "{}, returned {}\n",
                       r.allocator, format_bytes(r.own_held_end_bytes),
                       format_bytes(r.own_held_end_bytes - r.cached_end_bytes.value_or(0)),
                       format_bytes(r.cached_end_bytes.value_or(0)), format_bytes(r.largest_free_end_bytes.value_or(0)),
                       format_bytes(*r.releasable_end_bytes), format_bytes(r.released_bytes));
  }
  for (const replay_result& r : results) {
    if (!r.first_failure) continue;
    const failure_point& f = *r.first_failure;
    out += fmt::format("  {} first failed allocation: pass {}, row {}: {} asked with {} live and {} held ({} held and "
                       "not live)\n",
                       r.allocator, f.pass, f.row, format_bytes(f.bytes), format_bytes(f.live_bytes),
                       format_bytes(f.held_bytes), format_bytes(f.held_bytes > f.live_bytes ? f.held_bytes - f.live_bytes : 0));
  }
  const bool several = !results.empty() && results.front().passes.size() > 1;
  if (several) {
    out += fmt::format("  {} passes through one allocator; first pass, then the steady state (worst pass after the first):\n",
                       results.front().passes.size());
    out += fmt::format("  {:<11} {:>13} {:>13} {:>13} {:>13} {:>13} {:>13}\n", "allocator", "first ratio",
                       "first calls", "first drv ms", "steady ratio", "steady calls", "steady drv ms");
    for (const replay_result& r : results) {
      const pass_result& first = r.passes.front();
      const pass_result steady = r.steady_state();
      out += fmt::format("  {:<11} {:>13.3f} {:>13} {:>13.1f} {:>13.3f} {:>13} {:>13.1f}\n", r.allocator,
                         first.held_ratio(), first.driver_calls, first.driver_us / 1000.0, steady.held_ratio(),
                         steady.driver_calls, steady.driver_us / 1000.0);
    }
  }
  for (const replay_result& r : results) {
    if (r.passes.empty()) continue;
    out += fmt::format("  {} first-pass driver calls: {}\n", r.allocator, format_kinds(r.passes.front().by_kind));
  }
  return out;
}

namespace {
constexpr std::size_t granule = std::size_t{2} << 20;

const replay_result* result_of(const std::vector<replay_result>& results, const char* allocator) {
  for (const replay_result& r : results) {
    if (r.allocator == allocator) return &r;
  }
  return nullptr;
}

// Driver calls in the passes after the second: a repeated trace must make none.
std::uint64_t late_driver_calls(const replay_result& pool) {
  std::uint64_t calls = 0;
  for (std::size_t i = 2; i < pool.passes.size(); ++i) calls += pool.passes[i].driver_calls;
  return calls;
}

std::size_t after_release_bound(const replay_result& pool) {
  return static_cast<std::size_t>(static_cast<double>((pool.live_end_bytes + granule - 1) / granule * granule) *
                                  1.02);
}
}  // namespace

std::optional<goal_verdicts> check_goals(const std::vector<replay_result>& results) {
  const replay_result* pool = result_of(results, "tidepool");
  const replay_result* expandable = result_of(results, "expandable");
  if (pool == nullptr || pool->peak_live_bytes == 0 || pool->passes.empty()) return std::nullopt;
  goal_verdicts v;
  v.trace = pool->trace;
  v.held_ratio = pool->held_ratio();
  v.first_ratio = pool->passes.front().held_ratio();
  v.held_within_1_03 = v.held_ratio <= 1.03;
  if (expandable != nullptr && !expandable->passes.empty()) {
    const double ours = pool->passes.front().driver_us;
    const double theirs = expandable->passes.front().driver_us;
    v.expandable_ratio = expandable->held_ratio();
    v.not_above_expandable = v.held_ratio <= *v.expandable_ratio + 1e-9;
    v.first_pass_driver_time = ours <= theirs;
    if (ours > 0 && theirs > 0) v.driver_time_ratio = ours / theirs;
    if (pool->held_after_release_bytes != 0 && expandable->held_after_release_bytes != 0) {
      v.after_release_ratio = static_cast<double>(pool->held_after_release_bytes) /
                              static_cast<double>(expandable->held_after_release_bytes);
    }
  }
  v.failures = pool->failures;
  if (expandable != nullptr) v.expandable_failures = expandable->failures;
  v.first_calls = pool->passes.front().driver_calls;
  if (expandable != nullptr && !expandable->passes.empty()) {
    v.expandable_first_calls = expandable->passes.front().driver_calls;
  }
  if (pool->passes.size() > 2) {
    v.late_calls = late_driver_calls(*pool);
    v.no_calls_after_pass_two = *v.late_calls == 0;
    if (expandable != nullptr && expandable->passes.size() > 2) v.expandable_late_calls = late_driver_calls(*expandable);
  }
  v.after_release_within_bound = static_cast<double>(pool->held_after_release_bytes) <=
                                 static_cast<double>(after_release_bound(*pool));
  v.after_release_within_layout = static_cast<double>(pool->held_after_release_bytes) <=
                                  static_cast<double>(pool->live_end_granule_bytes) * 1.02;
  if (pool->held_after_compact_bytes) {
    const auto held = static_cast<double>(*pool->held_after_compact_bytes);
    v.after_compact_within_bound = held <= static_cast<double>(after_release_bound(*pool));
    v.after_compact_within_layout = held <= static_cast<double>(pool->live_end_granule_bytes);
  }
  return v;
}

std::string format_goals(const std::vector<replay_result>& results) {
  const std::optional<goal_verdicts> v = check_goals(results);
  if (!v) return {};
  const replay_result& pool = *result_of(results, "tidepool");
  const replay_result* expandable = result_of(results, "expandable");
  auto verdict = [](bool met) { return met ? "met" : "NOT met"; };
  std::string out =
      fmt::format("  tidepool goals: peak held / peak live {:.3f} <= 1.03: {}", v->held_ratio, verdict(v->held_within_1_03));
  if (v->expandable_ratio) {
    out += fmt::format("; <= expandable's {:.3f} (every pass): {}; first-pass driver time {:.1f} ms <= expandable's {:.1f} ms: {}",
                       *v->expandable_ratio, verdict(*v->not_above_expandable),
                       pool.passes.front().driver_us / 1000.0, expandable->passes.front().driver_us / 1000.0,
                       verdict(*v->first_pass_driver_time));
  }
  if (v->no_calls_after_pass_two) {
    out += fmt::format("; driver calls after the second pass {}: {}", late_driver_calls(pool),
                       verdict(*v->no_calls_after_pass_two));
  } else if (pool.passes.size() == 2) {
    out += fmt::format("; steady-state driver calls {}", pool.steady_state().driver_calls);
  }
  out += fmt::format("; after release {} <= {} (live at end in 2 MiB pages, +2%): {}\n",
                     format_bytes(pool.held_after_release_bytes), format_bytes(after_release_bound(pool)),
                     verdict(v->after_release_within_bound));
  return out;
}

void goal_tally::log_mean::add(double ratio) {
  sum += std::log(ratio);
  ++count;
}

double goal_tally::log_mean::value() const { return count == 0 ? 1.0 : std::exp(sum / count); }

void goal_tally::add(const goal_verdicts& v) {
  ++traces;
  held_within_1_03 += v.held_within_1_03 ? 1 : 0;
  after_release_within_bound += v.after_release_within_bound ? 1 : 0;
  after_release_within_layout += v.after_release_within_layout ? 1 : 0;
  if (v.after_compact_within_bound) {
    ++with_compact;
    after_compact_within_bound += *v.after_compact_within_bound ? 1 : 0;
    after_compact_within_layout += v.after_compact_within_layout.value_or(false) ? 1 : 0;
  }
  if (v.expandable_ratio) {
    ++compared_with_expandable;
    not_above_expandable += *v.not_above_expandable ? 1 : 0;
    first_pass_driver_time += *v.first_pass_driver_time ? 1 : 0;
    const double above = v.held_ratio - *v.expandable_ratio;
    if (above > worst_above_expandable) {
      worst_above_expandable = above;
      worst_trace = v.trace;
    }
    if (*v.expandable_ratio > 0) held_over_expandable.add(v.held_ratio / *v.expandable_ratio);
  }
  if (v.driver_time_ratio) driver_time_over_expandable.add(*v.driver_time_ratio);
  if (v.after_release_ratio) {
    after_release_over_expandable.add(*v.after_release_ratio);
    after_release_not_above_expandable += *v.after_release_ratio <= 1.0 ? 1 : 0;
  }
  if (v.no_calls_after_pass_two) {
    ++with_three_passes;
    no_calls_after_pass_two += *v.no_calls_after_pass_two ? 1 : 0;
  }
  with_failures += v.failures != 0 ? 1 : 0;
  expandable_with_failures += v.expandable_failures.value_or(0) != 0 ? 1 : 0;
  if (v.late_calls && v.expandable_late_calls) {
    ++with_late_calls_of_both;
    late_calls += *v.late_calls;
    expandable_late_calls += *v.expandable_late_calls;
    first_calls += v.first_calls;
    expandable_first_calls += v.expandable_first_calls.value_or(0);
  }
}

std::string format_goals_brief(const goal_verdicts& v) {
  std::vector<const char*> missed;
  if (!v.held_within_1_03) missed.push_back("<= 1.03");
  if (v.not_above_expandable && !*v.not_above_expandable) missed.push_back("<= expandable");
  if (v.first_pass_driver_time && !*v.first_pass_driver_time) missed.push_back("first-pass driver time");
  if (v.no_calls_after_pass_two && !*v.no_calls_after_pass_two) missed.push_back("no calls after pass 2");
  if (!v.after_release_within_bound) missed.push_back("after release");
  std::string out = fmt::format("{}: tidepool {:.3f} first pass, {:.3f} worst pass", v.trace, v.first_ratio, v.held_ratio);
  if (v.expandable_ratio) out += fmt::format("; expandable {:.3f}", *v.expandable_ratio);
  if (v.failures != 0 || v.expandable_failures.value_or(0) != 0) {
    out += fmt::format("; failed allocations {}", v.failures);
    if (v.expandable_failures) out += fmt::format(" (expandable {})", *v.expandable_failures);
  }
  if (missed.empty()) return out + "; every goal met\n";
  std::string list;
  for (const char* goal : missed) list += list.empty() ? goal : fmt::format(", {}", goal);
  return out + fmt::format("; NOT met: {}\n", list);
}

std::string format_goal_tally(const goal_tally& t) {
  std::string out = fmt::format("tidepool's goals over {} traces (each trace's worst pass):\n", t.traces);
  out += fmt::format("  peak held / peak live <= 1.03: met on {} of {}\n", t.held_within_1_03, t.traces);
  if (t.compared_with_expandable != 0) {
    out += fmt::format("  no more than expandable segments: met on {} of {}", t.not_above_expandable,
                       t.compared_with_expandable);
    out += t.worst_trace.empty() ? std::string("\n")
                                 : fmt::format(" (most above: {:+.3f} on {})\n", t.worst_above_expandable, t.worst_trace);
    out += fmt::format("  first-pass driver time no more than expandable segments': met on {} of {}\n",
                       t.first_pass_driver_time, t.compared_with_expandable);
  }
  if (t.with_three_passes != 0) {
    out += fmt::format("  no driver call after the second pass: met on {} of {}\n", t.no_calls_after_pass_two,
                       t.with_three_passes);
  }
  if (t.with_failures != 0 || t.expandable_with_failures != 0) {
    out += fmt::format("  a failed allocation: tidepool on {} of {}", t.with_failures, t.traces);
    if (t.compared_with_expandable != 0) {
      out += fmt::format(", expandable segments on {} of {}", t.expandable_with_failures, t.compared_with_expandable);
    }
    out += "\n";
  }
  if (t.late_calls != 0 || t.expandable_late_calls != 0) {
    out += fmt::format("  driver calls in the first pass, summed over {} traces: tidepool {}, expandable segments {}\n",
                       t.with_late_calls_of_both, t.first_calls, t.expandable_first_calls);
    out += fmt::format("  driver calls after the second pass, summed over {} traces: tidepool {}, expandable segments {}\n",
                       t.with_late_calls_of_both, t.late_calls, t.expandable_late_calls);
  }
  out += fmt::format("  held after release within live at end in 2 MiB pages + 2%: met on {} of {}\n",
                     t.after_release_within_bound, t.traces);
  out += fmt::format("  held after release within the 2 MiB granules its blocks live at end touch + 2%: met on {} of {}\n",
                     t.after_release_within_layout, t.traces);
  if (t.with_compact != 0) {
    out += fmt::format("  held after compact() within live at end in 2 MiB pages + 2%: met on {} of {}\n",
                       t.after_compact_within_bound, t.with_compact);
    out += fmt::format("  held after compact() within the 2 MiB granules its blocks live at end touch: met on {} of {}\n",
                       t.after_compact_within_layout, t.with_compact);
  }
  if (t.after_release_over_expandable.count != 0) {
    out += fmt::format("  held after release no more than expandable segments': met on {} of {}\n",
                       t.after_release_not_above_expandable, t.after_release_over_expandable.count);
  }
  if (t.held_over_expandable.count != 0) {
    out += fmt::format("  over expandable segments, geometric mean: worst pass {:.4f}x ({} traces)",
                       t.held_over_expandable.value(), t.held_over_expandable.count);
    if (t.driver_time_over_expandable.count != 0) {
      out += fmt::format(", first-pass driver time {:.2f}x ({})", t.driver_time_over_expandable.value(),
                         t.driver_time_over_expandable.count);
    }
    if (t.after_release_over_expandable.count != 0) {
      out += fmt::format(", held after release {:.3f}x ({})", t.after_release_over_expandable.value(),
                         t.after_release_over_expandable.count);
    }
    out += "\n";
  }
  return out;
}

std::string format_json(const std::vector<replay_result>& results) {
  nlohmann::json array = nlohmann::json::array();
  for (const replay_result& r : results) {
    nlohmann::json o;
    o["trace"] = r.trace;
    o["allocator"] = r.allocator;
    o["device"] = r.device;
    o["device_capacity_bytes"] = r.device_capacity_bytes;
    o["operations"] = r.operations;
    o["failures"] = r.failures;
    if (r.first_failure) {
      const failure_point& f = *r.first_failure;
      o["first_failure"] = {{"pass", f.pass}, {"row", f.row}, {"bytes", f.bytes}, {"live_bytes", f.live_bytes},
                            {"held_bytes", f.held_bytes}};
    } else {
      o["first_failure"] = nullptr;
    }
    o["peak_live_bytes"] = r.peak_live_bytes;
    o["peak_held_bytes"] = r.peak_held_bytes;
    o["held_ratio"] = r.held_ratio();
    o["held_end_bytes"] = r.held_end_bytes;
    o["held_after_release_bytes"] = r.held_after_release_bytes;
    if (r.held_after_compact_bytes) {
      o["held_after_compact_bytes"] = *r.held_after_compact_bytes;
    } else {
      o["held_after_compact_bytes"] = nullptr;
    }
    o["live_end_bytes"] = r.live_end_bytes;
    o["live_end_allocations"] = r.live_end_allocations;
    o["live_end_granule_bytes"] = r.live_end_granule_bytes;
    o["driver_calls"] = r.driver_calls;
    o["driver_us"] = r.driver_us;
    o["ns_per_op"] = r.ns_per_op;
    o["process_used_end_bytes"] =
        r.process_used_end_bytes ? nlohmann::json(*r.process_used_end_bytes) : nlohmann::json(nullptr);
    o["process_used_after_release_bytes"] = r.process_used_after_release_bytes
                                                ? nlohmann::json(*r.process_used_after_release_bytes)
                                                : nlohmann::json(nullptr);
    auto optional = [](const std::optional<std::size_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    o["released_bytes"] = r.released_bytes;
    o["cached_end_bytes"] = optional(r.cached_end_bytes);
    o["largest_free_end_bytes"] = optional(r.largest_free_end_bytes);
    o["releasable_end_bytes"] = optional(r.releasable_end_bytes);
    auto pass_json = [](const pass_result& p) {
      nlohmann::json j;
      j["peak_live_bytes"] = p.peak_live_bytes;
      j["peak_held_bytes"] = p.peak_held_bytes;
      j["held_ratio"] = p.held_ratio();
      j["driver_calls"] = p.driver_calls;
      j["driver_us"] = p.driver_us;
      nlohmann::json kinds = nlohmann::json::object();
      for (driver_call k : memory_kinds) {
        kinds[std::string(to_string(k))] = {{"calls", p.by_kind.of(k)}, {"us", p.by_kind.us_of(k)}};
      }
      j["driver_by_kind"] = std::move(kinds);
      j["waits"] = p.waits;
      j["gpu_wait_us"] = p.gpu_wait_us;
      return j;
    };
    nlohmann::json passes = nlohmann::json::array();
    for (const pass_result& p : r.passes) passes.push_back(pass_json(p));
    o["passes"] = std::move(passes);
    o["first_pass"] = r.passes.empty() ? nlohmann::json(nullptr) : pass_json(r.passes.front());
    o["steady_state"] = pass_json(r.steady_state());
    array.push_back(std::move(o));
  }
  return array.dump(2) + "\n";
}

}  // namespace tidepool::replay
