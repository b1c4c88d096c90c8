// tools/generate_command.cpp: `tidepool generate-loader OUT.csv.gz [--seed N]`.
#include <fmt/format.h>

#include "commands.hpp"
#include "replay/loader_workload.hpp"
#include "replay/report.hpp"
#include "replay/trace_writer.hpp"

namespace tidepool::cli {

void add_generate_loader_command(CLI::App& app, int& exit_code) {
  struct settings {
    std::string out;
    std::uint64_t seed = 1;
  };
  auto s = std::make_shared<settings>();
  auto* command = app.add_subcommand("generate-loader", "Write the loader workload of DESIGN 1.1 as an RMM replay log");
  command->add_option("out", s->out, "output file (.csv or .csv.gz)")->required();
  command->add_option("--seed", s->seed, "random seed (the same seed writes the same trace)")->capture_default_str();
  command->callback([s, &exit_code] {
    const replay::trace t = replay::make_loader_trace(s->seed);
    replay::write_trace(t, s->out);
    const replay::trace_summary summary = replay::summarize(t);
    fmt::print("{}: {} rows, {} allocations, peak live {}, live at the end {}\n", s->out, t.events.size(),
               summary.allocations, replay::format_bytes(summary.peak_live_bytes),
               replay::format_bytes(summary.live_bytes_at_end));
    exit_code = 0;
  });
}

}  // namespace tidepool::cli
