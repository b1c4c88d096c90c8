// Per-thread caches in front of the pool's lock: a thread that keeps finding the lock held
// allocates and frees same-size blocks on its own, with no shared cache line touched.
//
// Why: one lock per device makes every allocate and free move the lock's cache line between
// cores, so two threads doing cached pairs together ran slower than one alone (docs/RESULTS.md,
// thread scaling). A thread cache holds a few blocks the pool has *lent* to one thread: in the
// pool's books a lent block is neither live nor free (block_state::lent; it stays in the live map
// so that a pointer to it is still found), and the thread hands it out and takes it back under a
// lock of its own, which no other thread takes in the steady state.
//
// What a cache may hold, and when (pool_thread_caches.cpp does the pool's side):
//   - Only when contended: once at least a sixteenth of a window of a pool's locked calls found
//     the lock held, each thread that takes the pool's lock from then on gets a cache
//     (pool_options::thread_caches). A program with one allocating thread never has one, so its
//     placement and figures are exactly as without.
//   - A block is lent when the thread frees it (on the stream it was allocated on, with no
//     record_stream streams): it then waits in the cache for a request of exactly its size, arena
//     and stream. Reuse on the stream it was freed on needs no event, as for the pool's own
//     free blocks. At most `entries` blocks and `max_bytes` bytes, each at most `max_block`.
//   - A miss that finds no free block grows the pool while growth fits its budget (lent blocks
//     count as in use there), so the pool grows to the threads' working set instead of taking
//     blocks from one cache to another for ever. Past the budget, and for release(), the
//     out-of-memory path and anything that looks at free blocks, the free ones come back first
//     (the pool's flush_parked); describe(), sleep, recording and forget_stream also take back
//     the ones handed out. So a cache never keeps memory away from release or a failing request.
//   - Figures stay exact: stats() adds what each cache has handed out. Only the peaks count lent
//     blocks as in use (an upper bound by at most the caches' free bytes).
//
// Locks: the pool's lock, then a cache's lock; a thread's own fast path takes its cache's lock
// only, and never the pool's while holding it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/block.hpp"
#include "core/spin_lock.hpp"
#include "tidepool/driver.hpp"

namespace tidepool::detail {

class arena;
class pool_impl;

/// One block lent to a thread. Its address and size are copies of the block's: the thread's fast
/// path reads them under the cache's lock only, and the block's own fields belong to the pool's.
struct lent_block {
  block* lent = nullptr;
  device_address address = 0;
  std::size_t size = 0;
  const arena* where = nullptr;
  stream_t stream = nullptr;   ///< the handle it is reused on (the legacy stream as nullptr)
  std::size_t requested = 0;   ///< while handed out: bytes asked for
  bool handed_out = false;
};

/// The blocks one thread holds for one pool, and what it handed out of them.
class thread_cache {
 public:
  static constexpr std::size_t entries = 8;
  static constexpr std::size_t max_bytes = std::size_t{64} << 20;
  static constexpr std::size_t max_block = std::size_t{32} << 20;

  /// A lent block of exactly `size` bytes of arena `where` waiting on `stream`, handed out for
  /// `requested` bytes; nullptr if none.
  void* take(std::size_t size, const arena* where, stream_t stream, std::size_t requested) noexcept {
    std::lock_guard guard(lock_);
    for (std::size_t i = 0; i < count_; ++i) {
      lent_block& e = blocks_[i];
      if (e.handed_out || e.size != size || e.where != where || e.stream != stream) continue;
      e.handed_out = true;
      e.requested = requested;
      out_bytes_ += size;
      out_requested_ += requested;
      ++out_count_;
      ++allocations_;
      return reinterpret_cast<void*>(e.address);
    }
    return nullptr;
  }
  /// Takes back the handed-out block at `address` freed on `stream`; false (nothing changed) if
  /// this cache did not hand it out or it was handed out for another stream.
  bool give(device_address address, stream_t stream) noexcept {
    std::lock_guard guard(lock_);
    for (std::size_t i = 0; i < count_; ++i) {
      lent_block& e = blocks_[i];
      if (e.address != address || !e.handed_out) continue;
      if (e.stream != stream) return false;
      e.handed_out = false;
      out_bytes_ -= e.size;
      out_requested_ -= e.requested;
      --out_count_;
      ++deallocations_;
      return true;
    }
    return false;
  }

  // --- the pool's side, under the pool's lock and lock() ---
  spin_lock& lock() noexcept { return lock_; }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  [[nodiscard]] lent_block& at(std::size_t i) noexcept { return blocks_[i]; }
  [[nodiscard]] std::size_t lent_bytes() const noexcept { return lent_bytes_; }
  /// Whether a block of `size` more bytes fits (entries and bytes).
  [[nodiscard]] bool has_room(std::size_t size) const noexcept {
    return count_ < entries && lent_bytes_ + size <= max_bytes;
  }
  void add(const lent_block& e) noexcept {
    blocks_[count_++] = e;
    lent_bytes_ += e.size;
  }
  /// Removes entry `i` (the last one moves into its place); a handed-out one leaves the counts.
  void remove(std::size_t i) noexcept {
    const lent_block& e = blocks_[i];
    lent_bytes_ -= e.size;
    if (e.handed_out) {
      out_bytes_ -= e.size;
      out_requested_ -= e.requested;
      --out_count_;
    }
    blocks_[i] = blocks_[--count_];
  }
  /// What this cache handed out and has not taken back, and its allocate/free counts so far.
  struct figures {
    std::size_t out_bytes = 0, out_requested = 0, out_count = 0;
    std::uint64_t allocations = 0, deallocations = 0;
  };
  [[nodiscard]] figures counts() const noexcept {
    return {out_bytes_, out_requested_, out_count_, allocations_, deallocations_};
  }

 private:
  spin_lock lock_;
  std::array<lent_block, entries> blocks_{};
  std::size_t count_ = 0;
  std::size_t lent_bytes_ = 0;
  std::size_t out_bytes_ = 0, out_requested_ = 0, out_count_ = 0;
  std::uint64_t allocations_ = 0, deallocations_ = 0;
};

/// What a thread that exits must reach: the pool, while it lives. The pool clears `pool` in its
/// destructor under `mutex`; a thread ending takes `mutex`, then the pool's lock. A thread making
/// a cache under another pool's lock only reads `pool` (atomic) to drop slots of dead pools, and
/// never takes a link's mutex there (that order, a pool's lock then a link's mutex, could close a
/// cycle with threads ending).
struct pool_link {
  std::mutex mutex;
  std::atomic<pool_impl*> pool{nullptr};
};

/// The calling thread's caches, trivially destructible so that the fast path reads it with no
/// guard. The default TLS model: a library that Python loads with dlopen cannot count on static
/// TLS room (initial-exec failed there with "cannot allocate memory in static TLS block"); the fast
/// paths read it only once their pool has caches.
struct thread_cache_slots {
  static constexpr std::size_t pools = 4;  ///< pools a thread keeps caches for

  std::array<std::uint64_t, pools> pool_ids{};  ///< 0: empty
  std::array<thread_cache*, pools> caches{};
  bool exiting = false;  ///< the thread's caches went back: never make one again
};

extern constinit thread_local thread_cache_slots this_thread_caches;

/// The calling thread's cache for the pool numbered `pool_id`, or nullptr.
[[nodiscard]] inline thread_cache* thread_cache_for(std::uint64_t pool_id) noexcept {
  thread_cache_slots& t = this_thread_caches;
  for (std::size_t i = 0; i < thread_cache_slots::pools; ++i) {
    if (t.pool_ids[i] == pool_id) return t.caches[i];
  }
  return nullptr;
}

/// When a pool starts giving its threads caches: of a window of its locked calls, how many found
/// the lock held (the pool's own counts, under its lock: no per-thread state on the fast path).
struct contention_window {
  static constexpr std::uint32_t calls = 256;
  static constexpr std::uint32_t contended_to_cache = 16;
};

/// Gives the calling thread a cache for `pool` (numbered `pool_id`, reached through `link`):
/// registers it in the thread's slots and in the thread's list that gives every cache back to its
/// pool when the thread ends. Returns nullptr when the thread has no free slot or is exiting.
std::shared_ptr<thread_cache> add_thread_cache(std::uint64_t pool_id, const std::shared_ptr<pool_link>& link);

/// A number for a new pool, never reused (0 is never handed out).
[[nodiscard]] std::uint64_t next_pool_id() noexcept;

/// Normalizes a stream handle as the caches compare it: CU_STREAM_LEGACY (0x1) is nullptr.
[[nodiscard]] inline stream_t cache_stream_key(stream_t stream) noexcept {
  return reinterpret_cast<std::uintptr_t>(stream) == 0x1 ? nullptr : stream;
}

}  // namespace tidepool::detail
