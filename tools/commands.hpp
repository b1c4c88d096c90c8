// tools/commands.hpp: the subcommands of the `tidepool` command line, each in its own file.
// Each add_* function registers its subcommand on the app and returns the code it will set.
#pragma once

#include <CLI/CLI.hpp>

namespace tidepool::cli {

/// `tidepool replay TRACE...`: replays traces against tidepool and the baselines.
void add_replay_command(CLI::App& app, int& exit_code);
/// `tidepool info [TRACE...]`: the driver, its devices, which have a context, their memory; or
/// each trace's summary (rows, peak live, live at the end, sizes, streams, threads).
void add_info_command(CLI::App& app, int& exit_code);
/// `tidepool generate-loader OUT`: writes the loader workload of DESIGN 1.1 as a trace.
void add_generate_loader_command(CLI::App& app, int& exit_code);
/// `tidepool top [--once]`: this user's tidepool processes on each GPU, from the GPU ledgers.
void add_top_command(CLI::App& app, int& exit_code);
/// `tidepool trim --pid P BYTES`: asks one process to hand back cached memory.
void add_trim_command(CLI::App& app, int& exit_code);

}  // namespace tidepool::cli
