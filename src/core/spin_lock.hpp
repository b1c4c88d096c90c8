// The pool's lock: a test-and-set spin lock that yields after a short spin.
//
// Why not std::mutex: an uncontended std::mutex lock+unlock costs two locked instructions and two
// calls into pthread; the fast path of the pool is a few dozen instructions, so the lock would be
// most of it. This lock costs one exchange to take and one plain store to drop. Slow paths that
// wait for the GPU (event_synchronize) hold it for long; waiters then yield instead of burning a core.
#pragma once

#include <atomic>
#include <thread>

namespace tidepool::detail {

/// A small lock for short critical sections; satisfies Lockable (works with std::unique_lock).
class spin_lock {
 public:
  /// Takes the lock, spinning briefly and then yielding while another thread holds it.
  void lock() noexcept {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    lock_contended();
  }
  /// Takes the lock if free; returns whether it did.
  [[nodiscard]] bool try_lock() noexcept {
    return !held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire);
  }
  /// Drops the lock.
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  void lock_contended() noexcept {
    for (unsigned spins = 0;; ++spins) {
      if (!held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire)) return;
      if (spins >= 64) std::this_thread::yield();
    }
  }

  std::atomic<bool> held_{false};
};

}  // namespace tidepool::detail
