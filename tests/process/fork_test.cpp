// fork() beside threads that use the process's pool (a data-loader forking workers while the
// training thread allocates): the child's pool is usable, never a copy locked by a thread the
// child does not have. Not in the ThreadSanitizer suite: it forks a multi-threaded process.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "process/process_fixture.hpp"
#include "tidepool/pool.hpp"

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

TEST_F(fork_test, AChildForkedWhileAnotherThreadAllocatesCanUseThePool) {
  use_small_sim();
  pool& shared = device_pool(0);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> pairs{0};
  std::thread busy([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      shared.deallocate(shared.allocate(4096));
      pairs.fetch_add(1, std::memory_order_relaxed);
    }
  });
  while (pairs.load() < 1000) std::this_thread::yield();
  int hung = 0;
  for (int i = 0; i < 100 && hung == 0; ++i) {
    const pid_t child = ::fork();
    if (child < 0) {
      ADD_FAILURE() << "fork() failed";
      break;  // the other thread is still to be joined
    }
    if (child == 0) {
      for (int k = 0; k < 10; ++k) device_pool(0).deallocate(device_pool(0).allocate(8192));
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
  busy.join();
  std::printf("the other thread made %llu allocate + free pairs beside the forks\n",
              static_cast<unsigned long long>(pairs.load()));
  EXPECT_EQ(hung, 0) << "a child's pool stayed locked by a thread it does not have";
}

}  // namespace
}  // namespace tidepool::testing
