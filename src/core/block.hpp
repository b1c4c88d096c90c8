// A block: one address range of an arena, live or free, and the slab its nodes come from.
//
// Every byte of a reserved range belongs to exactly one block. Blocks of a range form a doubly
// linked list in address order (prev/next), so a freed block finds the neighbours it coalesces
// with in O(1). Free blocks also sit on one list of a free index (link_prev/link_next), which is
// intrusive so that moving a block costs no allocation. Block nodes come from a slab and are
// recycled, never given back to the heap while the pool lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tidepool/driver.hpp"

namespace tidepool::detail {

class arena;
class thread_cache;
struct address_range;

/// What a block is now.
enum class block_state : std::uint8_t {
  live,           ///< handed out by allocate()
  free_mapped,    ///< free, every page under it mapped: in a free index, reusable without the driver
  free_unmapped,  ///< free address space with no page mapped (page aligned): in the arena's VA index
  pending,        ///< freed, waiting for the events of record_stream() streams
  busy,           ///< taken out of every index by a slow path that is working on it
  moving,         ///< being handed from one stream slot to slot 0 (make_global)
  parked,         ///< freed, kept whole as its stream's last free for a same-size reuse
  lent,           ///< in a thread's cache (thread_cache.hpp): handed out by it, or waiting there
  dead,           ///< back in the slab
};

/// One block. Fields are ordered so the fast path touches the first cache line only.
struct block {
  device_address address = 0;
  std::size_t size = 0;
  block* prev = nullptr;       ///< neighbour below, same range
  block* next = nullptr;       ///< neighbour above, same range
  block* link_prev = nullptr;  ///< free index list
  block* link_next = nullptr;
  std::uint64_t free_sequence = 0;  ///< free_mapped: when it was freed (pool-wide counter)
  std::uint32_t owner = 0;          ///< free_mapped: stream slot that may reuse it (0 = any); live: slot allocated on
  std::uint16_t bin = 0;            ///< free index bin
  block_state state = block_state::dead;
  bool has_extra_streams = false;   ///< live: record_stream() named other streams
  std::size_t requested = 0;        ///< live: bytes asked for
  std::uint64_t freed_tick = 0;     ///< free_mapped: coarse time of the free (decay release)
  address_range* range = nullptr;
  arena* owner_arena = nullptr;
  thread_cache* lent_to = nullptr;  ///< lent: the cache that holds it

  [[nodiscard]] device_address end() const noexcept { return address + size; }
};

/// Hands out block nodes from chunks and takes them back on a free list.
class block_slab {
 public:
  /// A fresh node (state dead, fields zeroed except what the caller sets).
  [[nodiscard]] block* make() {
    if (free_ == nullptr) grow();
    block* b = free_;
    free_ = b->link_next;
    *b = block{};
    return b;
  }
  /// Returns a node; its state becomes dead so stale pointers in a slow path can tell.
  void recycle(block* b) noexcept {
    b->state = block_state::dead;
    b->link_next = free_;
    free_ = b;
  }

 private:
  static constexpr std::size_t chunk_blocks = 256;
  void grow() {
    chunks_.push_back(std::make_unique<block[]>(chunk_blocks));
    block* chunk = chunks_.back().get();
    for (std::size_t i = 0; i < chunk_blocks; ++i) recycle(&chunk[i]);
  }

  std::vector<std::unique_ptr<block[]>> chunks_;
  block* free_ = nullptr;
};

}  // namespace tidepool::detail
