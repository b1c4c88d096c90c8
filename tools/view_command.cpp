// tools/view_command.cpp: `tidepool view TRACE... -o report.html`, every trace replayed against
// every allocator with samples of memory and driver calls along the way, written as one page
// (view_page.hpp); it prints what `tidepool replay` prints (or its --json) too.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "device_choice.hpp"
#include "replay/replay_engine.hpp"
#include "replay/report.hpp"
#include "replay/trace_reader.hpp"
#include "tidepool/errors.hpp"
#include "view_page.hpp"

#ifndef TIDEPOOL_VERSION_STRING
#error "TIDEPOOL_VERSION_STRING is defined by tools/CMakeLists.txt"
#endif

namespace tidepool::cli {

namespace {

struct view_settings {
  std::vector<std::string> traces;
  std::string output;
  std::string device = "sim";
  std::vector<std::string> allocators;
  bool json = false;
  unsigned passes = 1;
  double growth_slack = tidepool::pool_options{}.growth_slack;
  std::size_t points = 1500;
};

void run_view(const view_settings& settings) {
  const std::vector<std::string> allocators = chosen_allocators(settings.allocators);
  // Refuse an output that cannot be written before the replays, not after.
  std::ofstream out(settings.output, std::ios::binary | std::ios::trunc);
  if (!out) throw error(error_code::invalid_argument, fmt::format("{}: cannot create the page", settings.output));

  const std::size_t capacity = make_driver(settings.device)->memory_info(0).total;
  std::vector<view_trace> traces;
  std::vector<replay::replay_result> all;
  for (const std::string& path : settings.traces) {
    const replay::trace t = read_trace_to_replay(path, capacity);
    view_trace v;
    v.name = t.name;
    v.truncated = t.truncated;
    v.summary = replay::summarize(t);
    const std::size_t rows = t.events.size() * settings.passes;
    for (const std::string& name : allocators) {
      replay::replay_options options;
      options.passes = settings.passes;
      options.tidepool_options.growth_slack = settings.growth_slack;
      options.sample_every = std::max<std::size_t>(1, (rows + settings.points - 1) / settings.points);
      v.results.push_back(replay::replay_trace(t, name, make_driver(settings.device), options));
    }
    if (!settings.json) fmt::print("{}{}\n", replay::format_table(v.summary, v.results), replay::format_goals(v.results));
    all.insert(all.end(), v.results.begin(), v.results.end());
    traces.push_back(std::move(v));
  }
  out << render_view_page(traces, TIDEPOOL_VERSION_STRING);
  out.close();
  if (!out) throw error(error_code::invalid_argument, fmt::format("{}: cannot write the page", settings.output));
  if (settings.json) {
    fmt::print("{}", replay::format_json(all));
  } else {
    fmt::print("{}report: {} (charts and tables of {} trace(s); open it in a browser)\n",
               replay_notes(settings.device == "sim"), settings.output, traces.size());
  }
}

}  // namespace

void add_view_command(CLI::App& app, int& exit_code) {
  auto settings = std::make_shared<view_settings>();
  auto* command = app.add_subcommand(
      "view", "Replay RMM allocation logs and write one self-contained HTML page of charts and tables");
  command->add_option("traces", settings->traces, "RMM replay logs (CSV, plain or gzip)")->required();
  command->add_option("-o,--output", settings->output, "the page to write (HTML)")->required();
  add_device_and_allocator_options(*command, settings->device, settings->allocators);
  command->add_flag("--json", settings->json, "also print the replay's JSON (as `tidepool replay --json`)");
  command->add_option("--passes", settings->passes, "replay each trace this many times (adds the steady state)")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  command->add_option("--growth-slack", settings->growth_slack, "tidepool's pool_options::growth_slack")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  command->add_option("--points", settings->points, "samples per chart line, at most")
      ->check(CLI::Range(std::size_t{2}, std::size_t{100000}))
      ->capture_default_str();
  command->callback([settings, &exit_code] {
    run_view(*settings);
    exit_code = 0;
  });
}

}  // namespace tidepool::cli
