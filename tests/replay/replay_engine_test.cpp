// Replay end to end on small traces: the figures of each allocator, failures counted not thrown,
// allocations live at the end left allocated, and the JSON report's keys.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "baseline_fixture.hpp"
#include "replay/replay_engine.hpp"
#include "replay/report.hpp"
#include "replay/trace_reader.hpp"
#include "temp_file.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::replay::testing {
namespace {

// 100 MiB of scratch, freed; a 30 MiB array carved while nothing else is live; a 36 KiB array
// left live at the end.
trace small_trace() {
  temp_file file(".csv");
  file.write(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "0,00:00:00.000001,allocate,0x1000000,104857600,0x0\n"
      "0,00:00:00.000002,free,0x1000000,104857600,0x0\n"
      "0,00:00:00.000003,allocate,0x2000000,31457280,0x0\n"
      "0,00:00:00.000004,allocate,0x3000000,36864,0x0\n"
      "0,00:00:00.000005,free,0x2000000,31457280,0x0\n");
  return read_trace(file.path());
}

TEST(ReplayEngine, MeasuresEachBaselineOnASmallTrace) {
  const trace t = small_trace();
  const replay_result caching = replay_trace(t, "caching", std::make_shared<sim_driver>());
  EXPECT_EQ(caching.operations, 5u);
  EXPECT_EQ(caching.peak_live_bytes, 100 * MiB);
  EXPECT_EQ(caching.live_end_bytes, 36 * KiB);
  EXPECT_EQ(caching.live_end_allocations, 1u);
  EXPECT_EQ(caching.peak_held_bytes, 102 * MiB);      // the 100 MiB segment + a 2 MiB small one
  EXPECT_EQ(caching.held_end_bytes, 102 * MiB);       // the 36 KiB array is left allocated
  EXPECT_EQ(caching.held_after_release_bytes, 2 * MiB);
  EXPECT_EQ(caching.driver_calls, 3u);                // two cudaMalloc, one cudaFree
  EXPECT_GT(caching.driver_us, 0.0);
  EXPECT_DOUBLE_EQ(caching.held_ratio(), 1.02);
  EXPECT_EQ(caching.own_held_end_bytes, caching.held_end_bytes);

  const replay_result exact = replay_trace(t, "exact", std::make_shared<sim_driver>());
  EXPECT_EQ(exact.peak_held_bytes, 100 * MiB);
  EXPECT_EQ(exact.held_end_bytes, 2 * MiB);  // the 36 KiB array holds its 2 MiB page alone
  EXPECT_EQ(exact.held_after_release_bytes, 2 * MiB);
  EXPECT_EQ(exact.driver_calls, 5u);

  const replay_result expandable = replay_trace(t, "expandable", std::make_shared<sim_driver>());
  EXPECT_EQ(expandable.peak_held_bytes, 102 * MiB);  // five 20 MiB pages and one 2 MiB page
  EXPECT_EQ(expandable.held_after_release_bytes, 2 * MiB);
}

TEST(ReplayEngine, CountsTheGranulesThatBlocksLiveAtTheEndTouch) {
  temp_file file(".csv");
  file.write(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "0,00:00:00.000001,allocate,0x1000000,3145728,0x0\n"
      "0,00:00:00.000002,allocate,0x2000000,36864,0x0\n"
      "0,00:00:00.000003,allocate,0x3000000,36864,0x0\n");
  const trace t = read_trace(file.path());
  // 3 MiB at a granule's start touches two granules; cudaMalloc (as the device packs small
  // allocations) and the caching allocator's 2 MiB segment each put both small arrays in one.
  for (const std::string name : {"exact", "caching", "tidepool"}) {
    const replay_result r = replay_trace(t, name, std::make_shared<sim_driver>());
    EXPECT_EQ(r.live_end_granule_bytes, 6 * MiB) << name;
    EXPECT_LE(r.live_end_granule_bytes, r.held_after_release_bytes) << name;
  }
}

TEST(ReplayEngine, CountsAFailedAllocationAndSkipsItsFree) {
  temp_file file(".csv");
  file.write(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "0,0.1,allocate,0x1,1048576,0x0\n"
      "0,0.2,allocate,0x2,209715200,0x0\n"
      "0,0.3,allocate failure,0x0,999,0x0\n"
      "0,0.4,free,0x2,209715200,0x0\n"
      "0,0.5,free,0x1,1048576,0x0\n");
  const trace t = read_trace(file.path());
  for (const std::string name : {"caching", "expandable", "cupy", "async", "exact"}) {
    auto sim = std::make_shared<sim_driver>();
    sim->set_capacity_limit(0, 100 * MiB);
    const replay_result r = replay_trace(t, name, sim);
    EXPECT_EQ(r.failures, 1u) << name;
    EXPECT_EQ(r.recorded_failures, 1u) << name;
    EXPECT_EQ(r.operations, 3u) << name;  // two allocations tried, one free
    EXPECT_EQ(r.peak_live_bytes, MiB) << name;
    EXPECT_EQ(r.live_end_bytes, 0u) << name;
    // The first failure says where and what was held: the 200 MiB row, the second, in pass 1.
    ASSERT_TRUE(r.first_failure.has_value()) << name;
    EXPECT_EQ(r.first_failure->pass, 1u) << name;
    EXPECT_EQ(r.first_failure->row, 2u) << name;
    EXPECT_EQ(r.first_failure->bytes, 200 * MiB) << name;
    EXPECT_EQ(r.first_failure->live_bytes, MiB) << name;
    EXPECT_GE(r.first_failure->held_bytes, MiB) << name;
    EXPECT_LE(r.first_failure->held_bytes, 100 * MiB) << name;
  }
  auto sim = std::make_shared<sim_driver>();
  sim->set_capacity_limit(0, 400 * MiB);
  EXPECT_FALSE(replay_trace(t, "tidepool", sim).first_failure.has_value()) << "nothing failed";
}

TEST(ReplayEngine, GivesStreamsOfTheTraceRealStreams) {
  temp_file file(".csv");
  file.write(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "0,0.1,allocate,0x1,52428800,0x7f01\n"
      "0,0.2,free,0x1,52428800,0x7f01\n"
      "0,0.3,allocate,0x2,52428800,0x7f02\n");
  const replay_result r = replay_trace(read_trace(file.path()), "caching", std::make_shared<sim_driver>());
  EXPECT_EQ(r.peak_held_bytes, 100 * MiB);  // a block freed on one stream is not reused on another
}

TEST(ReplayEngine, ReportsUnknownAllocatorsByName) {
  try {
    (void)replay_trace(small_trace(), "jemalloc", std::make_shared<sim_driver>());
    FAIL() << "no error";
  } catch (const tidepool::error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown allocator \"jemalloc\""), std::string::npos);
  }
}

TEST(ReplayReport, JsonHasOneObjectPerTraceAndAllocatorWithEveryKey) {
  const trace t = small_trace();
  std::vector<replay_result> results;
  for (const std::string name : {"caching", "cupy"}) results.push_back(replay_trace(t, name, std::make_shared<sim_driver>()));
  const nlohmann::json json = nlohmann::json::parse(format_json(results));
  ASSERT_TRUE(json.is_array());
  ASSERT_EQ(json.size(), 2u);
  for (const char* key : {"trace", "allocator", "peak_live_bytes", "peak_held_bytes", "held_end_bytes",
                          "held_after_release_bytes", "live_end_granule_bytes", "driver_calls", "driver_us", "ns_per_op"}) {
    EXPECT_TRUE(json[0].contains(key)) << key;
  }
  EXPECT_EQ(json[0]["trace"], t.name);
  EXPECT_EQ(json[0]["allocator"], "caching");
  EXPECT_EQ(json[1]["allocator"], "cupy");
  EXPECT_EQ(json[0]["peak_held_bytes"].get<std::size_t>(), 102 * MiB);
  EXPECT_EQ(json[0]["held_after_release_bytes"].get<std::size_t>(), 2 * MiB);
}

TEST(ReplayReport, BreaksEachPassesDriverCallsIntoKinds) {
  const trace t = small_trace();
  const replay_result r = replay_trace(t, "expandable", std::make_shared<sim_driver>());
  const nlohmann::json json = nlohmann::json::parse(format_json({r}));
  const nlohmann::json& kinds = json[0]["first_pass"]["driver_by_kind"];
  std::uint64_t calls = 0;
  double us = 0;
  for (const auto& [name, k] : kinds.items()) {
    calls += k["calls"].get<std::uint64_t>();
    us += k["us"].get<double>();
  }
  // Every call of the pass is in one kind, and an expandable segment grows by create, map, set access.
  EXPECT_EQ(calls, json[0]["first_pass"]["driver_calls"].get<std::uint64_t>());
  EXPECT_NEAR(us, json[0]["first_pass"]["driver_us"].get<double>(), 1e-6);
  EXPECT_GT(kinds["mem_create"]["calls"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(kinds["mem_create"]["calls"], kinds["mem_map"]["calls"]);
  EXPECT_EQ(kinds["mem_map"]["calls"], kinds["mem_set_access"]["calls"]);
  const std::string table = format_table(summarize(t), {r});
  const std::size_t line = table.find("expandable first-pass driver calls: ");
  ASSERT_NE(line, std::string::npos) << table;
  EXPECT_NE(table.find(fmt::format("mem_create {} (", kinds["mem_create"]["calls"].get<std::uint64_t>()), line),
            std::string::npos)
      << table;
}

TEST(ReplayReport, GoalsCompareTidepoolWithTheBoundsOfTheTrace) {
  auto pass = [](std::size_t live, std::size_t held, std::uint64_t calls, double us) {
    pass_result p;
    p.peak_live_bytes = live;
    p.peak_held_bytes = held;
    p.driver_calls = calls;
    p.driver_us = us;
    return p;
  };
  replay_result pool;
  pool.allocator = "tidepool";
  pool.peak_live_bytes = 100 * MiB;
  pool.peak_held_bytes = 104 * MiB;  // 1.04
  pool.live_end_bytes = 3 * MiB;     // rounded up: 4 MiB, +2%: 4.08 MiB
  pool.held_after_release_bytes = 6 * MiB;
  pool.live_end_granule_bytes = 6 * MiB;  // its live blocks touch three granules: within 6.12 MiB
  pool.passes = {pass(100 * MiB, 104 * MiB, 10, 100), pass(100 * MiB, 104 * MiB, 3, 30),
                 pass(100 * MiB, 104 * MiB, 0, 0)};
  replay_result expandable;
  expandable.allocator = "expandable";
  expandable.peak_live_bytes = 100 * MiB;
  expandable.peak_held_bytes = 105 * MiB;
  expandable.held_after_release_bytes = 8 * MiB;
  expandable.passes = {pass(100 * MiB, 105 * MiB, 20, 200), pass(100 * MiB, 105 * MiB, 0, 0),
                       pass(100 * MiB, 105 * MiB, 0, 0)};
  const std::string goals = format_goals({pool, expandable});
  EXPECT_NE(goals.find("1.040 <= 1.03: NOT met"), std::string::npos) << goals;
  EXPECT_NE(goals.find("<= expandable's 1.050 (every pass): met"), std::string::npos) << goals;
  EXPECT_NE(goals.find("first-pass driver time 0.1 ms <= expandable's 0.2 ms: met"), std::string::npos) << goals;
  EXPECT_NE(goals.find("driver calls after the second pass 0: met"), std::string::npos) << goals;
  EXPECT_NE(goals.find("after release 6.00 MiB <= 4.08 MiB (live at end in 2 MiB pages, +2%): NOT met"),
            std::string::npos)
      << goals;
  EXPECT_EQ(format_goals({expandable}), "");

  // The same verdicts as values, and over several traces.
  pool.trace = "loop.csv.gz";
  const std::optional<goal_verdicts> v = check_goals({pool, expandable});
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->held_within_1_03);
  EXPECT_EQ(v->not_above_expandable, std::optional<bool>(true));
  EXPECT_EQ(v->first_pass_driver_time, std::optional<bool>(true));
  EXPECT_EQ(v->no_calls_after_pass_two, std::optional<bool>(true));
  EXPECT_FALSE(v->after_release_within_bound);
  EXPECT_TRUE(v->after_release_within_layout);
  EXPECT_EQ(v->driver_time_ratio, std::optional<double>(0.5));      // 100 us against 200
  EXPECT_EQ(v->after_release_ratio, std::optional<double>(0.75));   // 6 MiB against 8
  EXPECT_EQ(format_goals_brief(*v),
            "loop.csv.gz: tidepool 1.040 first pass, 1.040 worst pass; expandable 1.050; NOT met: <= 1.03, after release\n");
  EXPECT_FALSE(check_goals({expandable}).has_value());

  // A second trace where tidepool holds more than expandable segments, replayed twice only (no
  // late-call verdict) and with no expandable result beside a third.
  replay_result above = pool;
  above.trace = "server.csv.gz";
  above.peak_held_bytes = 112 * MiB;
  above.held_after_release_bytes = 4 * MiB;
  above.live_end_granule_bytes = 2 * MiB;  // one granule live: 4 MiB is a handle's, not the layout's
  above.passes = {pass(100 * MiB, 110 * MiB, 10, 300), pass(100 * MiB, 112 * MiB, 1, 1)};
  const std::optional<goal_verdicts> w = check_goals({above, expandable});
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->not_above_expandable, std::optional<bool>(false));
  EXPECT_EQ(w->first_pass_driver_time, std::optional<bool>(false));
  EXPECT_FALSE(w->no_calls_after_pass_two.has_value());
  EXPECT_FALSE(w->after_release_within_layout);
  EXPECT_EQ(format_goals_brief(*w), "server.csv.gz: tidepool 1.100 first pass, 1.120 worst pass; expandable 1.050; "
                                    "NOT met: <= 1.03, <= expandable, first-pass driver time\n");
  const std::optional<goal_verdicts> alone = check_goals({pool});
  ASSERT_TRUE(alone.has_value());
  EXPECT_FALSE(alone->expandable_ratio.has_value());
  EXPECT_FALSE(alone->driver_time_ratio.has_value());
  EXPECT_FALSE(alone->after_release_ratio.has_value());

  goal_tally tally;
  tally.add(*v);
  tally.add(*w);
  tally.add(*alone);
  EXPECT_EQ(tally.traces, 3u);
  EXPECT_EQ(tally.compared_with_expandable, 2u);
  EXPECT_EQ(tally.not_above_expandable, 1u);
  EXPECT_EQ(tally.with_three_passes, 2u);
  EXPECT_EQ(tally.no_calls_after_pass_two, 2u);
  EXPECT_EQ(tally.after_release_within_bound, 1u);
  EXPECT_EQ(tally.after_release_within_layout, 2u);
  EXPECT_NEAR(tally.worst_above_expandable, 0.07, 1e-9);
  EXPECT_EQ(tally.worst_trace, "server.csv.gz");
  const std::string text = format_goal_tally(tally);
  EXPECT_NE(text.find("over 3 traces"), std::string::npos) << text;
  EXPECT_NE(text.find("<= 1.03: met on 0 of 3"), std::string::npos) << text;
  EXPECT_NE(text.find("no more than expandable segments: met on 1 of 2 (most above: +0.070 on server.csv.gz)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("no driver call after the second pass: met on 2 of 2"), std::string::npos) << text;
  EXPECT_NE(text.find("in 2 MiB pages + 2%: met on 1 of 3"), std::string::npos) << text;
  EXPECT_NE(text.find("granules its blocks live at end touch + 2%: met on 2 of 3"), std::string::npos) << text;
  // Geometric means over the two traces compared: worst pass sqrt(1.04/1.05 * 1.12/1.05), driver
  // time sqrt(0.5 * 1.5), after release sqrt(0.75 * 0.5).
  EXPECT_NEAR(tally.held_over_expandable.value(), std::sqrt(1.04 / 1.05 * 1.12 / 1.05), 1e-12);
  EXPECT_NEAR(tally.driver_time_over_expandable.value(), std::sqrt(0.75), 1e-12);
  EXPECT_NEAR(tally.after_release_over_expandable.value(), std::sqrt(0.375), 1e-12);
  EXPECT_EQ(tally.after_release_not_above_expandable, 2u);
  EXPECT_NE(text.find("held after release no more than expandable segments': met on 2 of 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("geometric mean: worst pass 1.0279x (2 traces), first-pass driver time 0.87x (2), "
                      "held after release 0.612x (2)"),
            std::string::npos)
      << text;
  EXPECT_EQ(goal_tally{}.held_over_expandable.value(), 1.0);
  // Nothing failed and no call came after pass 2: the tally says nothing of either.
  EXPECT_EQ(text.find("a failed allocation"), std::string::npos) << text;
  EXPECT_EQ(text.find("summed over"), std::string::npos) << text;

  // On a device too small (`replay --capacity`): tidepool failed 3 allocations and called the
  // driver 7 times in pass 3, expandable segments failed none and called 11 times.
  replay_result tight = pool;
  tight.trace = "tight.csv.gz";
  tight.failures = 3;
  tight.passes.back().driver_calls = 7;
  replay_result tight_expandable = expandable;
  tight_expandable.passes.back().driver_calls = 11;
  const std::optional<goal_verdicts> t = check_goals({tight, tight_expandable});
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->failures, 3u);
  EXPECT_EQ(t->expandable_failures, std::optional<std::uint64_t>(0));
  EXPECT_EQ(t->late_calls, std::optional<std::uint64_t>(7));
  EXPECT_EQ(t->expandable_late_calls, std::optional<std::uint64_t>(11));
  EXPECT_EQ(format_goals_brief(*t), "tight.csv.gz: tidepool 1.040 first pass, 1.040 worst pass; expandable 1.050; "
                                    "failed allocations 3 (expandable 0); NOT met: <= 1.03, no calls after pass 2, "
                                    "after release\n");
  tally.add(*t);
  const std::string tight_text = format_goal_tally(tally);
  EXPECT_NE(tight_text.find("a failed allocation: tidepool on 1 of 4, expandable segments on 0 of 3"),
            std::string::npos)
      << tight_text;
  EXPECT_NE(tight_text.find("driver calls after the second pass, summed over 2 traces: tidepool 7, expandable "
                            "segments 11"),
            std::string::npos)
      << tight_text;
  // And what one run of each makes, over the same two traces: 10 + 10 against 20 + 20.
  EXPECT_EQ(t->first_calls, 10u);
  EXPECT_EQ(t->expandable_first_calls, std::optional<std::uint64_t>(20));
  EXPECT_NE(tight_text.find("driver calls in the first pass, summed over 2 traces: tidepool 20, expandable "
                            "segments 40"),
            std::string::npos)
      << tight_text;
}

TEST(ReplayReport, TableSaysLiveAllocationsAreLeftAllocated) {
  const trace t = small_trace();
  const std::string table = format_table(summarize(t), {replay_trace(t, "caching", std::make_shared<sim_driver>())});
  EXPECT_NE(table.find("left allocated"), std::string::npos);
  EXPECT_NE(table.find("caching"), std::string::npos);
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(14 * MiB + 256 * KiB), "14.25 MiB");
}

}  // namespace
}  // namespace tidepool::replay::testing
