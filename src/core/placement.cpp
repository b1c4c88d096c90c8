// Placement: where a request of a granule or more goes inside the free block that serves it, and
// how an arena of large handles keeps every large handle under one block.
//
// After release() the pool holds exactly the granules that live blocks touch (DESIGN 4: live
// rounded up to 2 MiB pages, no more), so a granule touched needlessly is held needlessly. A block
// of a granule or more therefore starts at the first granule boundary of its free block when that
// touches fewer granules (a 32 MiB request at a boundary touches 16 granules, not 17).
//
// In the huge arenas handles grow up to 4 granules (page_table.cpp), and a handle goes back whole
// or not at all. So those arenas keep an invariant: every handle larger than a granule lies wholly
// inside one block, live or free. A block carved from a free block must not cut one; when its
// start or end falls inside a large handle, that handle is replaced by new handles split where the
// block's granules begin and end (the granule holding an unaligned edge gets a handle of its own),
// so each piece lies under the block or beside it, and nothing held changes.
// Unmapping needs the handle to be safe for every stream, so a block is carved that way only from
// free blocks of slot 0; a free block of the request's own stream that would need it is passed
// over (the slow path settles it, then takes it). Growth maps the granule holding a request's end
// as a granule handle of its own (growth.cpp), so fresh memory never needs the re-mapping.
//
// Extension instead of a wasteful fit (huge arenas). The loader trace allocates six 270-620 MB
// scratch blocks, frees them all, and does it again with sizes off by up to 2%. Best fit then
// cascades: a request 1 MB larger than last time misses its old block, takes the next one up, and
// the last request finds nothing left and steals its whole size, handle by handle, from the free
// blocks the others passed over. So when the best fit would waste more than 1/16 of the request
// (or none fits) and a smaller free block (of any stream, or of the request's own) has unmapped
// room above it where at most 1/16 of the request would serve it, take() declines and growth
// maps just that extension (arena::open_window takes the room take() chose). Measured with
// `tidepool replay traces/*.csv.gz --allocators tidepool` (sim; gpt2 / loader / resnet50 driver
// ms, exact: 506/575/267), with huge handles at request/4 capped at 64 MiB (page_table.cpp):
//   no extension                 217/709/119   peak held/live 1.014/1.005/1.021
//   1/16, free blocks of slot 0  218/581/124                  1.011/1.008/1.026
//   1/16, or the stream's own    224/573/125                  1.013/1.008/1.014   <- chosen
//   1/8, or the stream's own     220/559/122                  1.012/1.008/1.039
//   1/32, or the stream's own    212/590/119                  1.013/1.009/1.021
// (with the older request/16, 8 MiB handles: 877 -> 655 ms on the loader.) Where the driver
// calls of the loader come from, chosen row: 3570 new handles (mostly 2 MiB medium pages),
// 3597 steals (2459 of them the huge arena moving its own free handles under a new window),
// 988 cut repairs, 4186 handles handed back by the final release().
#include <algorithm>
#include <array>
#include <limits>

#include "core/arena.hpp"
#include "core/units.hpp"

namespace tidepool::detail {

block* arena::take_placed(std::size_t bytes, std::uint32_t slot) {
  block* own = slots_[slot]->find(bytes);
  block* any = slot != 0 ? slots_[0]->find(bytes) : nullptr;
  block* first = own;
  block* second = any;
  if (own == nullptr || (any != nullptr && any->size < own->size)) std::swap(first, second);
  if (settings_.large_handles && extension_allowed_) {
    // A wasteful fit (or none): extend a smaller free block into the room above it instead.
    const std::size_t most_to_map = bytes / extension_divisor;
    const std::size_t best = first == nullptr ? std::numeric_limits<std::size_t>::max() : first->size;
    if (best - bytes > most_to_map) {
      extension_room_ = room_to_extend(bytes, most_to_map, slot);
      extension_slot_ = slot;
      if (extension_room_ != nullptr) return nullptr;
    }
  }
  if (first != nullptr) {
    if (block* b = place(first, bytes, slot)) return b;
  }
  if (second != nullptr) {
    if (block* b = place(second, bytes, slot)) return b;
  }
  return nullptr;
}

block* arena::room_to_extend(std::size_t bytes, std::size_t most_to_map, std::uint32_t slot) const {
  const std::size_t g = granularity_;
  block* chosen = nullptr;
  std::size_t chosen_cost = 0;
  unsigned scanned = 0;
  for (auto it = rooms_.begin(); it != rooms_.end() && scanned < max_room_scan; ++it, ++scanned) {
    block* room = *it;
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
                              device_address end) const noexcept {
  // Splitting needs the handle wholly free (inside c) and safe to unmap (c free for every stream).
  if (h.at < c->address || h.at + h.size > c->end() || c->owner != 0) return false;
  // A block that covers at least half of the handle keeps it whole: it pins no more than its own
  // size, and leaving the handle as it is costs no driver call (the same shapes come back step after
  // step). A block that covers less would pin the rest of a large handle for as long as it lives.
  const device_address from = std::max(h.at, start);
  const device_address to = std::min(h.at + h.size, end);
  const std::size_t covered = to > from ? to - from : 0;
  return 2 * covered < h.size;
}

block* arena::place(block* c, std::size_t bytes, std::uint32_t slot) {
  const std::size_t g = granularity_;
  if (c->range->segment) {  // one mem_alloc segment: no granules to save, no handles
    slots_[c->owner]->remove(c);
    return split_around(c, nullptr, 0, c->address, bytes, slot);
  }
  auto granules = [&](device_address from) { return (round_up(from + bytes, g) - round_down(from, g)) / g; };
  device_address start = c->address;
  const device_address aligned = round_up(start, g);
  if (bytes >= g && aligned != start && aligned + bytes <= c->end() &&
      (bytes % g == 0 && granules(aligned) < granules(start))) {
    start = aligned;
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
    if (h.size <= g || (h.at >= start && h.at + h.size <= end)) return;  // not cut
    if (repair_worthwhile(h, c, start, end)) cuts[cut_count++] = id;
  };
  const std::uint32_t low_id = pages_.handle_at(*c->range, round_down(start, g));
  const std::uint32_t high_id = pages_.handle_at(*c->range, round_up(end, g) - g);
  consider(low_id);
  if (high_id != low_id) consider(high_id);

  slots_[c->owner]->remove(c);
  std::array<span, 4> rooms{};
  unsigned room_count = 0;
  bool placed = true;
  // Where the block's granules begin and end: a large handle is split there, each piece one new
  // handle (lying wholly under the block, or wholly beside it).
  const device_address lo = round_down(start, g);
  const device_address hi = round_up(end, g);
  const std::array<device_address, 4> splits = {lo, start != lo ? lo + g : lo, end != hi ? hi - g : hi, hi};
  for (unsigned i = 0; i < cut_count; ++i) {
    const page_table::handle_record h = pages_.record(cuts[i]);
    bool unmapped = false;
    if (!remap_split(cuts[i], *c->range, splits, unmapped)) {
      placed = false;
      if (unmapped) rooms[room_count++] = span{h.at, h.at + h.size};
    }
  }
  if (room_count > 1 && rooms[1].from < rooms[0].from) std::swap(rooms[0], rooms[1]);  // at most 2 per handle,
  if (room_count > 3 && rooms[3].from < rooms[2].from) std::swap(rooms[2], rooms[3]);  // handles in order
  if (room_count > 2 && rooms[2].from < rooms[0].from) {
    std::swap(rooms[0], rooms[2]);
    if (room_count > 3) std::swap(rooms[1], rooms[3]);
  }
  if (!placed) {
    (void)split_around(c, rooms.data(), room_count, 0, 0, slot);
    return nullptr;
  }
  return split_around(c, rooms.data(), room_count, start, bytes, slot);
}

bool arena::remap_split(std::uint32_t id, address_range& range, const std::array<device_address, 4>& splits,
                        bool& unmapped) {
  const page_table::handle_record h = pages_.record(id);
  unmapped = false;
  if (pages_.unmap(id) != driver_status::success) return false;
  unmapped = true;
  // A handle that will not go back is lost to the pool either way; the pieces below replace it.
  (void)pages_.release(id);
  device_address from = h.at;
  std::array<std::uint32_t, 5> made{};
  unsigned made_count = 0;
  bool ok = true;
  for (unsigned i = 0; i <= splits.size() && ok; ++i) {
    const device_address to = i < splits.size() ? splits[i] : h.at + h.size;
    if (to <= from || to > h.at + h.size) continue;
    std::uint32_t fresh = 0;
    ok = pages_.create(to - from, fresh) == driver_status::success;
    if (ok && pages_.map(fresh, range, from) != driver_status::success) {
      (void)pages_.release(fresh);
      ok = false;
    }
    if (ok) made[made_count++] = fresh;
    from = to;
  }
  if (ok) return true;
  for (unsigned i = 0; i < made_count; ++i) {  // undo: the whole handle's span is left unmapped
    (void)pages_.unmap(made[i]);
    (void)pages_.release(made[i]);
  }
  return false;
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
