// tools/replay_command.cpp: `tidepool replay TRACE...`, every trace against every allocator,
// each allocator on a fresh driver so the driver's counts are its own.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "device_choice.hpp"
#include "replay/replay_allocator.hpp"
#include "replay/replay_engine.hpp"
#include "replay/report.hpp"
#include "replay/trace_reader.hpp"
#include "process/text_values.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::cli {

namespace {

struct replay_settings {
  std::vector<std::string> traces;
  std::string device = "sim";
  std::vector<std::string> allocators;
  bool json = false;
  bool brief = false;
  unsigned passes = 1;
  double growth_slack = tidepool::pool_options{}.growth_slack;
  bool alias_free_handles = false;
  bool compact_on_out_of_memory = false;
  double alias_slack = tidepool::pool_options{}.alias_slack;
  double gpu_lag_ms = 0.0;
  std::string capacity;  ///< sim only: "80GiB" (bytes) or "1.05x" (times each trace's peak in use)
};

// Whether all of `text` is a non-negative decimal number (std::stod alone takes "1.5x" as 1.5).
bool parse_whole_number(const std::string& text, double* out) {
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos) return false;
  try {
    std::size_t parsed = 0;
    *out = std::stod(text, &parsed);
    return parsed == text.size();
  } catch (const std::exception&) {
    return false;
  }
}

// --capacity's device size for one trace: a byte count (the library's units, "80G", "80GiB", with
// a fraction allowed: "13.5GiB"), or a multiple of the trace's peak in use ("1.05x") rounded up to
// the sim's granule (sim_config's granularity); 0 when not given (an H200's size).
std::size_t sim_capacity_for(const std::string& text, std::size_t trace_peak_live_bytes) {
  if (text.empty()) return 0;
  const std::size_t granule = sim_config{}.granularity;
  constexpr double most = static_cast<double>(std::size_t{1} << 50);
  double value = 0.0;
  if (text.back() == 'x' || text.back() == 'X') {
    if (!parse_whole_number(text.substr(0, text.size() - 1), &value) || !(value >= 1.0 && value <= 1000.0)) {
      throw error(error_code::invalid_argument,
                  fmt::format("--capacity '{}': a multiple of the trace's peak in use is a number from 1 to 1000 "
                              "followed by x (e.g. 1.05x)",
                              text));
    }
    const double bytes = value * static_cast<double>(std::max(trace_peak_live_bytes, granule));
    return (static_cast<std::size_t>(bytes) + granule - 1) / granule * granule;
  }
  const std::size_t number_end = std::min(text.find_first_not_of("0123456789."), text.size());
  std::size_t unit_bytes = 0;
  const bool valid = parse_whole_number(text.substr(0, number_end), &value) &&
                     detail::parse_byte_count("1" + text.substr(number_end), &unit_bytes) &&
                     value * static_cast<double>(unit_bytes) <= most;
  const std::size_t bytes = valid ? static_cast<std::size_t>(value * static_cast<double>(unit_bytes)) : 0;
  if (bytes < granule) {
    throw error(error_code::invalid_argument,
                fmt::format("--capacity '{}': a byte count from 2 MiB to 1 PiB (e.g. 80GiB, 13.5G) or a multiple of "
                            "the trace's peak in use (e.g. 1.05x)",
                            text));
  }
  return bytes;
}

// Progress on stderr, only when it is a terminal and the trace is long enough to wait for.
class progress_line {
 public:
  explicit progress_line(std::size_t events) : enabled_(isatty(STDERR_FILENO) == 1 && events >= 20'000) {}
  void show(const std::string& what, std::size_t done, std::size_t total) const {
    if (!enabled_) return;
    fmt::print(stderr, "\r\033[K{} {:3}%", what, total == 0 ? 100 : done * 100 / total);
    std::fflush(stderr);
  }
  void clear() const {
    if (enabled_) fmt::print(stderr, "\r\033[K");
  }

 private:
  bool enabled_;
};

void run_replay(const replay_settings& settings) {
  const std::vector<std::string> allocators = chosen_allocators(settings.allocators);
  if (settings.brief && std::find(allocators.begin(), allocators.end(), "tidepool") == allocators.end()) {
    throw error(error_code::invalid_argument,
                "--brief prints tidepool's goals on each trace: --allocators must include tidepool");
  }
  if (!settings.capacity.empty() && settings.device != "sim") {
    throw error(error_code::invalid_argument, "--capacity sizes the simulated GPU: it needs --device sim");
  }
  (void)sim_capacity_for(settings.capacity, 0);  // a malformed --capacity before any trace is read
  // A row larger than the device is a bad row of the trace, named by file and line when read (the
  // H200's size: a trace larger than a --capacity device replays, its allocations failing).
  const std::size_t capacity = make_driver(settings.device)->memory_info(0).total;
  std::vector<replay::replay_result> all;
  replay::goal_tally tally;
  for (const std::string& path : settings.traces) {
    const replay::trace t = read_trace_to_replay(path, capacity);
    const replay::trace_summary summary = replay::summarize(t);
    const progress_line progress(t.events.size());
    const std::size_t sim_capacity = sim_capacity_for(settings.capacity, summary.peak_live_bytes);
    std::vector<replay::replay_result> results;
    for (const std::string& name : allocators) {
      replay::replay_options options;
      options.passes = settings.passes;
      options.tidepool_options.growth_slack = settings.growth_slack;
      options.tidepool_options.alias_free_handles = settings.alias_free_handles;
      options.tidepool_options.alias_slack = settings.alias_slack;
      options.tidepool_options.compact_on_out_of_memory = settings.compact_on_out_of_memory;
      options.gpu_lag_us = settings.gpu_lag_ms * 1000.0;
      const std::string what = fmt::format("replaying {} with {}", t.name, name);
      options.progress = [&progress, &what](std::size_t done, std::size_t total) { progress.show(what, done, total); };
      results.push_back(replay::replay_trace(t, name, make_driver(settings.device, sim_capacity), options));
      progress.clear();
    }
    if (settings.json) {  // the goals are the reader's to check from the JSON
      all.insert(all.end(), results.begin(), results.end());
      continue;
    }
    const std::optional<replay::goal_verdicts> goals = replay::check_goals(results);
    if (goals) tally.add(*goals);
    if (settings.brief) {
      if (goals) fmt::print("{}", replay::format_goals_brief(*goals));
    } else {
      std::string table = replay::format_table(summary, results);
      if (sim_capacity != 0) {  // under the trace's line: what the device was
        const std::size_t end_of_first_line = table.find('\n');
        table.insert(end_of_first_line + 1,
                     fmt::format("  on a simulated GPU of {} (--capacity {}): allocations past it fail.\n",
                                 replay::format_bytes(sim_capacity), settings.capacity));
      }
      fmt::print("{}{}\n", table, replay::format_goals(results));
    }
  }
  if (settings.json) {
    fmt::print("{}", replay::format_json(all));
    return;
  }
  if (tally.traces > 1 || settings.brief) fmt::print("{}", replay::format_goal_tally(tally));
  if (!settings.brief) fmt::print("{}", replay_notes(settings.device == "sim"));
}

}  // namespace

void add_device_and_allocator_options(CLI::App& command, std::string& device, std::vector<std::string>& allocators) {
  command.add_option("--device", device, "sim (a simulated H200) or cuda")
      ->check(CLI::IsMember({"sim", "cuda"}))
      ->capture_default_str();
  command
      .add_option("--allocators", allocators,
                  fmt::format("comma-separated, from {} (default: all)", fmt::join(replay::allocator_names(), ",")))
      ->delimiter(',')
      ->allow_extra_args(false);  // "--allocators a,b TRACE" must leave TRACE to the traces
}

std::vector<std::string> chosen_allocators(std::vector<std::string> allocators) {
  const std::vector<std::string> known = replay::allocator_names();
  if (allocators.empty()) allocators = known;
  for (const std::string& name : allocators) {  // before any trace is read
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw error(error_code::invalid_argument,
                  fmt::format("unknown allocator \"{}\" (known: {})", name, fmt::join(known, ", ")));
    }
  }
  // tidepool first, then the others in the order given.
  std::stable_partition(allocators.begin(), allocators.end(), [](const std::string& a) { return a == "tidepool"; });
  return allocators;
}

replay::trace read_trace_to_replay(const std::string& path, std::size_t capacity) {
  replay::trace t = replay::read_trace(path, capacity);
  if (t.truncated) {
    fmt::print(stderr, "tidepool: {}: the file ends early (a recording cut short?): read up to its last whole row\n",
               path);
  }
  if (t.events.empty()) {
    throw error(error_code::invalid_argument, fmt::format("{}: empty trace: no rows after the header", path));
  }
  return t;
}

std::string replay_notes(bool sim) {
  return fmt::format(
      "held: physical memory the allocator holds from the driver ({}).\n"
      "drv calls: reserve, address free, create, map, set access, unmap, release, alloc, free; drv time: {}.\n"
      "ns/op: wall time inside allocate/free per call{}.\n",
      sim ? "sim_driver::physical_bytes, exact" : "the allocator's own count; NVML's process figure beside it",
      sim ? "modelled from the H200 measurements (DESIGN 2a)" : "measured", sim ? "" : " (driver calls included)");
}

void add_replay_command(CLI::App& app, int& exit_code) {
  auto settings = std::make_shared<replay_settings>();
  auto* command = app.add_subcommand("replay", "Replay RMM allocation logs against tidepool and today's allocators");
  command->add_option("traces", settings->traces, "RMM replay logs (CSV, plain or gzip)")->required();
  add_device_and_allocator_options(*command, settings->device, settings->allocators);
  auto* json = command->add_flag("--json", settings->json, "print one JSON array instead of tables");
  command
      ->add_flag("--brief", settings->brief,
                 "one line per trace (tidepool beside expandable segments, failed allocations if any, the "
                 "goals missed) and the goals over all traces, instead of tables")
      ->excludes(json);
  command
      ->add_option("--passes", settings->passes,
                   "replay each trace this many times through one allocator (a training loop's steps); "
                   "the table adds the first pass and the steady state")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  command
      ->add_option("--growth-slack", settings->growth_slack,
                   "tidepool's pool_options::growth_slack (held memory allowed above peak in use before stealing)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  command->add_flag("--alias", settings->alias_free_handles,
                    "tidepool's pool_options::alias_free_handles (past the alias budget, map idle handles a "
                    "second time before making new ones)");
  command->add_flag("--compact-on-oom", settings->compact_on_out_of_memory,
                    "tidepool's pool_options::compact_on_out_of_memory (before an allocation fails, move live "
                    "bytes off the handles they cover in part when that would serve it)");
  command
      ->add_option("--alias-slack", settings->alias_slack,
                   "tidepool's pool_options::alias_slack (with --alias: held memory allowed above peak in use "
                   "before idle handles are mapped again; above --growth-slack it acts as --growth-slack)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  command
      ->add_option("--gpu-lag-ms", settings->gpu_lag_ms,
                   "sim only: how far the GPU runs behind the program (each row's work completes this long "
                   "after it, on the trace's clock), as in a loop that queues kernels ahead of a busy GPU")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  command->add_option("--capacity", settings->capacity,
                      "sim only: the simulated GPU's size instead of an H200's: bytes (80GiB, 13.5G) or a multiple of "
                      "each trace's peak in use (1.05x); allocations past it fail and are counted");

  command->callback([settings, &exit_code] {
    run_replay(*settings);
    exit_code = 0;
  });
}

}  // namespace tidepool::cli
