// The pool's lock: spins briefly, then sleeps on a futex until the holder wakes it.
//
// Why not std::mutex: an uncontended std::mutex lock+unlock is two calls into pthread around the
// same two atomic instructions; the fast path of the pool is a few dozen instructions, so the calls
// would be much of it. This lock is one compare-exchange to take and one exchange to drop, inline.
// Why not spin only: a waiter may find the lock held across a driver call of another thread
// (growth maps handles, tens of microseconds each); spinning or yielding there burns a core that
// the program's own threads want. So a waiter spins for about a microsecond (critical sections of
// the fast path are shorter), then sleeps in the kernel (FUTEX_WAIT) and is woken by the unlock
// that finds it waiting (the classic three-state futex mutex: 0 free, 1 held, 2 held with
// sleepers). The longest driver calls (device-wide waits, trimming the async pools, cuMemFree)
// are made with the lock dropped (unlocked_call.hpp).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace tidepool::detail {

/// A lock for short critical sections; satisfies Lockable (works with std::lock_guard).
class spin_lock {
 public:
  /// Takes the lock, spinning briefly and then sleeping while another thread holds it.
  void lock() noexcept {
    std::uint32_t expected = unheld;
    if (state_.compare_exchange_strong(expected, held, std::memory_order_acquire, std::memory_order_relaxed)) return;
    lock_contended();
  }
  /// Takes the lock if free; returns whether it did.
  [[nodiscard]] bool try_lock() noexcept {
    std::uint32_t expected = unheld;
    return state_.load(std::memory_order_relaxed) == unheld &&
           state_.compare_exchange_strong(expected, held, std::memory_order_acquire, std::memory_order_relaxed);
  }
  /// Drops the lock, waking one sleeper if any.
  void unlock() noexcept {
    if (state_.exchange(unheld, std::memory_order_release) == contended) wake_one();
  }

 private:
  static constexpr std::uint32_t unheld = 0;
  static constexpr std::uint32_t held = 1;
  static constexpr std::uint32_t contended = 2;
  static constexpr unsigned spins_before_sleeping = 128;  // about a microsecond of pause instructions

  void lock_contended() noexcept {
    for (unsigned spin = 0; spin < spins_before_sleeping; ++spin) {
      std::uint32_t expected = unheld;
      if (state_.load(std::memory_order_relaxed) == unheld &&
          state_.compare_exchange_weak(expected, held, std::memory_order_acquire, std::memory_order_relaxed)) {
        return;
      }
      pause();
    }
    // Announce a sleeper; whoever takes the lock from here on marks it so, since other sleepers may remain.
    while (state_.exchange(contended, std::memory_order_acquire) != unheld) {
      futex(FUTEX_WAIT_PRIVATE, contended);  // returns at once if the state changed meanwhile
    }
  }
  void wake_one() noexcept { futex(FUTEX_WAKE_PRIVATE, 1); }
  void futex(int op, std::uint32_t value) noexcept {
    static_assert(sizeof(state_) == sizeof(std::uint32_t), "futex needs a 32-bit word");
    (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_), op, value, nullptr, nullptr, 0);
  }
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }

  std::atomic<std::uint32_t> state_{unheld};
};

}  // namespace tidepool::detail
