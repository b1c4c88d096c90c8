// tools/commands.hpp: the subcommands of the `tidepool` command line, each in its own file.
// Each add_* function registers its subcommand on the app and returns the code it will set.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tidepool::cli {

/// `tidepool replay TRACE...`: replays traces against tidepool and the baselines.
void add_replay_command(CLI::App& app, int& exit_code);
/// The notes printed under the replay tables: what held, drv calls and ns/op mean.
[[nodiscard]] std::string replay_notes(bool sim);
/// `tidepool info [TRACE...]`: the driver, its devices, which have a context, their memory; or
/// each trace's summary (rows, peak live, live at the end, sizes, streams, threads).
void add_info_command(CLI::App& app, int& exit_code);
/// `tidepool view TRACE... -o report.html`: the replay as one self-contained HTML page.
void add_view_command(CLI::App& app, int& exit_code);
/// `tidepool generate-loader OUT`: writes the loader workload of DESIGN 1.1 as a trace.
void add_generate_loader_command(CLI::App& app, int& exit_code);
/// `tidepool top [--once]`: this user's tidepool processes on each GPU, from the GPU ledgers.
void add_top_command(CLI::App& app, int& exit_code);
/// `tidepool trim --pid P BYTES`: asks one process to hand back cached memory.
void add_trim_command(CLI::App& app, int& exit_code);

}  // namespace tidepool::cli
