// Placement: which free block serves a request of the large arenas (or of a granule or more), and
// when a large handle that the block would cut is split.
//
// A block starts where its free block starts, as in PyTorch's allocator. Starting a block of a
// granule or more at the next granule boundary instead (so a 32 MiB request touched 16 granules,
// not 17) left a free sliver below it that later requests could not use, and tidepool held more
// than expandable segments on many more traces (docs/RESULTS.md, section 0).
//
// In the large arenas handles are as large as the growth that made them (up to 64 MiB:
// page_table.cpp), and a handle goes back whole or not at all. Placement itself ignores handles: it is best fit, so
// a loop whose shapes repeat or drift finds the places it had, and the layout settles (placement
// that avoided cutting handles distorted best fit and never settled). Away from the device's limit
// a handle growth made is never split under a block: the rest a live block pins goes back on
// compact() (compaction.cpp), and the splits that kept it off release() cost the first pass more
// driver time than expandable segments' on most loops (docs/RESULTS.md, section 0, "64 MiB handles
// and no splits"). At the device's limit once the pool strands memory there (free rests of handles
// live blocks pin: page_table::stranding, out_of_memory_path.cpp; before, the rules away from the
// limit hold, and a loop a few percent above its peak is spared the splits' calls: section 0,
// "Smaller handles at the limit only once memory strands"), and for handles larger than growth
// makes (below), a block that would cut a large handle lying wholly inside the free block it is
// carved from, and cover less than three quarters of it, has the handle replaced by handles split
// where the block's granules begin and end (repair_worthwhile, remap_split): a block that outlives
// its neighbours then pins its own granules, not the rest of a large handle, and the out-of-memory
// path can hand that rest back. A block covering three quarters or more keeps the handle whole, and
// so does a block that touches every granule of the handle: it pins the whole handle by itself. At
// the device's limit, stranding, where growth's handles are 8 MiB, a block keeps whole a handle it
// leaves at most half of one (4 MiB) uncovered: a loop at its capacity places new shapes in every
// step, and splitting them cost more calls than the pinned rest saved allocations (docs/RESULTS.md,
// section 0, "Splits at the device's limit").
// Splitting needs the handle free for every stream (unmapping it must not race queued work): a
// block carved from a free block of its own stream splits it only when that stream's frees are
// known complete (the pool queries the covering event), and otherwise leaves the handle whole.
// A handle larger than growth makes now is split rather than left whole for want of the stream's
// frees: the pool waits for them (take()'s may_wait, growth.cpp) and takes again, once per such
// handle, since its pieces are growth's sizes. Those are the handles wake() joined under one live
// block (sleep_wake.cpp), and at the device's limit, stranding, where growth makes 8 MiB handles,
// the 64 MiB ones made before it: there the wait is what lets a block cut from the stream's fresh
// frees split one, and those splits keep allocations from failing near the capacity; the waits cost
// a loop there little on a GPU (docs/RESULTS.md, section 0, "Six more rules at the device's
// limit"). A block covering three quarters of such a handle keeps it whole only if the rest is no
// more than a quarter of growth's largest handle.
// While the device fills (page_table.cpp, growth.cpp), before the limit, a block smaller than a
// quarter of a handle larger than 20 MiB splits it too, into pieces of at most 20 MiB, when the
// handle is safe to unmap without a wait: such blocks placed then are what a loop keeps from its
// first step (an optimizer's state) in the holes its activations left, and whole 64 MiB handles
// under them stranded the rests the loop's large requests needed at its capacity. A wait there
// changed which free blocks the next requests found, and side-by-side loops at 1.2x their peak
// then filled the device; split under every block covering less than three quarters of a handle,
// a sharded loop's layout did the same (docs/RESULTS.md, section 0, "The device filling", and the
// section before it).
//
// The frontier: a free block below the unmapped room at the end of its address range is where
// growth extends cheaply (a request larger than the block maps only the difference). Best fit
// passes over such a block when another fits (up to max_frontier_skips of them), as PyTorch's
// expandable segments count the block at a segment's end as the size it can grow to: a small
// long-lived block placed there would stand between the free memory below it and the room above,
// and every larger request after it would map its whole size elsewhere (the loader workload,
// measured with and without the rule in docs/RESULTS.md, section 0). A hole inside the mapped
// memory, where handles were handed back (release, stealing, the out-of-memory path), is not the
// frontier: at the device's limit such holes open wherever the out-of-memory path handed back, a
// rule that passed over the blocks beside them made each step's layout follow those hand-backs, and
// a loop at its capacity touched several times its peak in use in address space and called the
// driver in every step (section 0, "The frontier at the device's limit"). The rule holds across the
// two indexes a request looks in, its own stream's free blocks and those free for every stream:
// which index a block is in says only whether an event has been seen to complete, and placement
// must not depend on that. An arena that aliases (pool_options::alias_free_handles) keeps the rule
// within each index: across them the aliasing pool held more, the loader most (docs/RESULTS.md,
// section 0).
//
// Extension instead of a wasteful fit, when growth would pass the pool's budget: when the best fit
// would waste more than 1/16 of the request (or none fits) and a smaller free block (of any
// stream, or of the request's own) has unmapped room above it where at most 1/16 of the request
// would serve it, take() declines and growth maps just that extension (arena::open_window takes
// the room take() chose, and take() after growth serves from it). Past the budget, requests a
// little larger than last time would cascade through best fit, and the last one find nothing left
// and steal its whole size (the loader at a small growth_slack). Within it nothing is stolen, and
// the wasteful fit serves from memory the pool holds: extending there only maps more, which a loop
// whose buffers grow by reallocation paid in held memory (docs/RESULTS.md, section 0).
#include <algorithm>
#include <array>
#include <limits>

#include "core/arena.hpp"
#include "core/units.hpp"

namespace tidepool::detail {

block* arena::find_inside(free_index& index, std::size_t bytes) {
  block* b = index.find(bytes);
  std::array<block*, max_frontier_skips> skipped{};
  unsigned n = 0;
  while (!serving_growth_ && b != nullptr && at_frontier(b) && n < skipped.size()) {
    index.remove(b);
    skipped[n++] = b;
    b = index.find(bytes);
  }
  for (unsigned i = n; i > 0; --i) index.insert(skipped[i - 1]);
  return b != nullptr ? b : skipped[0];
}

block* arena::take_placed(std::size_t bytes, std::uint32_t slot, bool may_wait) {
  refused_miss_ = false;
  may_wait_for_frees_ = may_wait;
  waits_for_frees_ = false;
  block* own = find_allowed(*slots_[slot], bytes, slot);
  block* any = slot != 0 ? find_allowed(*slots_[0], bytes, slot) : nullptr;
  block* first = own;
  block* second = any;
  // The smaller fit first and, of two equal fits, the lower address whichever index holds it, as
  // within one index: which index a block is in must not decide (a stream's own block won every
  // tie, and a checkpointed loop's second pass laid out apart from its first). Not while aliasing:
  // there the address rule kept a checkpointed loop calling the driver in its later passes
  // (docs/RESULTS.md, section 0).
  if (own == nullptr ||
      (any != nullptr && (any->size < own->size || (!settings_.aliases && any->size == own->size &&
                                                     any->address < own->address)))) {
    std::swap(first, second);
  }
  // The frontier rule across the two indexes: a block at the frontier is what an index offers only
  // when nothing else of it fits, so another index's block inside the mapped memory goes first
  // (not while aliasing: see the top of this file).
  if (second != nullptr && !serving_growth_ && !settings_.aliases && at_frontier(first) &&
      !at_frontier(second)) {
    std::swap(first, second);
  }
  if (settings_.large_handles && !serving_growth_) {
    // A wasteful fit (or none): extend a smaller free block into the room above it instead.
    const std::size_t most_to_map = bytes / extension_divisor;
    const std::size_t best = first == nullptr ? std::numeric_limits<std::size_t>::max() : first->size;
    if (best - bytes > most_to_map && growth_would_steal_ != nullptr && growth_would_steal_(pool_, bytes)) {
      extension_room_ = room_to_extend(bytes, most_to_map, slot);
      extension_slot_ = slot;
      if (extension_room_ != nullptr) return nullptr;
    }
  }
  for (block* c : {first, second}) {
    if (c == nullptr) continue;
    const device_address start = settings_.aliases ? clear_start(*c, bytes, slot) : c->address;
    if (start == 0) continue;
    if (block* b = place(c, bytes, slot, start)) {
      if (settings_.aliases) count_live(*b, +1, slot, 0);
      return b;
    }
    if (waits_for_frees_) return nullptr;
  }
  // A miss that only aliases' refusals caused (a free block fits): growth tells note_alias_growth().
  refused_miss_ = aliasing() && pages_.aliased_handles() != 0 &&
                  (find_inside(*slots_[slot], bytes) != nullptr ||
                   (slot != 0 && find_inside(*slots_[0], bytes) != nullptr));
  return nullptr;
}

block* arena::room_to_extend(std::size_t bytes, std::size_t most_to_map, std::uint32_t slot) const {
  const std::size_t g = granularity_;
  block* chosen = nullptr;
  std::size_t chosen_cost = 0;
  unsigned scanned = 0;
  for (auto it = rooms_.begin(); it != rooms_.end() && scanned < max_room_scan; ++it, ++scanned) {
    block* room = *it;
    if (room->range->stream_slot != slot) continue;  // growth maps in the stream's own ranges
    const block* below = room->prev;
    if (below == nullptr || below->state != block_state::free_mapped || (below->owner != 0 && below->owner != slot) ||
        below->size >= bytes || below->size + room->size < bytes) {
      continue;
    }
    const std::size_t cost = round_up(bytes - below->size, g);
    if (cost <= most_to_map && (chosen == nullptr || cost < chosen_cost)) {
      chosen = room;
      chosen_cost = cost;
    }
  }
  return chosen;
}

bool arena::repair_worthwhile(const page_table::handle_record& h, const block* c, device_address start,
                              device_address end, std::uint32_t slot) {
  // Splitting needs the handle wholly free (inside c).
  if (h.at < c->address || h.at + h.size > c->end()) return false;
  // Away from the device's limit, and at it until the pool strands memory there, a handle growth
  // made stays whole (the file's header says why); an aliasing arena keeps the splits it was
  // measured with. While the device fills, a block smaller than a quarter of a handle larger than
  // the pieces made then splits it.
  const bool small_block_while_filling = pages_.filling() && !pages_.at_limit() && !settings_.aliases &&
                                         h.size > pages_.largest_new_handle(false) &&
                                         4 * (end - start) < h.size;
  if (!small_block_while_filling && !pages_.stranding() && !settings_.aliases &&
      h.size <= pages_.largest_growth_handle(false)) {
    return false;
  }
  // A block that covers three quarters of the handle or more keeps it whole: it pins at most a
  // quarter more (of the largest handle growth makes: one that wake() joined can be far larger),
  // and leaving the handle as it is costs no driver call (the same shapes come back step after
  // step). A block that covers less would pin the rest of a large handle for as long as it lives,
  // and whatever is placed in that rest later pins the block's part.
  const device_address from = std::max(h.at, start);
  const device_address to = std::min(h.at + h.size, end);
  const std::size_t covered = to > from ? to - from : 0;
  if (4 * covered >= 3 * h.size && 4 * (h.size - covered) <= pages_.largest_growth_handle(settings_.aliases)) {
    return false;
  }
  // At the device's limit, stranding (growth's handles 8 MiB): a block leaving at most half of one
  // uncovered keeps the handle whole, pinning at most 4 MiB more, where a split would cost an
  // unmap, a release and new handles in every step of a loop at its capacity.
  if (pages_.stranding() && !settings_.aliases && 2 * (h.size - covered) <= pages_.largest_growth_handle(false)) {
    return false;
  }
  // A block that touches every granule of the handle pins all of it while it lives, split or not:
  // the split would only give its edge granules handles of their own, for neighbours that might
  // outlive it, at the price of an unmap, a release and a handle per piece.
  if (round_down(start, granularity_) <= h.at && round_up(end, granularity_) >= h.at + h.size) return false;
  // And the handle safe to unmap: c free for every stream, or c the request's own stream's and
  // its frees known complete (one event query; a block freed a moment ago by a stream whose GPU
  // work is still queued keeps its handle whole).
  if (c->owner == 0) return true;
  if (c->owner == slot && frees_done_ != nullptr && frees_done_(pool_, slot, c->free_sequence)) return true;
  // Kept whole, a handle larger than growth makes now (one that wake() joined, or at the device's
  // limit one made before it) would be pinned whole by a small block: the pool waits for the
  // stream instead, then takes again (take()'s may_wait), once per such handle, since its pieces
  // are growth's sizes. Not while the device fills: there a wait changed which free blocks the
  // next requests found, and loops well short of the limit then filled the device.
  if (may_wait_for_frees_ && c->owner == slot && h.size > pages_.largest_growth_handle(settings_.aliases)) {
    waits_for_frees_ = true;
  }
  return false;
}

block* arena::place(block* c, std::size_t bytes, std::uint32_t slot, device_address start) {
  const std::size_t g = granularity_;
  if (c->range->segment) {  // one mem_alloc segment: no granules to save, no handles
    slots_[c->owner]->remove(c);
    return split_around(c, nullptr, 0, start, bytes, slot);
  }
  if (!guards_large_handles_) {
    slots_[c->owner]->remove(c);
    return split_around(c, nullptr, 0, start, bytes, slot);
  }

  // Large handles that [start, end) would cut, at most one at each edge, and of those the ones
  // worth splitting (repair_worthwhile).
  std::array<std::uint32_t, 2> cuts{};
  unsigned cut_count = 0;
  const device_address end = start + bytes;
  auto consider = [&](std::uint32_t id) {
    const page_table::handle_record& h = pages_.record(id);
    if (!h.aliases.empty()) return;  // an aliased handle is never split
    if (h.size <= g || (h.at >= start && h.at + h.size <= end)) return;  // not cut
    if (repair_worthwhile(h, c, start, end, slot)) cuts[cut_count++] = id;
  };
  const std::uint32_t low_id = pages_.handle_at(*c->range, round_down(start, g));
  const std::uint32_t high_id = pages_.handle_at(*c->range, round_up(end, g) - g);
  consider(low_id);
  if (high_id != low_id) consider(high_id);
  if (waits_for_frees_) return nullptr;  // c untouched, still in its index

  slots_[c->owner]->remove(c);
  std::array<span, 2> rooms{};
  unsigned room_count = 0;
  bool placed = true;
  // Where the block's granules begin and end: a large handle is split there, each piece one new
  // handle (lying wholly under the block, or wholly beside it).
  const device_address lo = round_down(start, g);
  const device_address hi = round_up(end, g);
  const std::array<device_address, 4> splits = {lo, start != lo ? lo + g : lo, end != hi ? hi - g : hi, hi};
  for (unsigned i = 0; i < cut_count; ++i) {
    const page_table::handle_record h = pages_.record(cuts[i]);
    device_address unmapped_from = 0;
    if (!remap_split(cuts[i], *c->range, splits, unmapped_from)) {
      placed = false;
      if (unmapped_from != 0) rooms[room_count++] = span{unmapped_from, h.at + h.size};
    }
  }
  if (room_count > 1 && rooms[1].from < rooms[0].from) std::swap(rooms[0], rooms[1]);  // one per handle, in order
  if (!placed) {
    (void)split_around(c, rooms.data(), room_count, 0, 0, slot);
    return nullptr;
  }
  return split_around(c, rooms.data(), room_count, start, bytes, slot);
}

bool arena::remap_split(std::uint32_t id, address_range& range, const std::array<device_address, 4>& splits,
                        device_address& unmapped_from) {
  const page_table::handle_record h = pages_.record(id);
  unmapped_from = 0;
  if (pages_.unmap(id) != driver_status::success) return false;
  unmapped_from = h.at;
  // A failed release is kept by the page table (still held) and retried by release(); no pieces
  // are made then, or the pool would hold the handle twice over, past a byte cap.
  if (pages_.release(id) != driver_status::success) return false;
  // No piece is larger than growth makes handles: a handle that wake() joined is split back to
  // growth's sizes, so it is waited for (repair_worthwhile) once. While the device fills, pieces
  // are 20 MiB: a rest of up to 64 MiB was split again under the next small block placed in it.
  const std::size_t largest = pages_.largest_new_handle(settings_.aliases);
  const device_address end = h.at + h.size;
  device_address from = h.at;
  unsigned next = 0;
  while (from < end) {
    while (next < splits.size() && splits[next] <= from) ++next;
    device_address to = next < splits.size() ? std::min(splits[next], end) : end;
    if (to - from > largest) to = from + largest;
    std::uint32_t fresh = 0;
    if (pages_.create(to - from, fresh) != driver_status::success) return false;
    if (pages_.map(fresh, range, from) != driver_status::success) {
      (void)pages_.release(fresh);
      return false;
    }
    // The pieces made so far stay mapped (no undo: an unmap that failed there would leave a
    // mapping the pool no longer counted); what is left of the span is unmapped room.
    from = to;
    unmapped_from = from;
  }
  return true;
}

block* arena::split_around(block* c, const span* rooms, unsigned room_count, device_address live_from,
                           std::size_t live_bytes, std::uint32_t slot) {
  if (room_count == 0 && live_bytes != 0 && live_from == c->address) {  // the common case
    if (c->size > live_bytes) split_free(c, live_bytes);
    c->state = block_state::live;
    c->owner = slot;
    return c;
  }
  std::array<device_address, 10> edges{};
  unsigned edge_count = 0;
  for (unsigned i = 0; i < room_count; ++i) {
    edges[edge_count++] = rooms[i].from;
    edges[edge_count++] = rooms[i].to;
  }
  if (live_bytes != 0) {
    edges[edge_count++] = live_from;
    edges[edge_count++] = live_from + live_bytes;
  }
  for (unsigned i = 1; i < edge_count; ++i) {  // insertion sort: ten edges at most
    for (unsigned j = i; j > 0 && edges[j] < edges[j - 1]; --j) std::swap(edges[j], edges[j - 1]);
  }
  block* live = nullptr;
  auto settle_piece = [&](block* piece) {
    const device_address a = piece->address;
    for (unsigned i = 0; i < room_count; ++i) {
      if (a >= rooms[i].from && a < rooms[i].to) {
        coalesce_unmapped(piece);
        return;
      }
    }
    if (live_bytes != 0 && a == live_from) {
      piece->state = block_state::live;
      piece->owner = slot;
      live = piece;
      return;
    }
    slots_[piece->owner]->insert(piece);
  };
  const device_address c_end = c->end();
  block* rest = c;
  for (unsigned i = 0; i < edge_count; ++i) {
    const device_address x = edges[i];
    if (x <= rest->address || x >= c_end) continue;
    block* piece = rest;
    rest = cut(rest, x - rest->address);
    settle_piece(piece);
  }
  settle_piece(rest);
  return live;
}

}  // namespace tidepool::detail
