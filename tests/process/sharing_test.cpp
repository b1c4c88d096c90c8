// Several tidepool processes on one simulated GPU whose capacity they share (issue 14): a process
// that would fail asks the others, which hand back cached memory and never live memory; a process
// killed in the middle of a request, on either side, leaves nothing waiting; a ledger full of
// random bytes crashes nobody. Each test has its own directory for the ledger and the shared sim
// files, and its own sim GPU UUID, so tests run side by side.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "process/child_process.hpp"
#include "process/ledger.hpp"
#include "process/process_identity.hpp"
#include "tidepool/driver.hpp"

#ifndef TIDEPOOL_SHARING_HELPER
#error "TIDEPOOL_SHARING_HELPER is defined by tests/process/CMakeLists.txt"
#endif
#ifndef TIDEPOOL_CLI
#error "TIDEPOOL_CLI is defined by tests/process/CMakeLists.txt"
#endif

namespace tidepool::testing {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

class SharingAcrossProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tidepool-sharing-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    static std::atomic<int> serial{0};
    env_ = {
        {"TIDEPOOL_DEVICE", "sim"},
        {"TIDEPOOL_SIM_CAPACITY", "1GiB"},
        {"TIDEPOOL_SIM_SHARED", dir_},
        {"TIDEPOOL_SIM_UUID", "sharing-test-" + std::to_string(::getpid()) + "-" + std::to_string(serial++)},
        {"TIDEPOOL_LEDGER_DIR", dir_},
        {"TIDEPOOL_SHARING_PUBLISH_MS", "10"},
        {"TIDEPOOL_SHARING_WAIT_MS", "5000"},
    };
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<child_process> start(const std::vector<std::string>& args,
                                       const std::map<std::string, std::string>& extra = {}) {
    std::vector<std::string> argv{TIDEPOOL_SHARING_HELPER};
    argv.insert(argv.end(), args.begin(), args.end());
    auto env = env_;
    for (const auto& [k, v] : extra) env[k] = v;
    return std::make_unique<child_process>(argv, env);
  }

  // A process holding `live` and `cached` bytes, once it says it is ready.
  std::unique_ptr<child_process> holder(std::size_t live, std::size_t cached,
                                        const std::map<std::string, std::string>& extra = {},
                                        unsigned hook_sleep_ms = 0) {
    std::vector<std::string> args{"hold", std::to_string(live), std::to_string(cached)};
    if (hook_sleep_ms > 0) args.push_back(std::to_string(hook_sleep_ms));
    auto child = start(args, extra);
    const auto ready = child->read_until("ready");
    EXPECT_TRUE(ready.has_value()) << "the holder never got ready";
    return child;
  }

  // The only ledger in the test's directory.
  std::unique_ptr<detail::ledger> the_ledger() {
    const auto paths = detail::ledger::list(dir_);
    if (paths.size() != 1) return nullptr;
    return detail::ledger::open_existing(paths.front());
  }

  std::optional<detail::ledger_entry> entry_of(pid_t pid) {
    auto book = the_ledger();
    if (!book) return std::nullopt;
    for (const auto& e : book->entries()) {
      if (e.pid == static_cast<std::uint64_t>(pid)) return e;
    }
    return std::nullopt;
  }

  // Runs the CLI with the test's environment; returns its output and sets *status.
  std::string cli(const std::vector<std::string>& args, int* status) {
    std::vector<std::string> argv{TIDEPOOL_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    child_process run(argv, env_);
    run.close_stdin();
    std::string out = run.read_all();
    *status = run.wait();
    return out;
  }

  std::string dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(SharingAcrossProcesses, AProcessThatWouldFailGetsANeighboursCache) {
  auto a = holder(0, 768 * MiB);
  auto b = start({"allocate", std::to_string(512 * MiB)});
  const auto line = b->read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->substr(0, 2), "ok") << *line;
  EXPECT_EQ(b->wait(), 0);
  const auto e = entry_of(a->pid());
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->served_requests, 1U);
  EXPECT_GE(e->served_bytes, 256 * MiB);
  a->close_stdin();
  EXPECT_EQ(a->read_until("intact").has_value(), true);
  EXPECT_EQ(a->wait(), 0);
  // Both left at exit (their helper threads stopped), and the last one removed the file.
  EXPECT_TRUE(detail::ledger::list(dir_).empty());
}

TEST_F(SharingAcrossProcesses, WithoutSharingOrWithANeighbourThatNeverGivesTheAllocationFails) {
  {
    auto a = holder(0, 768 * MiB);
    auto b = start({"allocate", std::to_string(512 * MiB)}, {{"TIDEPOOL_SHARING", "0"}});
    const auto line = b->read_line();
    ASSERT_TRUE(line.has_value());
    EXPECT_EQ(line->substr(0, 3), "oom") << *line;
    EXPECT_EQ(b->wait(), 3);
  }
  {
    auto a = holder(0, 768 * MiB, {{"TIDEPOOL_SHARING_GIVES", "0"}});
    auto b = start({"allocate", std::to_string(512 * MiB)});
    const auto line = b->read_line();
    ASSERT_TRUE(line.has_value());
    EXPECT_EQ(line->substr(0, 3), "oom") << *line;
    EXPECT_EQ(b->wait(), 3);
    const auto e = entry_of(a->pid());
    ASSERT_TRUE(e.has_value());
    EXPECT_FALSE(e->gives);
    EXPECT_EQ(e->served_requests, 0U);  // never asked
  }
}

TEST_F(SharingAcrossProcesses, LiveMemoryIsNeverHandedBack) {
  auto a = holder(768 * MiB, 0);
  auto b = start({"allocate", std::to_string(512 * MiB)});
  const auto line = b->read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->substr(0, 3), "oom") << *line;
  EXPECT_EQ(b->wait(), 3);
  a->close_stdin();
  EXPECT_TRUE(a->read_until("intact").has_value());
  EXPECT_EQ(a->wait(), 0);
}

TEST_F(SharingAcrossProcesses, AProcessKilledWhileServingIsNoticedAndCleaned) {
  // A's reclaim hook sleeps 20 s: a request reaching it is in progress until A is killed.
  auto a = holder(0, 256 * MiB, {}, 20000);
  auto book = the_ledger();
  ASSERT_TRUE(book);
  const auto entries = book->entries();
  ASSERT_EQ(entries.size(), 1U);
  // Asks for more than A caches, so A goes on to its hook after its own release.
  const std::uint64_t deadline = detail::monotonic_ns() + 30ULL * 1000 * 1000 * 1000;
  auto asked = std::async(std::launch::async, [&] { return book->ask(entries[0], 900 * MiB, deadline); });
  ASSERT_TRUE(a->read_until("serving").has_value());
  a->kill9();
  // Noticed while A is still a zombie (not reaped yet): its pid is not free, but it is gone.
  const detail::ask_result r = asked.get();
  EXPECT_EQ(r.outcome, detail::ask_outcome::gone);
  EXPECT_LT(r.waited_ns, 25ULL * 1000 * 1000 * 1000) << "waited for its deadline instead of noticing";
  EXPECT_EQ(a->wait(), 128 + SIGKILL);
  EXPECT_TRUE(book->entries().empty()) << "the dead process's entry was not cleaned";
  // Its GPU memory is gone with it: the whole GPU can be had.
  auto c = start({"allocate", std::to_string(1000 * MiB)});
  const auto line = c->read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->substr(0, 2), "ok") << *line;
}

TEST_F(SharingAcrossProcesses, AnAskerKilledMidRequestBlocksNobody) {
  // A keeps 512 MiB live and 256 MiB cached; its hook takes 1.5 s.
  auto a = holder(512 * MiB, 256 * MiB, {}, 1500);
  // B needs more than the GPU has free, so it asks A, and is killed while A serves it.
  auto b = start({"allocate", std::to_string(600 * MiB)}, {{"TIDEPOOL_SHARING_WAIT_MS", "30000"}});
  ASSERT_TRUE(a->read_until("serving").has_value());
  b->kill9();
  EXPECT_EQ(b->wait(), 128 + SIGKILL);
  // The request lock still names B; the next asker takes it over and is answered.
  auto book = the_ledger();
  ASSERT_TRUE(book);
  const auto e = entry_of(a->pid());
  ASSERT_TRUE(e.has_value());
  const auto r = book->ask(*e, MiB, detail::monotonic_ns() + 30ULL * 1000 * 1000 * 1000);
  EXPECT_EQ(r.outcome, detail::ask_outcome::answered);
  a->close_stdin();
  EXPECT_TRUE(a->read_until("intact").has_value());
  EXPECT_EQ(a->wait(), 0);
}

// Writes random bytes over [offset, offset + bytes) of the file at `path`.
void scribble(const std::string& path, std::size_t offset, std::size_t bytes, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> junk(bytes);
  for (auto& c : junk) c = static_cast<unsigned char>(rng());
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), static_cast<off_t>(offset)), static_cast<ssize_t>(junk.size()));
  ::close(fd);
}

TEST_F(SharingAcrossProcesses, RandomBytesInTheLedgerCrashNobodyAndFreeNothingLive) {
  auto a = holder(256 * MiB, 512 * MiB);
  auto b = holder(64 * MiB, 0);
  const auto paths = detail::ledger::list(dir_);
  ASSERT_EQ(paths.size(), 1U);
  // Every slot: owners, figures, request and answer words, locks.
  for (unsigned round = 0; round < 5; ++round) {
    scribble(paths[0], sizeof(detail::ledger_header), detail::ledger_file_bytes - sizeof(detail::ledger_header), round);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  // Listing it cleans the garbage; the holders take slots again within their publish interval.
  auto book = the_ledger();
  ASSERT_TRUE(book);
  (void)book->entries();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(entry_of(a->pid()).has_value());
  EXPECT_TRUE(entry_of(b->pid()).has_value());
  int status = 0;
  const std::string top = cli({"top", "--once"}, &status);
  EXPECT_EQ(status, 0) << top;
  EXPECT_NE(top.find(std::to_string(a->pid())), std::string::npos) << top;
  // A's cache can still be had, and its live memory is still its own.
  auto c = start({"allocate", std::to_string(600 * MiB)});
  const auto line = c->read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->substr(0, 2), "ok") << *line;
  EXPECT_EQ(c->wait(), 0);

  // Now the header too: the ledger is refused by whoever opens it, and they allocate as before.
  scribble(paths[0], 0, detail::ledger_file_bytes, 99);
  const std::string refused = cli({"top", "--once"}, &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(refused.find("refused"), std::string::npos) << refused;
  auto d = start({"allocate", std::to_string(64 * MiB)});
  const auto d_line = d->read_line();
  ASSERT_TRUE(d_line.has_value());
  EXPECT_EQ(d_line->substr(0, 2), "ok") << *d_line;
  for (auto* holder_process : {a.get(), b.get()}) {
    holder_process->close_stdin();
    EXPECT_TRUE(holder_process->read_until("intact").has_value());
    EXPECT_EQ(holder_process->wait(), 0);
  }
}

TEST_F(SharingAcrossProcesses, TopListsEveryProcessAndTrimAsksOne) {
  auto a = holder(0, 256 * MiB);
  auto b = holder(128 * MiB, 0, {{"TIDEPOOL_SHARING_GIVES", "0"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a publish interval or more
  int status = 0;
  std::string top = cli({"top", "--once"}, &status);
  EXPECT_EQ(status, 0) << top;
  EXPECT_NE(top.find("2 processes"), std::string::npos) << top;
  EXPECT_NE(top.find(std::to_string(a->pid())), std::string::npos) << top;
  EXPECT_NE(top.find(std::to_string(b->pid())), std::string::npos) << top;
  EXPECT_NE(top.find("256.0 MiB"), std::string::npos) << top;
  EXPECT_NE(top.find("never"), std::string::npos) << top;

  const std::string trim = cli({"trim", "--pid", std::to_string(a->pid()), "1G"}, &status);
  EXPECT_EQ(status, 0) << trim;
  EXPECT_NE(trim.find("answered, handed back 256.0 MiB"), std::string::npos) << trim;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // A publishes right after answering
  const auto e = entry_of(a->pid());
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->cached_bytes, 0U);

  const std::string nobody = cli({"trim", "--pid", "1", "1G"}, &status);
  EXPECT_EQ(status, 2) << nobody;
}

}  // namespace
}  // namespace tidepool::testing
