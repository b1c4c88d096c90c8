// The GPU ledger in one process (issue 14): the sim's UUIDs, the file (created 0600, refused when
// it is not this user's, not 0600, of another size, version or GPU, or a link), the validation of
// what is read from it (dead or garbage owners cleaned, contradicting figures marked), the request
// exchange and its bounds, and the process layer joining a ledger when a pool is made.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sys/mman.h>
#include <thread>

#include "process/ledger.hpp"
#include "process/process_fixture.hpp"
#include "process/process_identity.hpp"
#include "process/sharing.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

device_uuid_bytes uuid_of(sim_driver& sim, int device) {
  device_uuid_bytes u{};
  EXPECT_EQ(sim.device_uuid(device, &u), driver_status::success);
  return u;
}

TEST(SimUuid, OneKeyNamesTheSameGpusAndNoKeyAGpuOfItsOwn) {
  sim_config keyed;
  keyed.device_count = 2;
  keyed.uuid_key = "k";
  sim_driver a(keyed);
  sim_driver b(keyed);
  EXPECT_EQ(uuid_of(a, 0), uuid_of(b, 0));
  EXPECT_EQ(uuid_of(a, 1), uuid_of(b, 1));
  EXPECT_NE(uuid_of(a, 0), uuid_of(a, 1));
  sim_driver private1{sim_config{}};
  sim_driver private2{sim_config{}};
  EXPECT_NE(uuid_of(private1, 0), uuid_of(private2, 0));
  EXPECT_TRUE(std::regex_match(to_string(uuid_of(a, 0)),
                               std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")));
  device_uuid_bytes u{};
  EXPECT_EQ(a.device_uuid(2, &u), driver_status::invalid_value);
}

TEST(SimSharedCapacity, OneSimsHoldingsCountAgainstAnothers) {
  char pattern[] = "/tmp/tidepool-simshared-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  sim_config config;
  config.capacity = GiB;
  config.uuid_key = "shared-capacity-test";
  config.shared_capacity_directory = pattern;
  {
    sim_driver a(config);
    sim_driver b(config);
    ASSERT_EQ(a.open_context(0), driver_status::success);
    ASSERT_EQ(b.open_context(0), driver_status::success);
    physical_handle h = 0;
    ASSERT_EQ(a.mem_create(0, 768 * MiB, &h), driver_status::success);
    EXPECT_EQ(b.memory_info(0).free, 256 * MiB);
    physical_handle h2 = 0;
    EXPECT_EQ(b.mem_create(0, 512 * MiB, &h2), driver_status::out_of_memory);
    ASSERT_EQ(a.mem_release(0, h), driver_status::success);
    EXPECT_EQ(b.mem_create(0, 512 * MiB, &h2), driver_status::success);
    EXPECT_EQ(a.memory_info(0).free, 512 * MiB);
  }
  std::filesystem::remove_all(pattern);
}

TEST(ProcessIdentity, AProcessIsItsPidAndStartTimeAndAnExitedOneIsGone) {
  const auto mine = detail::process_start_time(static_cast<std::uint64_t>(::getpid()));
  ASSERT_TRUE(mine.has_value());
  EXPECT_EQ(*mine, detail::own_start_time());
  EXPECT_TRUE(detail::owner_alive(detail::owner_word(static_cast<std::uint64_t>(::getpid()), *mine)));
  EXPECT_FALSE(detail::owner_alive(detail::owner_word(static_cast<std::uint64_t>(::getpid()), *mine + 1)));
  EXPECT_FALSE(detail::process_start_time(0).has_value());
  EXPECT_FALSE(detail::process_start_time(detail::largest_pid + 1).has_value());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  // Exited, not yet reaped: its /proc entry is still there, in state Z.
  bool zombie = false;
  for (int i = 0; i < 1000 && !zombie; ++i) {
    zombie = !detail::process_start_time(static_cast<std::uint64_t>(child)).has_value();
    if (!zombie) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(zombie);
  EXPECT_TRUE(std::filesystem::exists("/proc/" + std::to_string(child)));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
}

class LedgerFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tidepool-ledger-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    uuid_ = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void expect_refused(const std::string& why) {
    try {
      (void)detail::ledger::open_or_create(dir_, uuid_);
      ADD_FAILURE() << "not refused; expected: " << why;
    } catch (const error& e) {
      EXPECT_EQ(e.code(), error_code::unavailable);
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }

  std::string dir_;
  device_uuid_bytes uuid_{};
};

TEST_F(LedgerFile, IsCreatedForThisUserWithMode0600AndOpenedAgain) {
  auto book = detail::ledger::open_or_create(dir_, uuid_);
  struct stat st {};
  ASSERT_EQ(::stat(book->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600U);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), detail::ledger_file_bytes);
  EXPECT_NE(book->path().find("tidepool-ledger-" + std::to_string(::geteuid()) + "-GPU-01020304-"), std::string::npos);
  auto again = detail::ledger::open_or_create(dir_, uuid_);
  EXPECT_EQ(again->uuid(), uuid_);
  EXPECT_EQ(detail::ledger::list(dir_).size(), 1U);
}

TEST_F(LedgerFile, IsRefusedWhenNotOnlyThisUsersOrNotALedgerOfThisGpu) {
  const std::string path = detail::ledger::path_of(dir_, uuid_);
  { auto book = detail::ledger::open_or_create(dir_, uuid_); }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  expect_refused("mode 644");
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    expect_refused("owned by uid 65534");
    ASSERT_EQ(::chown(path.c_str(), 0, 0), 0);
  }
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  expect_refused("100 bytes");
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(detail::ledger_file_bytes)), 0);  // zeroes: no magic
  expect_refused("bad magic");
  // Another GPU's ledger under this GPU's name.
  std::filesystem::remove(path);
  device_uuid_bytes other = uuid_;
  other[15] = 99;
  { auto book = detail::ledger::open_or_create(dir_, other); }
  std::filesystem::rename(detail::ledger::path_of(dir_, other), path);
  expect_refused("not of GPU-01020304");
  // A symbolic link is not followed.
  std::filesystem::remove(path);
  { auto book = detail::ledger::open_or_create(dir_, other); }
  std::filesystem::create_symlink(detail::ledger::path_of(dir_, other), path);
  expect_refused("refused");
}

TEST_F(LedgerFile, EntriesOfProcessesThatAreGoneOrGarbageAreCleaned) {
  auto book = detail::ledger::open_or_create(dir_, uuid_);
  const auto mine = book->claim(true);
  ASSERT_TRUE(mine.has_value());
  // Three more owners: a pid out of range, our pid with another start time, a pid with no process.
  const int fd = ::open(book->path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* base = ::mmap(nullptr, detail::ledger_file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(base, MAP_FAILED);
  auto* slots = reinterpret_cast<detail::ledger_slot*>(static_cast<char*>(base) + sizeof(detail::ledger_header));
  const auto me = static_cast<std::uint64_t>(::getpid());
  slots[10].owner = detail::owner_word(detail::largest_pid + 7, 1);
  slots[11].owner = detail::owner_word(me, detail::own_start_time() + 1);
  slots[12].owner = detail::owner_word(detail::largest_pid - 1, 5);
  // Figures that contradict each other, in our own slot.
  slots[*mine].held_bytes = 10;
  slots[*mine].in_use_bytes = 20;
  const auto entries = book->entries();
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(entries[0].pid, me);
  EXPECT_FALSE(entries[0].figures_valid);
  EXPECT_EQ(slots[10].owner.load(), 0U);
  EXPECT_EQ(slots[11].owner.load(), 0U);
  EXPECT_EQ(slots[12].owner.load(), 0U);
  // Our slot taken by a hostile write: we notice.
  slots[*mine].owner = 12345;
  EXPECT_FALSE(book->holds(*mine));
  ::munmap(base, detail::ledger_file_bytes);
  ::close(fd);
}

TEST_F(LedgerFile, ARequestIsAnsweredAndEveryWaitIsBoundedByTheAsker) {
  auto book = detail::ledger::open_or_create(dir_, uuid_);
  const auto slot = book->claim(true);
  ASSERT_TRUE(slot.has_value());
  const auto entries = book->entries();
  ASSERT_EQ(entries.size(), 1U);

  // No one serves: the asker gives up at its own deadline.
  const std::uint64_t wait_ns = 50'000'000;
  auto r = book->ask(entries[0], MiB, detail::monotonic_ns() + wait_ns);
  EXPECT_EQ(r.outcome, detail::ask_outcome::timed_out);
  EXPECT_GE(r.waited_ns, wait_ns);
  ASSERT_TRUE(book->pending(*slot).has_value());  // still there for its owner
  // An asker whose need is met meanwhile (its driver's free memory) stops waiting.
  int checks = 0;
  r = book->ask(entries[0], MiB, detail::monotonic_ns() + 10'000'000'000ULL, [&] { return ++checks == 3; });
  EXPECT_EQ(r.outcome, detail::ask_outcome::enough);
  EXPECT_EQ(checks, 3);

  // A server thread answers.
  std::atomic<bool> stop{false};
  std::thread server([&] {
    while (!stop) {
      const std::uint32_t seen = book->current_request(*slot);
      if (const auto req = book->pending(*slot)) {
        book->answer(*slot, req->seq, req->bytes / 2);
        continue;
      }
      book->wait_for_request(*slot, seen, 5'000'000);
    }
  });
  r = book->ask(entries[0], 8 * MiB, detail::monotonic_ns() + 10'000'000'000ULL);
  EXPECT_EQ(r.outcome, detail::ask_outcome::answered);
  EXPECT_EQ(r.bytes, 4 * MiB);
  stop = true;
  book->wake(*slot);
  server.join();

  // A request lock held by a live asker until a plausible deadline: passed by, not waited for.
  const int fd = ::open(book->path().c_str(), O_RDWR);
  void* base = ::mmap(nullptr, detail::ledger_file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(base, MAP_FAILED);
  auto* slots = reinterpret_cast<detail::ledger_slot*>(static_cast<char*>(base) + sizeof(detail::ledger_header));
  slots[*slot].request_lock = static_cast<std::uint64_t>(::getppid());
  slots[*slot].request_deadline_ns = detail::monotonic_ns() + 30'000'000'000ULL;
  r = book->ask(entries[0], MiB, detail::monotonic_ns() + 10'000'000'000ULL);
  EXPECT_EQ(r.outcome, detail::ask_outcome::busy);
  // Garbage deadlines (far ahead) and dead lock holders are taken over.
  slots[*slot].request_deadline_ns = ~0ULL;
  r = book->ask(entries[0], MiB, detail::monotonic_ns() + 20'000'000);
  EXPECT_EQ(r.outcome, detail::ask_outcome::timed_out);
  slots[*slot].request_lock = detail::largest_pid - 1;  // no such process
  slots[*slot].request_deadline_ns = detail::monotonic_ns() + 30'000'000'000ULL;
  r = book->ask(entries[0], MiB, detail::monotonic_ns() + 20'000'000);
  EXPECT_EQ(r.outcome, detail::ask_outcome::timed_out);
  ::munmap(base, detail::ledger_file_bytes);
  ::close(fd);
}

TEST_F(LedgerFile, TheLastProcessToLeaveRemovesIt) {
  auto book = detail::ledger::open_or_create(dir_, uuid_);
  const auto slot = book->claim(true);
  ASSERT_TRUE(slot.has_value());
  book->leave(*slot);
  EXPECT_TRUE(detail::ledger::list(dir_).empty());
  EXPECT_FALSE(book->claim(true).has_value());
  EXPECT_TRUE(book->unlinked());
}

class SharingInProcess : public process_test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tidepool-joining-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    ::setenv("TIDEPOOL_LEDGER_DIR", dir_.c_str(), 1);
    process_test::SetUp();
  }
  void TearDown() override {
    process_test::TearDown();
    ::unsetenv("TIDEPOOL_LEDGER_DIR");
    ::unsetenv("TIDEPOOL_SHARING");
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(SharingInProcess, AProcessJoinsItsGpusLedgerWithItsFirstPoolAndLeavesIt) {
  use_small_sim();
  EXPECT_TRUE(detail::ledger::list(dir_).empty());
  (void)device_pool(0);
  const auto devices = detail::sharing_devices();
  ASSERT_EQ(devices.size(), 1U);
  EXPECT_TRUE(devices[0].refused.empty()) << devices[0].refused;
  EXPECT_TRUE(devices[0].serving);
  const auto paths = detail::ledger::list(dir_);
  ASSERT_EQ(paths.size(), 1U);
  auto book = detail::ledger::open_existing(paths[0]);
  const auto entries = book->entries();
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(entries[0].pid, static_cast<std::uint64_t>(::getpid()));
  EXPECT_TRUE(entries[0].gives);
  stop_sharing();
  EXPECT_TRUE(detail::ledger::list(dir_).empty());
}

TEST_F(SharingInProcess, AForkedChildStartsWithNoLedgerAndLeavesItsParentsAlone) {
  use_small_sim();
  (void)device_pool(0);
  ASSERT_EQ(detail::sharing_devices().size(), 1U);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's helper thread is not here; the child's state is fresh, and its exit (atexit
    // stop) must neither wait for that thread nor free the parent's slot.
    const bool fresh = detail::sharing_devices().empty();
    std::exit(fresh ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const auto paths = detail::ledger::list(dir_);
  ASSERT_EQ(paths.size(), 1U);
  auto book = detail::ledger::open_existing(paths[0]);
  const auto entries = book->entries();
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(entries[0].pid, static_cast<std::uint64_t>(::getpid()));
  EXPECT_TRUE(detail::sharing_devices()[0].serving);
}

TEST_F(SharingInProcess, OptionsTurnItOffOrStopGiving) {
  ::setenv("TIDEPOOL_SHARING", "0", 1);
  detail::reset_sharing_for_testing();
  EXPECT_FALSE(get_sharing_options().enabled);
  use_small_sim();
  (void)device_pool(0);
  EXPECT_TRUE(detail::ledger::list(dir_).empty());
  // On again, never giving: the existing pool joins.
  sharing_options o;
  o.enabled = true;
  o.gives = false;
  o.wait = std::chrono::milliseconds(30);
  set_sharing_options(o);
  const auto paths = detail::ledger::list(dir_);
  ASSERT_EQ(paths.size(), 1U);
  auto book = detail::ledger::open_existing(paths[0]);
  ASSERT_EQ(book->entries().size(), 1U);
  EXPECT_FALSE(book->entries()[0].gives);
  EXPECT_EQ(get_sharing_options().wait.count(), 30);
  o.wait = std::chrono::milliseconds(60001);
  EXPECT_THROW(set_sharing_options(o), error);

  ::setenv("TIDEPOOL_SHARING", "maybe", 1);
  detail::reset_sharing_for_testing();
  try {
    (void)get_sharing_options();
    ADD_FAILURE() << "a malformed TIDEPOOL_SHARING was taken";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("TIDEPOOL_SHARING='maybe'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tidepool::testing
