// tools/trim_command.cpp: `tidepool trim --pid P BYTES`: asks one tidepool process of this user to
// hand back BYTES of cached memory on every GPU where it is in a ledger (issue 14), and prints
// what it answered and how long that took. The process hands back cached memory only.
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "process/ledger.hpp"
#include "process/process_identity.hpp"
#include "process/sharing.hpp"
#include "process/text_values.hpp"
#include "replay/report.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::cli {
namespace {

// "1073741824", "512M", "2GiB" (powers of 1024; the library's parser), at most 1 PiB.
std::uint64_t parse_bytes(const std::string& text) {
  std::size_t bytes = 0;
  if (!detail::parse_byte_count(text, &bytes) || bytes > (std::size_t{1} << 50)) {
    throw error(error_code::invalid_argument,
                fmt::format("trim: '{}' is not a byte count (e.g. 1073741824, 512M, 2GiB; at most 1 PiB)", text));
  }
  return bytes;
}

const char* outcome_text(detail::ask_outcome o) {
  switch (o) {
    case detail::ask_outcome::answered: return "answered";
    case detail::ask_outcome::busy: return "busy (another request is in progress)";
    case detail::ask_outcome::timed_out: return "no answer in time";
    case detail::ask_outcome::gone: return "gone";
    case detail::ask_outcome::enough: return "enough";
  }
  return "?";
}

}  // namespace

void add_trim_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("trim", "Ask one tidepool process of this user to hand back cached memory");
  struct options {
    std::uint64_t pid = 0;
    std::string bytes;
    std::uint64_t wait_ms = 5000;
    std::string directory;
  };
  auto opts = std::make_shared<options>();
  cmd->add_option("--pid", opts->pid, "the process")->required();
  cmd->add_option("BYTES", opts->bytes, "how much to ask for (e.g. 1073741824, 512M, 2GiB)")->required();
  cmd->add_option("--wait-ms", opts->wait_ms, "how long to wait for its answer (default 5000)")->check(CLI::Range(1, 600000));
  cmd->add_option("--ledger-dir", opts->directory, "where the ledgers are (default $TIDEPOOL_LEDGER_DIR or /dev/shm)");
  cmd->callback([opts, &exit_code] {
    const std::uint64_t bytes = parse_bytes(opts->bytes);
    const std::string directory = opts->directory.empty() ? detail::ledger_directory() : opts->directory;
    int asked = 0;
    bool all_answered = true;
    for (const std::string& path : detail::ledger::list(directory)) {
      std::unique_ptr<detail::ledger> book;
      try {
        book = detail::ledger::open_existing(path);
      } catch (const std::exception& e) {
        fmt::print(stderr, "{}\n", e.what());
        continue;
      }
      for (const auto& e : book->entries()) {
        if (e.pid != opts->pid) continue;
        ++asked;
        const auto result = book->ask(e, bytes, detail::monotonic_ns() + opts->wait_ms * 1'000'000);
        all_answered = all_answered && result.outcome == detail::ask_outcome::answered;
        fmt::print("pid {} on {}: {}, handed back {} ({} B) in {:.3f} ms\n", e.pid, to_string(book->uuid()),
                   outcome_text(result.outcome), replay::format_bytes(static_cast<std::size_t>(result.bytes)),
                   result.bytes, static_cast<double>(result.waited_ns) / 1e6);
      }
    }
    if (asked == 0) {
      throw error(error_code::invalid_argument,
                  fmt::format("trim: no tidepool process with pid {} in this user's ledgers ({})", opts->pid, directory));
    }
    exit_code = all_answered ? 0 : 1;
  });
}

}  // namespace tidepool::cli
