// tools/top_command.cpp: `tidepool top`, this user's tidepool processes on each GPU, from the GPU
// ledgers (issue 14): held, in use, cached and what each could hand back now, refreshed like top
// (`--once`: one print). It reads the ledgers only (and frees the slots of processes that are
// gone); it opens no GPU.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "process/ledger.hpp"
#include "process/process_identity.hpp"
#include "process/sharing.hpp"
#include "replay/report.hpp"

namespace tidepool::cli {
namespace {

std::string bytes_text(std::uint64_t bytes, bool valid) {
  return valid ? replay::format_bytes(static_cast<std::size_t>(bytes)) : std::string("?");
}

// One screen: every ledger of this user in `directory`.
std::string screen(const std::string& directory) {
  std::string out;
  const std::vector<std::string> paths = detail::ledger::list(directory);
  if (paths.empty()) {
    out += fmt::format("no tidepool process of this user shares a GPU (no ledger in {})\n", directory);
    return out;
  }
  const std::uint64_t now = detail::monotonic_ns();
  for (const std::string& path : paths) {
    std::unique_ptr<detail::ledger> book;
    try {
      book = detail::ledger::open_existing(path);
    } catch (const std::exception& e) {
      out += fmt::format("{}\n", e.what());
      continue;
    }
    const std::vector<detail::ledger_entry> entries = book->entries();
    std::uint64_t cached = 0;
    for (const auto& e : entries) cached += e.cached_bytes;
    out += fmt::format("{}: {} process{}, {} cached\n", to_string(book->uuid()), entries.size(),
                       entries.size() == 1 ? "" : "es", replay::format_bytes(static_cast<std::size_t>(cached)));
    if (entries.empty()) {
      // Every process in it is gone (killed before it could leave): the file goes too.
      if (book->remove_if_empty()) out += "  (every process in it is gone: ledger removed)\n";
      continue;
    }
    out += fmt::format("  {:>8} {:>11} {:>11} {:>11} {:>11} {:>7} {:>9}\n", "PID", "HELD", "IN USE", "CACHED",
                       "CAN GIVE", "SERVED", "UPDATED");
    for (const auto& e : entries) {
      const double age_s = now > e.updated_ns ? static_cast<double>(now - e.updated_ns) / 1e9 : 0.0;
      out += fmt::format("  {:>8} {:>11} {:>11} {:>11} {:>11} {:>7} {:>7.1f}s\n", e.pid,
                         bytes_text(e.held_bytes, e.figures_valid), bytes_text(e.in_use_bytes, e.figures_valid),
                         bytes_text(e.cached_bytes, e.figures_valid),
                         e.gives ? bytes_text(e.cached_bytes, e.figures_valid) : std::string("never"),
                         e.served_requests, age_s);
    }
  }
  return out;
}

volatile std::sig_atomic_t interrupted = 0;

}  // namespace

void add_top_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("top", "This user's tidepool processes on each GPU: held, in use, cached, "
                                        "what each could hand back now (refreshed; --once: one print)");
  struct options {
    bool once = false;
    double interval = 1.0;
    std::string directory;
  };
  auto opts = std::make_shared<options>();
  cmd->add_flag("--once", opts->once, "print once and exit");
  cmd->add_option("--interval", opts->interval, "seconds between refreshes (default 1)")->check(CLI::Range(0.05, 3600.0));
  cmd->add_option("--ledger-dir", opts->directory, "where the ledgers are (default $TIDEPOOL_LEDGER_DIR or /dev/shm)");
  cmd->callback([opts, &exit_code] {
    const std::string directory = opts->directory.empty() ? detail::ledger_directory() : opts->directory;
    if (opts->once) {
      fmt::print("{}", screen(directory));
      exit_code = 0;
      return;
    }
    std::signal(SIGINT, [](int) { interrupted = 1; });
    while (interrupted == 0) {
      // Home and clear, as top does, then the screen.
      fmt::print("\x1b[H\x1b[2J{}", screen(directory));
      std::fflush(stdout);
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts->interval);
      while (interrupted == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    exit_code = 0;
  });
}

}  // namespace tidepool::cli
