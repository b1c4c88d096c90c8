// tools/commands.hpp: the subcommands of the `tidepool` command line, each in its own file.
// Each add_* function registers its subcommand on the app and returns the code it will set.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "replay/trace.hpp"

namespace tidepool::cli {

/// `tidepool replay TRACE...`: replays traces against tidepool and the baselines.
void add_replay_command(CLI::App& app, int& exit_code);
/// The notes printed under the replay tables: what held, drv calls and ns/op mean.
[[nodiscard]] std::string replay_notes(bool sim);
/// The allocators to replay (all when none are named), tidepool first; an unknown name is refused
/// (tidepool::error) before any trace is read. Shared by `replay` and `view`.
[[nodiscard]] std::vector<std::string> chosen_allocators(std::vector<std::string> allocators);
/// Adds `--device sim|cuda` and `--allocators a,b,...` (the names chosen_allocators takes) to
/// `command`. Shared by `replay` and `view`.
void add_device_and_allocator_options(CLI::App& command, std::string& device, std::vector<std::string>& allocators);
/// Reads the trace at `path` (rows larger than `capacity` refused, naming file and line), says on
/// stderr when the file ends early, and refuses a trace with no rows. Shared by `replay` and `view`.
[[nodiscard]] replay::trace read_trace_to_replay(const std::string& path, std::size_t capacity);
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
