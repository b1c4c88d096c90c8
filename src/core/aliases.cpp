// Aliases (pool_options::alias_free_handles, experimental): a handle mapped at more than one
// address of its arena, of which one at a time holds live blocks.
//
// Past the alias budget, (1 + alias_slack) x peak in use, growth maps handles that no live block
// touches a further time under the request (arena::map_idle_aliases): one map and set-access, no
// unmap, no new memory, and the mapping stays, so a loop that comes back to either shape finds it
// mapped. What aliases cannot cover is new handles up to the growth budget (growth_slack), stolen
// ones beyond it, as without aliases.
// What keeps it safe is placement's check (span_refused): a block is never placed where it would
// touch a handle that has a live block through another mapping, or whose latest free on another
// stream is not known complete (queued work may still use its memory through the other address),
// or where it would hold two mappings of one handle; a block then starts at the lowest clear start
// of its free block (clear_start), not at the free block's start. Every live block of the arena is
// counted on the handles it touches (count_live: at placement and at give_back), which is what the
// check reads. release() first unmaps the further mappings of handles nobody uses (drop_idle_aliases),
// so a handle goes back with its last mapping and release stays exact. Aliased handles are never
// split nor stolen, and sleep() refuses while a live block lies on an aliased handle (it unmaps the
// idle ones first, as release() does).
// Aliasing stops for good in an arena (note_alias_growth) once the new memory it made past the
// alias budget after refused misses (a free block that fitted, or one below the growth window,
// passed over only because an alias refused it) passes alias_stop_fraction (0.6) x peak in use.
// The stop is late on purpose: it leaves the aliases already mapped, and live blocks on them go
// on refusing the free memory around them, so a pool that stops in the middle of a loop grows by
// whole requests afterwards and holds more than if it had never aliased (checkpointed loops did).
// Where refusals cause most of the growth (the loader, random mixes: nearly their whole peak in
// use within one pass) stopping still pays; checkpointed, serving and generation loops stay well
// below the threshold and keep aliasing. The model this follows, and what each threshold holds,
// are in docs/RESULTS.md, section 0 ("One handle at several addresses", "Aliases with a budget of
// their own", "The aliases' stop").
#include <algorithm>
#include <vector>

#include "core/arena.hpp"
#include "core/units.hpp"

namespace tidepool::detail {

void arena::count_live(const block& b, int change, std::uint32_t slot, std::uint64_t sequence) noexcept {
  const std::size_t g = granularity_;
  for (device_address p = round_down(b.address, g); p < b.end();) {
    const std::uint32_t id = pages_.handle_at(*b.range, p);
    if (id == page_table::no_handle) {
      p += g;
      continue;
    }
    pages_.count_live(id, p, change, slot, sequence);
    p = pages_.mapping_start(id, p) + pages_.record(id).size;
  }
}

bool arena::span_refused(const address_range& range, device_address address, std::size_t size,
                         std::uint32_t slot) const {
  return refused_until(range, address, size, slot) != 0;
}

device_address arena::clear_start(const block& c, std::size_t bytes, std::uint32_t slot) const {
  device_address start = c.address;
  while (start + bytes <= c.end()) {
    const device_address until = refused_until(*c.range, start, bytes, slot);
    if (until == 0) return start;
    start = until;
  }
  return 0;
}

device_address arena::refused_until(const address_range& range, device_address address, std::size_t size,
                                    std::uint32_t slot) const {
  if (pages_.aliased_handles() == 0) return 0;
  device_address until = 0;
  const std::size_t g = granularity_;
  std::vector<std::uint32_t> seen;  // the aliased handles met so far (a span meets a few dozen at most)
  for (device_address p = round_down(address, g); p < address + size;) {
    const std::uint32_t id = pages_.handle_at(range, p);
    if (id == page_table::no_handle) {
      p += g;
      continue;
    }
    const page_table::handle_record& h = pages_.record(id);
    const device_address start = pages_.mapping_start(id, p);
    if (!h.aliases.empty()) {
      const bool refused =
          h.live != pages_.live_through(id, p) ||
          (h.freed_slot != 0 && h.freed_slot != slot &&
           (frees_done_ == nullptr || !frees_done_(pool_, h.freed_slot, h.freed_sequence))) ||
          std::find(seen.begin(), seen.end(), id) != seen.end();
      if (refused) until = start + h.size;
      seen.push_back(id);
    }
    p = start + h.size;
  }
  return until;
}

block* arena::find_allowed(free_index& index, std::size_t bytes, std::uint32_t slot) {
  block* b = find_inside(index, bytes);
  if (!settings_.aliases || pages_.aliased_handles() == 0) return b;
  std::vector<block*> skipped;  // allocates only when a block is passed over
  while (b != nullptr && clear_start(*b, bytes, slot) == 0) {
    if (skipped.size() == max_refused_skips) {
      b = nullptr;
      break;
    }
    index.remove(b);
    skipped.push_back(b);
    b = find_inside(index, bytes);
  }
  for (auto it = skipped.rbegin(); it != skipped.rend(); ++it) index.insert(*it);
  return b;
}

std::size_t arena::map_idle_aliases(window& w, std::size_t most, std::uint32_t slot, driver_status& status) {
  status = driver_status::success;
  auto touches_window = [&](device_address at, std::size_t size) {
    for (const block* b : {w.below, w.room, w.above}) {
      if (b != nullptr && at < b->end() && b->address < at + size) return true;
    }
    return false;
  };
  std::vector<std::uint32_t> idle;
  for (std::uint32_t id = 0; id < pages_.handle_slots(); ++id) {
    const page_table::handle_record& h = pages_.record(id);
    if (h.size == 0 || h.handle == 0 || h.range == nullptr || h.range->owner != this || h.live != 0 ||
        h.size > most) {
      continue;
    }
    if (h.freed_slot != 0 && h.freed_slot != slot &&
        (frees_done_ == nullptr || !frees_done_(pool_, h.freed_slot, h.freed_sequence))) {
      continue;
    }
    bool near = touches_window(h.at, h.size);
    for (const page_table::alias_mapping& m : h.aliases) near = near || touches_window(m.at, h.size);
    if (!near) idle.push_back(id);
  }
  std::stable_sort(idle.begin(), idle.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return pages_.record(a).size > pages_.record(b).size; });
  std::size_t mapped = 0;
  for (std::uint32_t id : idle) {
    const std::size_t size = pages_.record(id).size;
    if (size > most - mapped) continue;
    status = pages_.map_alias(id, *w.room->range, w.cursor);
    if (status != driver_status::success) break;
    w.cursor += size;
    mapped += size;
    if (mapped == most) break;
  }
  return mapped;
}

void arena::note_alias_growth(std::size_t held, double alias_budget, std::size_t new_bytes,
                              std::size_t peak_in_use) noexcept {
  const double over = static_cast<double>(held) - alias_budget;
  if (refused_miss_ && over > 0) refused_growth_ += std::min(new_bytes, static_cast<std::size_t>(over));
  if (static_cast<double>(refused_growth_) > alias_stop_fraction * static_cast<double>(peak_in_use)) {
    aliasing_stopped_ = true;
  }
}

driver_status arena::drop_idle_aliases() {
  free_index& any = *slots_[0];
  for (std::uint32_t id = 0; id < pages_.handle_slots(); ++id) {
    const page_table::handle_record& h = pages_.record(id);
    if (h.aliases.empty() || h.range == nullptr || h.range->owner != this || h.live != 0) continue;
    if (h.freed_slot != 0 && (frees_done_ == nullptr || !frees_done_(pool_, h.freed_slot, h.freed_sequence))) {
      continue;
    }
    const std::size_t size = h.size;
    std::vector<page_table::alias_mapping> mappings = h.aliases;
    for (const page_table::alias_mapping& m : mappings) {
      block* b = find_containing(m.at);
      if (b == nullptr || b->state != block_state::free_mapped || b->owner != 0 || b->address > m.at ||
          b->end() < m.at + size) {
        continue;  // not wholly free for every stream: it stays
      }
      any.remove(b);
      const driver_status status = pages_.unmap_alias(id, m.at);
      if (status != driver_status::success) {
        any.insert(b);
        return status;
      }
      if (block* above = carve_unmapped(b, m.at, size)) any.insert(above);
    }
  }
  return driver_status::success;
}

}  // namespace tidepool::detail
