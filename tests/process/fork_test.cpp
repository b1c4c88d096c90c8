// fork() beside threads that use a pool (a data-loader forking workers while the training thread
// allocates): the device's pool, its thread caches, a tag's pool and a pool the program made
// itself are usable in the child, never a copy locked by a thread the child does not have; the
// child holds no copy of the pools' kept exports. Not in the ThreadSanitizer suite: it forks a
// multi-threaded process.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "process/process_fixture.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/process.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::testing {
namespace {

using fork_test = process_test;

// Waits for `child` up to `limit`; kills it past that. Returns its wait status, or -1 if killed.
int wait_or_kill(pid_t child, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < until) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(child, SIGKILL);
  (void)::waitpid(child, &status, 0);
  return -1;
}

// Forks 100 children while another thread runs `busy` in a loop; each child runs `in_child` and
// exits. A child that does not finish in 10 s is killed and counted: it found a lock held by a
// thread it does not have.
template <typename Busy, typename InChild>
void expect_children_finish_beside(Busy busy, InChild in_child) {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> rounds{0};
  std::thread other([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      busy();
      rounds.fetch_add(1, std::memory_order_relaxed);
    }
  });
  while (rounds.load() < 1000) std::this_thread::yield();
  int hung = 0;
  for (int i = 0; i < 100 && hung == 0; ++i) {
    const pid_t child = ::fork();
    if (child < 0) {
      ADD_FAILURE() << "fork() failed";
      break;  // the other thread is still to be joined
    }
    if (child == 0) {
      in_child();
      std::_Exit(0);  // no atexit handlers: only the pool is under test
    }
    const int status = wait_or_kill(child, std::chrono::seconds(10));
    if (status == -1) {
      ++hung;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "fork " << i;
    }
  }
  stop.store(true);
  other.join();
  std::printf("the other thread made %llu rounds beside the forks\n", static_cast<unsigned long long>(rounds.load()));
  EXPECT_EQ(hung, 0) << "a child found a lock held by a thread it does not have";
}

TEST_F(fork_test, AChildForkedWhileAnotherThreadAllocatesCanUseThePool) {
  use_small_sim();
  pool& shared = device_pool(0);
  expect_children_finish_beside([&] { shared.deallocate(shared.allocate(4096)); },
                                [] {
                                  for (int k = 0; k < 10; ++k) device_pool(0).deallocate(device_pool(0).allocate(8192));
                                });
}

// The other thread allocates through its thread cache, holding only the cache's lock; the child
// then hands the pool's cache back, which takes every cache's lock.
TEST_F(fork_test, AChildForkedWhileAnotherThreadUsesItsThreadCacheCanReleaseThePool) {
  use_small_sim();
  pool_options options;
  options.thread_caches = thread_cache_policy::always;
  set_default_pool_options(options);
  pool& shared = device_pool(0);
  std::size_t caches_seen = 0;
  expect_children_finish_beside(
      [&, round = std::uint32_t{0}]() mutable {
        shared.deallocate(shared.allocate(4096));
        if (++round % 4096 == 0) caches_seen = std::max(caches_seen, shared.stats().thread_caches);
      },
      [] {
        device_pool(0).deallocate(device_pool(0).allocate(8192));
        (void)device_pool(0).stats();
        (void)device_pool(0).release();
      });
  EXPECT_EQ(caches_seen, 1u);  // the other thread's, in use while the children were forked
}

// A pool the program made itself (not the process's) is locked across fork() too.
TEST_F(fork_test, AChildForkedWhileAnotherThreadUsesAPoolTheProgramMadeCanUseIt) {
  pool own(std::make_shared<sim_driver>(sim_config{}), 0);
  expect_children_finish_beside([&] { own.deallocate(own.allocate(4096)); },
                                [&] {
                                  for (int k = 0; k < 10; ++k) own.deallocate(own.allocate(8192));
                                });
}

// A tag's pool (tidepool::tag_pool) is locked across fork() as the devices' pools are.
TEST_F(fork_test, AChildForkedWhileAnotherThreadAllocatesFromATagsPoolCanUseIt) {
  use_small_sim();
  pool& tagged = tag_pool("fork-test", 0);
  expect_children_finish_beside([&] { tagged.deallocate(tagged.allocate(4096)); },
                                [] {
                                  pool& p = tag_pool("fork-test", 0);
                                  for (int k = 0; k < 10; ++k) p.deallocate(p.allocate(8192));
                                });
}

// The descriptors a pool keeps for its exported handles (memory shared with other processes) are
// closed in a forked child: open there, each would keep its handle's memory alive after the
// parent released it. On sim without host backing an export is a memfd of its own.
TEST_F(fork_test, AChildForkedAfterAnExportHoldsNoCopyOfIt) {
  pool own(std::make_shared<sim_driver>(sim_config{}), 0);
  void* p = own.allocate(4 * MiB);
  const auto sim_exports_open = [] {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code error;
      const auto target = std::filesystem::read_symlink(entry.path(), error).string();
      if (target.find("tidepool-sim-handle") != std::string::npos) ++n;
    }
    return n;
  };
  const int before = sim_exports_open();
  exported_allocation e = own.export_allocation(p);
  for (const int fd : e.fds) ::close(fd);
  ASSERT_EQ(sim_exports_open(), before + 1) << "the kept export";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(sim_exports_open() == before ? 0 : 1);
  const int status = wait_or_kill(child, std::chrono::seconds(10));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child holds the export";
  EXPECT_EQ(sim_exports_open(), before + 1) << "the parent keeps it";
  own.deallocate(p);
  (void)own.release();
  EXPECT_EQ(sim_exports_open(), before) << "closed with its handle";
}

}  // namespace
}  // namespace tidepool::testing
