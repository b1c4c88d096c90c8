// An arena's slow paths: handing a stream's free blocks to every stream, opening and closing the
// window that growth maps into, cutting whole free handles out of free blocks (release and
// stealing), fallback segments, and the slow queries.
#include "core/arena.hpp"

#include <algorithm>

#include "core/units.hpp"

namespace tidepool::detail {

arena::arena(arena_settings settings, page_table& pages, driver_calls& calls, block_slab& slab)
    : settings_(settings), granularity_(pages.granularity()), pages_(pages), calls_(calls), slab_(slab) {
  guards_large_handles_ = settings_.virtual_memory && settings_.kind != arena_kind::small_scratch &&
                          settings_.kind != arena_kind::small_persistent;
  ensure_slots(1);
}

arena::~arena() = default;

void arena::ensure_slots(std::uint32_t count) {
  while (slots_.size() < count) slots_.push_back(std::make_unique<free_index>());
}

block* arena::cut(block* b, std::size_t offset) {
  block* high = slab_.make();
  high->address = b->address + offset;
  high->size = b->size - offset;
  high->state = b->state;
  high->owner = b->owner;
  high->free_sequence = b->free_sequence;
  high->freed_tick = b->freed_tick;
  high->range = b->range;
  high->owner_arena = this;
  link_after(b, high);
  b->size = offset;
  return high;
}

void arena::coalesce_unmapped(block* b) {
  b->state = block_state::free_unmapped;
  b->owner = 0;
  if (b->prev != nullptr && b->prev->state == block_state::free_unmapped) {
    rooms_.erase(b->prev);
    absorb_prev(b);
  }
  if (b->next != nullptr && b->next->state == block_state::free_unmapped) {
    rooms_.erase(b->next);
    absorb_next(b);
  }
  rooms_.insert(b);
}

void arena::make_global(std::uint32_t slot, std::uint64_t watermark) {
  free_index& own = *slots_[slot];
  if (own.empty()) return;
  std::vector<block*> moved;
  for (unsigned bin = own.next_nonempty(0); bin < free_index::bins; bin = own.next_nonempty(bin + 1)) {
    for (block* b = own.head(bin); b != nullptr; b = b->link_next) {
      if (b->free_sequence <= watermark) moved.push_back(b);
    }
  }
  for (block* b : moved) {
    own.remove(b);
    b->state = block_state::moving;
    b->owner = 0;
  }
  // Merge runs of moved blocks and free blocks of slot 0; absorbed nodes turn dead and are skipped.
  free_index& any = *slots_[0];
  for (block* b : moved) {
    if (b->state != block_state::moving) continue;
    b->state = block_state::free_mapped;
    for (block* p = b->prev; p != nullptr && (p->state == block_state::moving ||
                                              (p->state == block_state::free_mapped && p->owner == 0));
         p = b->prev) {
      if (p->state == block_state::free_mapped) any.remove(p);
      absorb_prev(b);
    }
    for (block* n = b->next; n != nullptr && (n->state == block_state::moving ||
                                              (n->state == block_state::free_mapped && n->owner == 0));
         n = b->next) {
      if (n->state == block_state::free_mapped) any.remove(n);
      absorb_next(b);
    }
    any.insert(b);
  }
}

block* arena::make_range_block(address_range& range, device_address address, std::size_t size, block_state state) {
  block* b = slab_.make();
  b->address = address;
  b->size = size;
  b->state = state;
  b->range = &range;
  b->owner_arena = this;
  return b;
}

driver_status arena::reserve_range(std::size_t at_least, std::uint32_t slot, block*& space) {
  const std::size_t g = pages_.granularity();
  const std::size_t size = std::max(round_up(settings_.range_bytes, g), round_up(at_least, g));
  device_address base = 0;
  const driver_status status = calls_.address_reserve(size, g, &base);
  if (status != driver_status::success) return status;
  auto range = std::make_unique<address_range>();
  range->base = base;
  range->size = size;
  range->owner = this;
  range->stream_slot = slot;
  range->page_handle.assign(size / g, page_table::no_handle);
  space = make_range_block(*range, base, size, block_state::busy);
  range->first = space;
  reserved_bytes_ += size;
  ranges_.push_back(std::move(range));
  return driver_status::success;
}

arena::window_shape arena::shape_of_window(const block* room, std::size_t bytes, std::uint32_t slot) const {
  // A neighbour freed on the request's own stream joins as well as one free for every stream: work
  // queued later on that stream runs after the work that used it. Joining only blocks free for
  // every stream made growth depend on how far the GPU runs behind: a block freed a moment ago
  // is its stream's until an event completes, so growth mapped beside it instead of extending it.
  // With aliases, not one whose handles refuse the stream.
  auto free_neighbour = [&](block* b) -> block* {
    if (b == nullptr || b->state != block_state::free_mapped || (b->owner != 0 && b->owner != slot)) return nullptr;
    if (settings_.aliases && span_refused(*b->range, b->address, b->size, slot)) return nullptr;
    return b;
  };
  window_shape shape;
  block* below = free_neighbour(room->prev);
  block* above = free_neighbour(room->next);
  const std::size_t have = below != nullptr ? below->size : 0;
  const std::size_t after = above != nullptr ? above->size : 0;
  shape.fits = have + room->size + after >= bytes;
  shape.map_bytes = std::min(room->size, round_up(bytes > have ? bytes - have : 1, granularity_));
  shape.joined.below = below;
  // The block above is joined only when the request reaches past the whole room.
  shape.joined.above = shape.map_bytes < room->size || have + room->size >= bytes ? nullptr : above;
  return shape;
}

arena::growth_plan arena::cheapest_growth(std::size_t bytes, std::uint32_t slot) const {
  growth_plan plan;
  plan.map_bytes = round_up(bytes, granularity_);
  for (block* room : rooms_) {
    if (room->range->stream_slot != slot) continue;
    const window_shape shape = shape_of_window(room, bytes, slot);
    if (shape.fits && (plan.room == nullptr || shape.map_bytes < plan.map_bytes)) {
      plan.room = room;
      plan.joined = shape.joined;
      plan.map_bytes = shape.map_bytes;
    }
  }
  return plan;
}

driver_status arena::open_window(std::size_t bytes, std::uint32_t slot, window& w) {
  const std::size_t g = pages_.granularity();
  auto cost = [&](const block* room) { return window_cost(room, bytes, slot); };
  block* room = nullptr;
  if (extension_room_ != nullptr) {  // take_placed() passed over a wasteful fit for this one
    auto it = rooms_.find(extension_room_);
    if (extension_slot_ == slot && it != rooms_.end() && cost(*it) != 0) room = *it;
    extension_room_ = nullptr;
  }
  block probe;
  probe.address = 0;
  probe.size = round_up(bytes, g) > 2 * g ? round_up(bytes, g) - 2 * g : g;
  unsigned scanned = 0;
  // The first room that serves, by size from two granules short of the request (the free blocks
  // beside a room make up the rest). Choosing the one that maps the fewest bytes among them instead
  // moved the smallest GPU a loop runs on both ways (docs/RESULTS.md, section 0, "Near the device's
  // capacity, again").
  for (auto it = rooms_.lower_bound(&probe); room == nullptr && it != rooms_.end() && scanned < max_room_scan;
       ++it, ++scanned) {
    if (cost(*it) != 0) room = *it;
  }
  if (room == nullptr) {
    probe.size = round_up(bytes, g);
    auto fit = rooms_.lower_bound(&probe);
    while (fit != rooms_.end() && (*fit)->range->stream_slot != slot) ++fit;
    if (fit != rooms_.end()) room = *fit;
  }
  bool reserved = false;
  if (room == nullptr) {
    const driver_status status = reserve_range(bytes, slot, room);
    reserved = status == driver_status::success;
    if (status == driver_status::out_of_memory) {
      // No address space left for a range of the stream's own (many streams, each with ranges of
      // its own, several times the device's size): another stream's room serves rather than the
      // request failing (`probe` holds the request's size here).
      const auto fit = rooms_.lower_bound(&probe);
      if (fit == rooms_.end()) return status;
      room = *fit;
    } else if (!reserved) {
      return status;
    }
  }
  if (!reserved) {
    rooms_.erase(room);
    room->state = block_state::busy;
  }
  const window_shape shape = shape_of_window(room, bytes, slot);
  // A free block below that only the aliases' refusals keep out of the window counts as a refused
  // miss (note_alias_growth): growth maps its size again.
  const block* prev = room->prev;
  if (shape.joined.below == nullptr && settings_.aliases && prev != nullptr &&
      prev->state == block_state::free_mapped && (prev->owner == 0 || prev->owner == slot)) {
    refused_miss_ = true;
  }
  w.map_bytes = shape.map_bytes;
  for (block* b : {shape.joined.below, shape.joined.above}) {
    if (b == nullptr) continue;
    slots_[b->owner]->remove(b);
    b->state = block_state::busy;
  }
  w.below = shape.joined.below;
  w.room = room;
  w.above = shape.joined.above;
  w.cursor = room->address;
  return driver_status::success;
}

void arena::close_window(window& w, std::uint64_t tick) {
  block* room = w.room;
  const std::size_t mapped = w.cursor - room->address;
  for (block* b : {w.below, w.above}) {
    if (b != nullptr) b->state = block_state::free_mapped;
  }
  if (mapped == 0) {
    coalesce_unmapped(room);
    for (block* b : {w.below, w.above}) {
      if (b != nullptr) slots_[b->owner]->insert(b);
    }
    w = window{};
    return;
  }
  if (mapped < room->size) {
    block* rest = cut(room, mapped);
    coalesce_unmapped(rest);
  }
  room->state = block_state::free_mapped;
  // A stream's block extended stays its own (joined neighbours are of any stream or of that one).
  room->owner = 0;
  for (const block* b : {w.below, w.above}) {
    if (b != nullptr && b->owner != 0 && (b != w.above || room->next == w.above)) room->owner = b->owner;
  }
  room->free_sequence = 0;
  room->freed_tick = tick;
  if (w.below != nullptr) absorb_prev(room);
  if (w.above != nullptr && room->next != w.above) slots_[w.above->owner]->insert(w.above);  // room not all mapped
  if (block* n = room->next; n != nullptr && n->state == block_state::free_mapped && joins(n, room->owner)) {
    if (n != w.above) slots_[n->owner]->remove(n);
    absorb_next(room);
  }
  slots_[room->owner]->insert(room);
  w = window{};
}

driver_status arena::unmap_free_handles(std::size_t& want, std::size_t& room, std::uint64_t freed_by,
                                        std::vector<std::uint32_t>& out, std::size_t largest_handle,
                                        std::size_t smallest_handle, joined_blocks keep) {
  const std::size_t g = pages_.granularity();
  free_index& any = *slots_[0];
  // A whole handle inside `b` that fits `room`, at or above `from`; returns its id or no_handle.
  auto next_whole_handle = [&](const block* b, device_address from) -> std::uint32_t {
    for (device_address p = round_up(from, g); p + g <= b->end();) {
      const std::uint32_t id = pages_.handle_at(*b->range, p);
      if (id == page_table::no_handle) {
        p += g;
        continue;
      }
      const page_table::handle_record& h = pages_.record(id);
      if (!h.aliases.empty()) {  // drop_idle_aliases() unmaps what can go of an aliased handle
        p = std::max(p + g, pages_.mapping_start(id, p) + h.size);
        continue;
      }
      if (h.at >= b->address && h.at + h.size <= b->end() && h.size <= room && h.size <= largest_handle &&
          h.size >= smallest_handle) {
        return id;
      }
      p = std::max(p + g, h.at + h.size);
    }
    return page_table::no_handle;
  };
  std::vector<block*> candidates;
  // Smallest blocks first: a large free block is worth more whole (it serves a large request with
  // no driver call) than cut up, while a small one may hold a whole handle it will never use.
  for (unsigned bin = any.next_nonempty(free_index::bin_of(g)); bin < free_index::bins && want > 0;
       bin = any.next_nonempty(bin + 1)) {
    candidates.clear();
    for (block* b = any.head(bin); b != nullptr; b = b->link_next) {
      if (b->size >= g && b->freed_tick <= freed_by && !keep.has(b)) candidates.push_back(b);
    }
    for (block* cur : candidates) {
      if (want == 0) break;
      std::uint32_t id = next_whole_handle(cur, cur->address);
      if (id == page_table::no_handle) continue;
      any.remove(cur);
      while (cur != nullptr && id != page_table::no_handle && want > 0) {
        const page_table::handle_record h = pages_.record(id);
        const driver_status status = pages_.unmap(id);
        if (status != driver_status::success) {
          any.insert(cur);
          return status;
        }
        block* above = carve_unmapped(cur, h.at, h.size);
        out.push_back(id);
        want -= std::min(want, h.size);
        room -= h.size;
        cur = above;
        id = cur != nullptr ? next_whole_handle(cur, cur->address) : page_table::no_handle;
      }
      if (cur != nullptr) any.insert(cur);
    }
  }
  return driver_status::success;
}

block* arena::carve_unmapped(block* b, device_address at, std::size_t size) {
  block* mid = b;
  if (at > b->address) {
    mid = cut(b, at - b->address);
    slots_[0]->insert(b);  // the mapped piece below
  }
  block* above = at + size < mid->end() ? cut(mid, at + size - mid->address) : nullptr;
  coalesce_unmapped(mid);
  return above;
}

driver_status arena::grow_segment(std::size_t bytes, std::uint64_t tick) {
  const std::size_t size = round_up(bytes, pages_.granularity());
  device_address base = 0;
  const driver_status status = calls_.mem_alloc(size, &base);
  if (status != driver_status::success) return status;
  auto range = std::make_unique<address_range>();
  range->base = base;
  range->size = size;
  range->owner = this;
  range->segment = true;
  block* b = make_range_block(*range, base, size, block_state::free_mapped);
  b->freed_tick = tick;
  range->first = b;
  pages_.add_held(size);
  reserved_bytes_ += size;
  ranges_.push_back(std::move(range));
  slots_[0]->insert(b);
  return driver_status::success;
}

void arena::take_free_segments(std::uint64_t freed_by, std::size_t want, std::vector<address_range*>& out) {
  std::size_t taken = 0;
  for (auto& range : ranges_) {
    if (taken >= want) break;
    block* b = range->first;
    if (b->next == nullptr && b->state == block_state::free_mapped && b->owner == 0 && b->freed_tick <= freed_by) {
      slots_[0]->remove(b);
      b->state = block_state::busy;
      taken += range->size;
      out.push_back(range.get());
    }
  }
}

void arena::segment_freed(address_range* segment, bool freed) {
  block* b = segment->first;
  if (!freed) {
    b->state = block_state::free_mapped;
    slots_[0]->insert(b);
    return;
  }
  slab_.recycle(b);
  pages_.remove_held(segment->size);
  reserved_bytes_ -= segment->size;
  std::erase_if(ranges_, [segment](const std::unique_ptr<address_range>& r) { return r.get() == segment; });
}

std::size_t arena::largest_free_block() const noexcept {
  std::size_t largest = 0;
  for (const auto& index : slots_) {
    const unsigned bin = index->highest_nonempty();
    if (bin >= free_index::bins) continue;
    for (block* b = index->head(bin); b != nullptr; b = b->link_next) largest = std::max(largest, b->size);
  }
  return largest;
}

std::size_t arena::whole_free_handle_bytes() const noexcept {
  std::size_t bytes = 0;
  for_each_block([&](const block& b) {
    if (b.state == block_state::free_mapped) bytes += whole_handle_bytes(&b);
  });
  return bytes;
}

std::size_t arena::whole_handle_bytes(const block* b) const noexcept {
  if (b == nullptr) return 0;
  if (b->range->segment) return b->prev == nullptr && b->next == nullptr ? b->size : 0;
  std::size_t bytes = 0;
  const std::size_t g = pages_.granularity();
  for (device_address p = round_up(b->address, g); p + g <= b->end();) {
    const std::uint32_t id = pages_.handle_at(*b->range, p);
    if (id == page_table::no_handle) {
      p += g;
      continue;
    }
    const page_table::handle_record& h = pages_.record(id);
    if (h.aliases.empty() && h.at >= b->address && h.at + h.size <= b->end()) bytes += h.size;
    p = std::max(p + g, pages_.mapping_start(id, p) + h.size);
  }
  return bytes;
}

block* arena::find_containing(device_address address) const noexcept {
  for (const auto& r : ranges_) {
    if (!r->contains(address)) continue;
    for (block* b = r->first; b != nullptr; b = b->next) {
      if (address >= b->address && address < b->end()) return b;
    }
  }
  return nullptr;
}

void arena::tear_down() {
  const std::size_t g = pages_.granularity();
  for (std::uint32_t id = 0; pages_.aliased_handles() != 0 && id < pages_.handle_slots(); ++id) {  // aliases first
    const page_table::handle_record& h = pages_.record(id);
    if (h.range == nullptr || h.range->owner != this) continue;
    while (!h.aliases.empty()) {
      if (pages_.unmap_alias(id, h.aliases.back().at) != driver_status::success) break;
    }
  }
  for (auto& r : ranges_) {
    if (r->segment) {
      (void)calls_.mem_free(r->base, r->size);
      pages_.remove_held(r->size);
      continue;
    }
    for (std::size_t page = 0; page < r->page_handle.size();) {
      const std::uint32_t id = r->page_handle[page];
      if (id == page_table::no_handle) {
        ++page;
        continue;
      }
      // Read before the calls: a release clears the record, and a failed unmap leaves the granules
      // naming the handle, so the walk moves on by what was read here.
      const std::size_t granules = std::max<std::size_t>(1, pages_.record(id).size / g);
      (void)pages_.unmap(id);
      (void)pages_.release(id);
      page += granules;
    }
    (void)calls_.address_free(r->base, r->size);
  }
  ranges_.clear();
  rooms_.clear();
  for (auto& index : slots_) index = std::make_unique<free_index>();
  reserved_bytes_ = 0;
}

}  // namespace tidepool::detail
