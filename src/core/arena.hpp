// An arena: the blocks of one region kind (small or large requests, scratch or persistent) in
// reserved address ranges of its own, and the free indices that reuse them.
//
// Keeping kinds apart is what stops retention: a small or persistent block is never carved from a
// freed scratch region, so it never pins one (DESIGN 1.1). All requests of a granule's half or
// more share one large arena: blocks of every size fill each other's holes, as in one expandable
// segment (a separate arena for the largest requests fragments on its own: docs/RESULTS.md,
// section 0). Within an arena:
//  - free blocks with every page mapped sit in a free index per stream slot (slot 0: any stream);
//    take() and give_back() are the fast path: split, coalesce, no driver call in the common case
//    (requests of a granule or more are placed by placement.cpp, which may split a large handle);
//  - free address space with no page mapped sits in a by-size set, the room growth maps into;
//  - growth (virtual memory): open_window() picks that room (joined to a free mapped block just
//    below it, so fewer pages are mapped), the pool maps stolen or new handles there, and
//    close_window() turns the mapped part into a free block;
//  - unmap_free_handles() cuts whole free handles out of free blocks of slot 0 (free and safe for
//    every stream), for release or for stealing;
//  - without the virtual memory API, each range is one mem_alloc segment, given back when wholly free.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "core/block.hpp"
#include "core/free_index.hpp"
#include "core/page_table.hpp"

namespace tidepool::detail {

/// The regions of a pool: two size tiers, each for scratch and for persistent requests.
enum class arena_kind : std::uint8_t {
  small_scratch, small_persistent,  ///< up to options.small_size_threshold (1 MiB): granule handles, shared pages
  large_scratch, large_persistent,  ///< the rest: handles sized by the growth that made them (page_table.cpp)
};
inline constexpr unsigned arena_kinds = 4;

struct arena_settings {
  arena_kind kind = arena_kind::large_scratch;
  bool virtual_memory = true;
  bool large_handles = false;       ///< may map handles larger than the granularity
  std::size_t range_bytes = 0;      ///< size of each address reservation
  bool aliases = false;             ///< may map a free handle a second time (pool_options::alias_free_handles)
};

/// The free blocks on either side of a room that a growth window joins (either may be nullptr).
struct joined_blocks {
  block* below = nullptr;
  block* above = nullptr;
  [[nodiscard]] bool has(const block* b) const noexcept { return b != nullptr && (b == below || b == above); }
};

class arena {
 public:
  arena(arena_settings settings, page_table& pages, driver_calls& calls, block_slab& slab);
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;
  ~arena();

  // --- fast path ---
  /// A free mapped block of at least `bytes` reusable on stream `slot`, split to `bytes` and
  /// marked live; nullptr if none. With `may_wait`, nullptr also when the best fit would cut a
  /// handle larger than growth makes now (one that wake() joined, or at the device's limit one
  /// made before it) while stream `slot`'s frees there are not known complete (waits_for_frees()
  /// then says so): the pool waits for the stream and takes again.
  [[nodiscard]] block* take(std::size_t bytes, std::uint32_t slot, bool may_wait = false) {
    if (bytes >= granularity_ || guards_large_handles_) return take_placed(bytes, slot, may_wait);
    block* own = slots_[slot]->find(bytes);
    block* any = slot != 0 ? slots_[0]->find(bytes) : nullptr;
    block* b = (own != nullptr && (any == nullptr || own->size <= any->size)) ? own : any;
    if (b == nullptr) return nullptr;
    slots_[b->owner]->remove(b);
    if (b->size > bytes) split_free(b, bytes);
    b->state = block_state::live;
    b->owner = slot;
    return b;
  }
  /// Whether the last take(..., true) declined to wait for the stream's frees (see take()).
  [[nodiscard]] bool waits_for_frees() const noexcept { return waits_for_frees_; }
  /// Whether parked block `p` (its stream's last free, in no index), given back to free index
  /// `free_slot` and then asked for again by a request of its size on stream `slot`, would be
  /// served at its own address by take(): given back it becomes `p` joined with a free neighbour
  /// above it, if any (one below would move its start), and that block must come first in best
  /// fit's order (size, then address; the small regions take their own stream's fit first) before
  /// the best other block of each index take() looks in, and lie inside the mapped memory or be
  /// the only fit (the frontier rule). May say no where take() would serve it there (then take()
  /// decides); never yes where it would not, so handing a parked block out again places as best
  /// fit does.
  [[nodiscard]] bool parked_is_best_fit(const block* p, std::uint32_t slot, std::uint32_t free_slot) const noexcept {
    if (settings_.aliases) return true;  // aliasing places by its own rules (clear_start); measured as is
    if (joins(p->prev, free_slot)) return false;
    const block* above = joins(p->next, free_slot) ? p->next : nullptr;
    const std::size_t joined = p->size + (above != nullptr ? above->size : 0);
    const block* own = slots_[slot]->find(p->size, above);
    const block* any = slot != 0 ? slots_[0]->find(p->size, above) : nullptr;
    const bool small_path = p->size < granularity_ && !guards_large_handles_;
    if (!small_path) {
      if (at_frontier(above != nullptr ? above : p)) return own == nullptr && any == nullptr;
      // A candidate at the frontier ranks behind blocks inside the mapped memory: not judged here.
      if ((own != nullptr && at_frontier(own)) || (any != nullptr && at_frontier(any))) return false;
      // Past the growth budget a wasteful fit may give way to an extension (take_placed).
      if (settings_.large_handles && joined - p->size > p->size / extension_divisor &&
          growth_would_steal_ != nullptr && growth_would_steal_(pool_, p->size)) {
        return false;
      }
    }
    auto first = [&](const block* c) {  // the joined block before c in best fit's order
      return c == nullptr || joined < c->size || (joined == c->size && p->address < c->address);
    };
    if (!small_path || slot == 0) return first(own) && first(any);
    // The small path takes its own stream's best fit unless the other index's is smaller.
    if (free_slot == slot) return first(own) && (any == nullptr || joined <= any->size);
    return first(any) && (own == nullptr || own->size > joined);
  }
  /// Makes live block `b` free on stream `slot` (coalescing with free neighbours it may join).
  void give_back(block* b, std::uint32_t slot, std::uint64_t sequence, std::uint64_t tick) {
    if (settings_.aliases) count_live(*b, -1, slot, sequence);
    b->state = block_state::free_mapped;
    b->owner = slot;
    b->free_sequence = sequence;
    b->freed_tick = tick;
    b->has_extra_streams = false;
    coalesce_free(b);
    slots_[b->owner]->insert(b);
  }

  /// Whether take() serves what growth just mapped for the request: no passing over a wasteful
  /// fit for an extension, and no passing over a block at the frontier (placement.cpp), which is
  /// where an extension lies. The slow path turns it on around growth and off after.
  void serve_growth(bool on) noexcept {
    serving_growth_ = on;
  }

  /// What placement asks the pool that owns the arena (queries, no change to the pool's state):
  ///   - frees_done: whether the frees of stream `slot` up to free number `sequence` are known
  ///     complete on the GPU; splitting a large handle under a free block of the request's own
  ///     stream is safe only then.
  ///   - growth_would_steal: whether growing by `bytes` would take held memory past the pool's
  ///     growth budget, so that growth would steal; only then does take() pass over a wasteful fit
  ///     to extend a smaller free block (placement.cpp).
  using frees_done_fn = bool (*)(void* pool, std::uint32_t slot, std::uint64_t sequence);
  using growth_would_steal_fn = bool (*)(void* pool, std::size_t bytes);
  void set_pool_queries(void* pool, frees_done_fn frees_done, growth_would_steal_fn growth_would_steal) noexcept {
    pool_ = pool;
    frees_done_ = frees_done;
    growth_would_steal_ = growth_would_steal;
  }

  /// Makes room for stream slots up to `count` - 1.
  void ensure_slots(std::uint32_t count);
  /// Whether stream `slot` owns free blocks here.
  [[nodiscard]] bool has_free(std::uint32_t slot) const noexcept { return !slots_[slot]->empty(); }
  /// Bytes of the free blocks stream `slot` owns here.
  [[nodiscard]] std::size_t free_bytes(std::uint32_t slot) const noexcept { return slots_[slot]->bytes(); }
  /// Blocks freed on `slot` at or before `watermark` become reusable on any stream.
  void make_global(std::uint32_t slot, std::uint64_t watermark);

  // --- growth with the virtual memory API ---
  /// Free address space that a request of `bytes` is mapped into.
  struct window {
    block* below = nullptr;  ///< a free mapped block just below `room`, joined to it (or nullptr)
    block* room = nullptr;   ///< free unmapped space (busy while the window is open)
    block* above = nullptr;  ///< a free mapped block just above `room`, joined if room is all mapped
    std::size_t map_bytes = 0;       ///< bytes that must be mapped from room->address
    device_address cursor = 0;       ///< where the next handle goes
  };
  /// Opens a window for `bytes` requested on stream `slot`, reserving a new range when no free
  /// space fits. Only the stream's own ranges (address_range::stream_slot) are looked in: each
  /// stream grows in address ranges of its own, as PyTorch's expandable segments give each stream a
  /// segment, so two streams' blocks never interleave and neither's free memory is cut up by the
  /// other's live blocks (docs/RESULTS.md, section 0, "Streams that each allocate"); another
  /// stream's room only when no address space is left for a range. A room serves with the free
  /// mapped blocks on either side of it (of any stream or of `slot`), so the free tail of a page
  /// next to a live block is used, not stranded: the room take() chose for an extension or the
  /// out-of-memory path planned (prefer_room), else the first room that serves by size from two
  /// granules short of the request (up to max_room_scan), else the smallest room the request fits
  /// alone.
  driver_status open_window(std::size_t bytes, std::uint32_t slot, window& w);
  /// The growth for `bytes` on stream `slot` that maps the fewest new bytes, over every room of
  /// the stream's ranges with the free blocks beside it, each costed as open_window() costs it.
  struct growth_plan {
    block* room = nullptr;      ///< the room; nullptr when none serves (growth reserves a range)
    joined_blocks joined;       ///< the free blocks beside it that the window would join
    std::size_t map_bytes = 0;  ///< bytes to map (the request rounded up when room is nullptr)
  };
  [[nodiscard]] growth_plan cheapest_growth(std::size_t bytes, std::uint32_t slot) const;
  /// Makes the next open_window() for `slot` take `room` while it still serves (the out-of-memory
  /// path, after handing back what cheapest_growth() lacked).
  void prefer_room(block* room, std::uint32_t slot) noexcept {
    extension_room_ = room;
    extension_slot_ = slot;
  }
  /// Turns [room start, cursor) into a free mapped block (freed at `tick`), of the stream whose
  /// free blocks it joined or else of any stream, and returns the rest of the room.
  void close_window(window& w, std::uint64_t tick);
  /// Unmaps whole handles that lie in free blocks of any stream freed at or before `freed_by`
  /// (smallest blocks first, the blocks in `keep` left alone), while `want` > 0, each no larger
  /// than `room` nor `largest_handle` and no smaller than `smallest_handle`;
  /// appends their ids to `out` and subtracts their sizes from `want` and `room`.
  driver_status unmap_free_handles(std::size_t& want, std::size_t& room, std::uint64_t freed_by,
                                   std::vector<std::uint32_t>& out, std::size_t largest_handle,
                                   std::size_t smallest_handle = 0, joined_blocks keep = {});

  // --- aliases (pool_options::alias_free_handles; aliases.cpp) ---
  /// Maps handles of this arena that no live block touches a further time at the window's cursor,
  /// the largest first, up to `most` bytes (none touching the window's blocks; their frees known
  /// complete for `slot`); returns the bytes mapped, `status` the first failure.
  std::size_t map_idle_aliases(window& w, std::size_t most, std::uint32_t slot, driver_status& status);
  /// Unmaps every further mapping of handles no live block touches, whose frees are known complete
  /// and which lie wholly in free blocks of any stream (release(): a handle goes back with its last
  /// mapping, which unmap_free_handles then finds).
  driver_status drop_idle_aliases();
  /// Whether growth maps idle handles again: the setting is on and aliasing has not stopped.
  [[nodiscard]] bool aliasing() const noexcept { return settings_.aliases && !aliasing_stopped_; }
  /// After a growth that made `new_bytes` of new handles and left `held` bytes held: counts what
  /// passed `alias_budget` after a refused miss, and stops aliasing for good once that passes
  /// alias_stop_fraction x `peak_in_use` (aliases.cpp says why).
  void note_alias_growth(std::size_t held, double alias_budget, std::size_t new_bytes,
                         std::size_t peak_in_use) noexcept;

  // --- compaction (pool::compact; compaction.cpp) ---
  /// A handle that live blocks cover only in part, and how compaction re-makes it: a new handle
  /// for each run of granules something other than a free block of any stream touches (`kept`,
  /// in address order), the other granules left unmapped.
  struct partly_live_handle {
    struct granule_run {
      device_address from = 0;
      device_address to = 0;
    };
    std::uint32_t id = 0;
    device_address at = 0;
    std::size_t size = 0;
    address_range* range = nullptr;
    std::vector<granule_run> kept;
    std::vector<std::uint32_t> pieces;  ///< remake_begin()'s new handles, one per kept run
    [[nodiscard]] std::size_t kept_bytes() const noexcept {
      std::size_t n = 0;
      for (const granule_run& r : kept) n += r.to - r.from;
      return n;
    }
  };
  /// This arena's handles larger than a granule with at least one granule that only free blocks
  /// of any stream touch and at least one that something else touches (a live block, a block
  /// free for one stream or a capture only), none of them aliased or in `staying`; mapped ones, or
  /// with `asleep` slept ones (pool::sleep trims those: sleep_wake.cpp).
  [[nodiscard]] std::vector<partly_live_handle> partly_live_handles(const std::vector<std::uint32_t>& staying,
                                                                    bool asleep = false) const;
  /// Turns the free blocks over `h`'s granules outside its kept runs, which back nothing any more,
  /// into unmapped room (each piece left in its stream's index).
  void carve_unkept(const partly_live_handle& h);
  /// Makes a handle for each of `h`'s kept runs, unmaps `h` and maps the new ones at the runs; the
  /// granules between them are unmapped, their free blocks not yet carved (remake_finish). On
  /// failure the new handles went back and `h` is mapped where it was, unless even that failed
  /// (`restored` false: a second driver failure).
  driver_status remake_begin(partly_live_handle& h, bool& restored);
  /// Undoes a remake_begin() that succeeded: the new handles unmapped and released, the old one
  /// mapped where it was (its memory, never released, holds what it held).
  driver_status remake_undo(partly_live_handle& h);
  /// Ends a remake_begin() that succeeded: releases the old handle and turns the free blocks over
  /// its unmapped granules into unmapped room, which growth maps again. Returns the release's
  /// status (a failed release is kept by the page table, still held, and tried again by release()).
  driver_status remake_finish(const partly_live_handle& h);

  // --- without the virtual memory API ---
  /// A new segment of at least `bytes`, as one free block of any stream (freed at `tick`).
  driver_status grow_segment(std::size_t bytes, std::uint64_t tick);
  /// Takes out of the free index segments wholly free for any stream and freed at or before
  /// `freed_by`, up to `want` bytes (their blocks turn busy), and appends them to `out`: the caller
  /// frees each with mem_free (with the pool's lock dropped, since cuMemFree waits for the device)
  /// and then calls segment_freed.
  void take_free_segments(std::uint64_t freed_by, std::size_t want, std::vector<address_range*>& out);
  /// Finishes a segment taken by take_free_segments: gone if `freed`, else free again.
  void segment_freed(address_range* segment, bool freed);

  // --- queries (slow) ---
  [[nodiscard]] std::size_t reserved_bytes() const noexcept { return reserved_bytes_; }
  /// The largest free mapped block of any slot.
  [[nodiscard]] std::size_t largest_free_block() const noexcept;
  /// Bytes of whole handles inside free mapped blocks of any slot (what stealing and release can
  /// reach once pending frees complete).
  [[nodiscard]] std::size_t whole_free_handle_bytes() const noexcept;
  /// Bytes of whole handles inside free mapped block `b` (0 for nullptr).
  [[nodiscard]] std::size_t whole_handle_bytes(const block* b) const noexcept;
  /// The block containing `address`, or nullptr (for naming a bad pointer).
  [[nodiscard]] block* find_containing(device_address address) const noexcept;
  /// Calls f(block&) for every block in address order.
  template <class F>
  void for_each_block(F&& f) const {
    for (const auto& r : ranges_) {
      for (block* b = r->first; b != nullptr; b = b->next) f(*b);
    }
  }
  /// Unmaps and releases everything and frees the address ranges (the pool is going away; the
  /// caller has waited for the streams).
  void tear_down();

  [[nodiscard]] const arena_settings& settings() const noexcept { return settings_; }
  /// Whether blocks here may lie on handles larger than a granule (then no block cuts one).
  [[nodiscard]] bool guards_large_handles() const noexcept { return guards_large_handles_; }

 private:
  // Counts a live block of `b`'s span coming (+1) or going (-1) on every handle it touches.
  void count_live(const block& b, int change, std::uint32_t slot, std::uint64_t sequence) noexcept;
  // Whether a block [address, address + size) of `range` for stream `slot` must not be placed:
  // it touches a handle that has a live block at another mapping, or whose latest free on another
  // stream is not known complete, or it holds two mappings of one handle (aliases.cpp).
  [[nodiscard]] bool span_refused(const address_range& range, device_address address, std::size_t size,
                                  std::uint32_t slot) const;
  // The end of the highest mapping that refuses [address, address + size) (span_refused), or 0.
  [[nodiscard]] device_address refused_until(const address_range& range, device_address address, std::size_t size,
                                             std::uint32_t slot) const;
  // The lowest start in free block `c` where `bytes` are not refused, or 0.
  [[nodiscard]] device_address clear_start(const block& c, std::size_t bytes, std::uint32_t slot) const;
  // index.find through find_inside, passing over up to max_refused_skips blocks with no clear start.
  block* find_allowed(free_index& index, std::size_t bytes, std::uint32_t slot);

  // take() for requests of a granule or more (placement.cpp): placed to touch as few granules as
  // possible, and in an arena of large handles, never cutting a large handle (see placement.cpp).
  block* take_placed(std::size_t bytes, std::uint32_t slot, bool may_wait);
  // index.find(bytes), passing over up to max_frontier_skips blocks at the frontier (placement.cpp).
  block* find_inside(free_index& index, std::size_t bytes);
  // Whether free block `b` lies at the frontier: directly below the unmapped room at the end of its
  // address range, where growth extends it (placement.cpp). A hole handed back inside the mapped
  // memory is not the frontier.
  static bool at_frontier(const block* b) noexcept {
    return b->next != nullptr && b->next->state == block_state::free_unmapped && b->next->next == nullptr;
  }
  // Carves `bytes` from free block `c` (in an index) for `slot`, or returns nullptr when `c`
  // cannot serve it without unmapping memory another stream may still use.
  block* place(block* c, std::size_t bytes, std::uint32_t slot, device_address start);
  // An unmapped room whose free block below (of any stream or of `slot`) is smaller than `bytes` but would serve
  // it with the fewest bytes mapped, at most `most_to_map`; nullptr if none (placement.cpp).
  block* room_to_extend(std::size_t bytes, std::size_t most_to_map, std::uint32_t slot) const;
  // Whether a block [start, end) carved from free block `c` for stream `slot` should split large
  // handle `h`, which it cuts, rather than leave it shared with the free rest (placement.cpp).
  [[nodiscard]] bool repair_worthwhile(const page_table::handle_record& h, const block* c, device_address start,
                                       device_address end, std::uint32_t slot);
  // Replaces large handle `id` (free, safe to unmap) by new handles split at `splits` (those inside
  // it); false if it could not: then [unmapped_from, handle end) is left unmapped and the pieces
  // below it stay mapped (unmapped_from 0: the unmap failed and nothing changed).
  bool remap_split(std::uint32_t id, address_range& range, const std::array<device_address, 4>& splits,
                   device_address& unmapped_from);
  // Splits free block `c` (in no index) at the edges of `rooms` (sorted, disjoint, inside c) and of
  // [live_from, live_from + live_bytes) (live_bytes 0: none): rooms become unmapped room, the
  // live piece is returned marked live for `slot`, other pieces go back to c's index.
  struct span {
    device_address from = 0;
    device_address to = 0;
  };
  block* split_around(block* c, const span* rooms, unsigned room_count, device_address live_from,
                      std::size_t live_bytes, std::uint32_t slot);

  // Splits free block `b` (in no index) at `bytes`: the rest becomes a new free block in the index
  // of b's owner.
  void split_free(block* b, std::size_t bytes) {
    block* rest = slab_.make();
    rest->address = b->address + bytes;
    rest->size = b->size - bytes;
    rest->state = block_state::free_mapped;
    rest->owner = b->owner;
    rest->free_sequence = b->free_sequence;
    rest->freed_tick = b->freed_tick;
    rest->range = b->range;
    rest->owner_arena = this;
    link_after(b, rest);
    b->size = bytes;
    slots_[rest->owner]->insert(rest);
  }
  static void link_after(block* b, block* added) noexcept {
    added->prev = b;
    added->next = b->next;
    if (b->next != nullptr) b->next->prev = added;
    b->next = added;
  }
  // Can free block `b` (owner `slot`) absorb free neighbour `n`? Same stream, or `n` reusable by
  // any stream (the union is then reusable on `slot` only, which is safe).
  static bool joins(const block* n, std::uint32_t slot) noexcept {
    return n != nullptr && n->state == block_state::free_mapped && (n->owner == slot || n->owner == 0);
  }
  // Merges free mapped `b` (in no index) with the neighbours it joins.
  void coalesce_free(block* b) noexcept {
    block* p = b->prev;
    if (joins(p, b->owner)) {
      slots_[p->owner]->remove(p);
      absorb_prev(b);
    }
    block* n = b->next;
    if (joins(n, b->owner)) {
      slots_[n->owner]->remove(n);
      absorb_next(b);
    }
  }
  // Splits `b` at `offset`: b keeps the low part, the returned block (same state, owner, times)
  // the high part.
  block* cut(block* b, std::size_t offset);
  // Joins the neighbour below (above) into `b` and recycles its node. The free number is the
  // latest of b's own stream's parts: a part free for every stream (slot 0) needs no event, and
  // its number (a free on another stream) must not hold b back from the event of b's stream.
  void absorb_prev(block* b) noexcept {
    block* p = b->prev;
    b->address = p->address;
    b->size += p->size;
    if (p->owner == b->owner) b->free_sequence = std::max(b->free_sequence, p->free_sequence);
    b->freed_tick = std::max(b->freed_tick, p->freed_tick);
    b->prev = p->prev;
    if (b->prev != nullptr) {
      b->prev->next = b;
    } else {
      b->range->first = b;
    }
    slab_.recycle(p);
  }

  void absorb_next(block* b) noexcept {
    block* n = b->next;
    b->size += n->size;
    if (n->owner == b->owner) b->free_sequence = std::max(b->free_sequence, n->free_sequence);
    b->freed_tick = std::max(b->freed_tick, n->freed_tick);
    b->next = n->next;
    if (b->next != nullptr) b->next->prev = b;
    slab_.recycle(n);
  }
  // Turns [at, at + size), just unmapped inside free block `b` of slot 0 (in no index), into
  // unmapped room; the piece below goes back to slot 0's index, the piece above (or nullptr) is
  // returned, in no index.
  block* carve_unmapped(block* b, device_address at, std::size_t size);
  // Puts free unmapped `b` (in no index) into the room set, merged with free unmapped neighbours.
  void coalesce_unmapped(block* b);
  block* make_range_block(address_range& range, device_address address, std::size_t size, block_state state);
  driver_status reserve_range(std::size_t at_least, std::uint32_t slot, block*& space);

  struct by_size_then_address {
    bool operator()(const block* a, const block* b) const noexcept {
      return a->size != b->size ? a->size < b->size : a->address < b->address;
    }
  };

  static constexpr unsigned max_room_scan = 64;
  static constexpr unsigned max_frontier_skips = 4;
  static constexpr unsigned max_refused_skips = 1024;
  // What growth after refused misses may make, as a fraction of peak in use, before aliasing stops
  // in the arena (note_alias_growth; aliases.cpp says why this much).
  static constexpr double alias_stop_fraction = 0.6;
  // take_placed() extends a smaller free block when the best fit wastes more than 1/16 of the
  // request and the extension maps at most that much (placement.cpp).
  static constexpr std::size_t extension_divisor = 16;

  arena_settings settings_;
  std::size_t granularity_;
  // Large arenas (virtual memory) may hold handles larger than a granule, made or stolen, and
  // split them when a block would pin a small part of one (placement.cpp).
  bool guards_large_handles_ = false;
  page_table& pages_;
  driver_calls& calls_;
  block_slab& slab_;
  std::vector<std::unique_ptr<free_index>> slots_;
  std::set<block*, by_size_then_address> rooms_;
  std::vector<std::unique_ptr<address_range>> ranges_;
  std::size_t reserved_bytes_ = 0;
  bool serving_growth_ = false;  // serve_growth()
  // Set by take_placed() and open_window(): the miss being grown for had a free block that only
  // aliases' refusals passed over. note_alias_growth() adds up what such growth made past the
  // alias budget and stops aliasing once it is too much.
  bool refused_miss_ = false;
  bool may_wait_for_frees_ = false;  // take(..., may_wait)
  bool waits_for_frees_ = false;     // waits_for_frees()
  std::size_t refused_growth_ = 0;
  bool aliasing_stopped_ = false;
  // A window for `bytes` on stream `slot` in `room`: the free blocks beside it that it joins, the
  // bytes it maps from room->address, and whether the room with its free neighbours holds `bytes`.
  struct window_shape {
    joined_blocks joined;
    std::size_t map_bytes = 0;
    bool fits = false;
  };
  [[nodiscard]] window_shape shape_of_window(const block* room, std::size_t bytes, std::uint32_t slot) const;
  // The bytes growth maps if `bytes` for `slot` go into `room`; 0 if they do not fit there or the
  // room is another stream's.
  [[nodiscard]] std::size_t window_cost(const block* room, std::size_t bytes, std::uint32_t slot) const {
    if (room->range->stream_slot != slot) return 0;
    const window_shape shape = shape_of_window(room, bytes, slot);
    return shape.fits ? shape.map_bytes : 0;
  }
  // Set by take_placed() when it declined a wasteful fit for an extension, or by prefer_room();
  // open_window() prefers it.
  block* extension_room_ = nullptr;
  std::uint32_t extension_slot_ = 0;  // the stream slot whose free block below it may be extended
  // set_pool_queries(): without them own-stream blocks are never split and no extension is made.
  void* pool_ = nullptr;
  frees_done_fn frees_done_ = nullptr;
  growth_would_steal_fn growth_would_steal_ = nullptr;
};

}  // namespace tidepool::detail
