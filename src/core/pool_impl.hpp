// pool_impl: the pool of one device. It owns the four arenas (small and large, each for scratch
// and for persistent requests), the page table, the map of live allocations, the streams and the
// figures, all under one lock.
//
// Fast paths (allocate/deallocate of cached memory) are inline here: validate, take the lock,
// find the stream (cached), take or give back a block in its arena, update the map and the
// figures. No heap allocation in the steady state, and no driver call in the common case; but a
// take() from a large arena splits a large handle that the new block would pin only a small part of
// (placement.cpp), and with an automatic release policy (pool_options::release) an operation may
// hand free handles back (after_operation). Everything else lives in:
//   pool_impl.cpp        construction, tear-down, record_stream, queries, stats, bad input
//   growth.cpp           mapping stolen or new handles under a request that the cache cannot serve
//   release_policy.cpp   events that make frees safe for every stream, release, automatic release
//   out_of_memory_path.cpp  reclaiming everywhere before giving up, and the report
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/address_map.hpp"
#include "core/arena.hpp"
#include "core/block.hpp"
#include "core/driver_calls.hpp"
#include "core/page_table.hpp"
#include "core/spin_lock.hpp"
#include "core/stream_order.hpp"
#include "core/units.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::detail {

class pool_impl {
 public:
  pool_impl(std::shared_ptr<driver> drv, int device, pool_options options);
  ~pool_impl();
  pool_impl(const pool_impl&) = delete;
  pool_impl& operator=(const pool_impl&) = delete;

  /// See tidepool::pool::allocate.
  void* allocate(std::size_t bytes, stream_t stream, lifetime hint) {
    if (bytes == 0 || bytes > device_total_) throw_invalid_size(bytes);
    const std::size_t size = round_up(bytes, block_alignment);
    arena& where = arena_for(size, hint);
    std::lock_guard guard(lock_);
    stream_state* s = streams_.find(stream);
    if (s == nullptr) s = &add_stream(stream);
    block* b = s->parked;
    if (b != nullptr && b->size == size && b->owner_arena == &where) {
      s->parked = nullptr;
      b->state = block_state::live;
    } else {
      // Not the same size: the parked block joins its neighbours now, so placement is exactly
      // what it would have been without parking.
      if (b != nullptr) {
        s->parked = nullptr;
        b->owner_arena->give_back(b, s->slot, b->free_sequence, b->freed_tick);
      }
      b = where.take(size, s->slot);
      if (b == nullptr) b = allocate_slow(where, size, bytes, *s);
    }
    b->requested = bytes;
    live_.insert(b->address, b);
    in_use_ += size;
    requested_ += bytes;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    peak_requested_ = std::max(peak_requested_, requested_);
    ++allocations_;
    if (automatic_release_) after_operation(false);
    return reinterpret_cast<void*>(b->address);
  }

  /// See tidepool::pool::deallocate.
  void deallocate(void* ptr, stream_t stream) {
    const auto address = reinterpret_cast<device_address>(ptr);
    std::lock_guard guard(lock_);
    block* b = live_.find(address);
    if (b == nullptr) throw_bad_pointer("deallocate", ptr);
    stream_state* s = streams_.find(stream);
    if (s == nullptr) s = &add_stream(stream);
    live_.erase(address);
    in_use_ -= b->size;
    requested_ -= b->requested;
    ++deallocations_;
    const std::uint64_t sequence = ++free_sequence_;
    s->last_free = sequence;
    if (b->has_extra_streams) {
      free_with_extra_streams(b, *s, sequence);
    } else {
      // Park it as the stream's last free; the one parked before goes to its free index.
      if (block* older = s->parked) older->owner_arena->give_back(older, s->slot, older->free_sequence, older->freed_tick);
      b->state = block_state::parked;
      b->owner = s->slot;
      b->free_sequence = sequence;
      b->freed_tick = tick_;
      s->parked = b;
    }
    if (automatic_release_) after_operation(true);
  }

  void record_stream(void* ptr, stream_t stream);
  std::size_t release();
  [[nodiscard]] std::size_t allocation_size(const void* ptr);
  [[nodiscard]] bool owns(const void* ptr);
  [[nodiscard]] std::size_t available_bytes();
  [[nodiscard]] pool_stats stats();
  void enable_peer_access(int peer_device);

  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] const pool_options& options() const noexcept { return options_; }
  [[nodiscard]] const std::shared_ptr<driver>& get_driver() const noexcept { return driver_; }

 private:
  enum class growth { grown, no_memory };

  [[nodiscard]] arena& arena_for(std::size_t size, lifetime hint) noexcept {
    const unsigned tier = size < options_.small_size_threshold ? 0u : 2u;
    return *arenas_[tier + (hint == lifetime::persistent ? 1u : 0u)];
  }

  // pool_impl.cpp
  stream_state& add_stream(stream_t stream);
  [[noreturn]] void throw_invalid_size(std::size_t bytes) const;
  [[noreturn]] void throw_bad_pointer(const char* operation, const void* ptr);
  void free_with_extra_streams(block* b, stream_state& s, std::uint64_t sequence);

  // growth.cpp
  block* allocate_slow(arena& where, std::size_t size, std::size_t requested, stream_state& s);
  growth grow(arena& where, std::size_t size);
  [[nodiscard]] bool within_limits(std::size_t bytes, std::size_t& headroom_budget);

  // release_policy.cpp
  /// Gives every parked block to its free index (before any slow path looks at free blocks).
  void flush_parked();
  /// Hands to slot 0 the frees whose events completed (wait: waits for the whole device first,
  /// see wait_for_device).
  void settle_frees(bool wait);
  void settle_stream(stream_state& s);
  /// Synchronizes the device (no event on any user stream) and hands every free to slot 0.
  void wait_for_device();
  /// Unmaps and releases up to `want` bytes of whole free handles freed at or before tick
  /// `freed_by` (fallback: wholly free segments); returns the bytes handed back.
  std::size_t release_free(std::size_t want, std::uint64_t freed_by);
  void after_operation(bool freed);

  // out_of_memory_path.cpp
  block* out_of_memory_path(arena& where, std::size_t size, std::size_t requested, stream_state& s);
  [[nodiscard]] std::size_t largest_possible(std::size_t driver_free);

  std::shared_ptr<driver> driver_;
  int device_;
  pool_options options_;
  driver_calls calls_;
  page_table pages_;
  block_slab slab_;
  std::array<std::unique_ptr<arena>, arena_kinds> arenas_;
  address_map live_;
  stream_registry streams_;
  event_pool events_;
  std::vector<pending_free> pending_;
  std::unordered_map<block*, std::vector<stream_t>> extra_streams_;
  spin_lock lock_;

  bool virtual_memory_ = true;
  bool automatic_release_ = false;
  std::size_t device_total_ = 0;
  std::size_t in_use_ = 0;
  std::size_t requested_ = 0;
  std::size_t peak_in_use_ = 0;
  std::size_t peak_requested_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t deallocations_ = 0;
  std::uint64_t recoveries_ = 0;
  std::uint64_t free_sequence_ = 0;
  // Coarse time in milliseconds on the decay clock (release_policy::clock) since the pool's first
  // operation, read on it and every 64th after it when a decay is set (0 otherwise): blocks
  // remember it when freed.
  std::uint64_t tick_ = 0;
  std::uint64_t last_decay_check_ = 0;
  std::uint64_t clock_origin_ = 0;  // the clock's reading at the first operation
  std::uint64_t operations_since_clock_ = 0;
  std::size_t trim_floor_ = 0;  // max_cached_bytes: do not trim again until cached passes this
};

}  // namespace tidepool::detail
