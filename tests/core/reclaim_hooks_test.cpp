// The reclaim hook registry: removal waits for calls in progress on other threads (after it
// returns, what a hook captured may be freed), a hook may remove itself from inside its own call,
// and a removed hook is never called again.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tidepool/errors.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool::testing {
namespace {

// A gate a hook waits at until the test opens it.
struct gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool entered = false;
  bool open = false;

  void enter_and_wait() {
    std::unique_lock lock(mutex);
    entered = true;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
  }
  void wait_entered() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return entered; });
  }
  void let_go() {
    std::lock_guard lock(mutex);
    open = true;
    changed.notify_all();
  }
};

TEST(ReclaimHooks, RemovalWaitsForACallInProgress) {
  gate g;
  std::atomic<bool> call_returned{false};
  const int id = add_reclaim_hook([&](int, std::size_t) -> std::size_t {
    g.enter_and_wait();
    call_returned = true;
    return 0;
  });
  std::thread caller([] { (void)run_reclaim_hooks(0, 1); });
  g.wait_entered();
  std::atomic<bool> removed{false};
  bool hook_done_when_removed = false;
  std::thread remover([&] {
    remove_reclaim_hook(id);
    hook_done_when_removed = call_returned;
    removed = true;
  });
  // Give a broken removal every chance to return early; a correct one cannot.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(removed) << "remove_reclaim_hook returned while the hook was running";
  g.let_go();
  remover.join();
  caller.join();
  EXPECT_TRUE(hook_done_when_removed) << "the hook was still running when its removal returned";
}

TEST(ReclaimHooks, AHookMayRemoveItself) {
  int calls = 0;
  int id = 0;
  id = add_reclaim_hook([&](int, std::size_t) -> std::size_t {
    ++calls;
    remove_reclaim_hook(id);  // must not wait for this very call
    return 7;
  });
  EXPECT_EQ(run_reclaim_hooks(0, 1), 7u);
  EXPECT_EQ(run_reclaim_hooks(0, 1), 0u);
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(remove_reclaim_hook(id), error);
}

TEST(ReclaimHooks, AHookRemovedDuringARunIsNotCalledByIt) {
  int second_calls = 0;
  int second = 0;
  const int first = add_reclaim_hook([&](int, std::size_t) -> std::size_t {
    remove_reclaim_hook(second);  // the run already took its list of hooks
    return 0;
  });
  second = add_reclaim_hook([&](int, std::size_t) -> std::size_t {
    ++second_calls;
    return 0;
  });
  (void)run_reclaim_hooks(0, 1);
  EXPECT_EQ(second_calls, 0);
  remove_reclaim_hook(first);
}

}  // namespace
}  // namespace tidepool::testing
