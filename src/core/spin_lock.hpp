// The pool's lock: spins briefly, then sleeps on a futex until the holder wakes it.
//
// Why not std::mutex: an uncontended std::mutex lock+unlock is two calls into pthread and two
// locked instructions; the fast path of the pool is a few dozen instructions, so the lock would be
// most of it. This one is an exchange to take and a plain store to drop, inline. (Dropping it
// with an exchange, as the classic futex mutex does to learn whether anyone sleeps, cost 6.5 ns of
// the 10 ns of a cached allocate or deallocate: docs/RESULTS.md.)
// Why not spin only: a waiter may find the lock held across a driver call of another thread
// (growth maps handles, tens of microseconds each); spinning or yielding there burns a core that
// the program's own threads want. So a waiter spins for about a microsecond (critical sections of
// the fast path are shorter), then counts itself among the sleepers and sleeps in the kernel
// (FUTEX_WAIT, which returns at once if the lock was dropped meanwhile); unlock wakes one sleeper
// when it sees any. Without a fence between unlock's store and its look at the sleepers, a sleeper
// that announced itself in the few nanoseconds before the store became visible could be missed;
// so sleeps are bounded (max_sleep) and a missed wake-up costs at most that. The longest driver
// calls (device-wide waits, trimming the async pools, cuMemFree) run with the lock dropped
// (unlocked_call.hpp), and release() passes the lock to sleepers between steps of its work.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tidepool::detail {

/// A lock for short critical sections; satisfies Lockable (works with std::lock_guard).
class spin_lock {
 public:
  /// Takes the lock, spinning briefly and then sleeping while another thread holds it.
  void lock() noexcept {
    if (held_.exchange(1, std::memory_order_acquire) == 0) return;
    lock_contended();
  }
  /// Takes the lock as lock() does; returns whether another thread held it when asked.
  [[nodiscard]] bool lock_and_tell() noexcept {
    if (held_.exchange(1, std::memory_order_acquire) == 0) return false;
    lock_contended();
    return true;
  }
  /// Takes the lock if free; returns whether it did.
  [[nodiscard]] bool try_lock() noexcept {
    return held_.load(std::memory_order_relaxed) == 0 && held_.exchange(1, std::memory_order_acquire) == 0;
  }
  /// Drops the lock, waking one sleeper if any.
  void unlock() noexcept {
    held_.store(0, std::memory_order_release);
    if (sleepers_.load(std::memory_order_relaxed) != 0) futex(FUTEX_WAKE_PRIVATE, 1, nullptr);
  }
  /// Lets a thread sleeping on the lock have it, if one is, and takes it back: a holder working
  /// through a long series of steps calls it between them, so a waiter waits for one step only.
  void pass_to_sleepers() noexcept {
    if (sleepers_.load(std::memory_order_relaxed) == 0) return;
    unlock();
    // The sleeper needs some microseconds to wake: wait until it holds the lock (or a millisecond).
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(1000);
    while (held_.load(std::memory_order_relaxed) == 0 && std::chrono::steady_clock::now() < until) pause();
    lock();
  }

 private:
  static constexpr unsigned spins_before_sleeping = 128;  // about a microsecond of pause instructions
  static constexpr long max_sleep_ns = 500'000;

  void lock_contended() noexcept {
    for (unsigned spin = 0; spin < spins_before_sleeping; ++spin) {
      if (held_.load(std::memory_order_relaxed) == 0 && held_.exchange(1, std::memory_order_acquire) == 0) return;
      pause();
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    const timespec bound{0, max_sleep_ns};
    while (held_.exchange(1, std::memory_order_acquire) != 0) {
      futex(FUTEX_WAIT_PRIVATE, 1, &bound);  // returns at once if the lock was dropped meanwhile
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  void futex(int op, std::uint32_t value, const timespec* timeout) noexcept {
    static_assert(sizeof(held_) == sizeof(std::uint32_t), "futex needs a 32-bit word");
    (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&held_), op, value, timeout, nullptr, 0);
  }
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }

  std::atomic<std::uint32_t> held_{0};
  std::atomic<std::uint32_t> sleepers_{0};
};

}  // namespace tidepool::detail
