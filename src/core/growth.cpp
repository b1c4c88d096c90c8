// Growth: serving a request the cache of free mapped blocks cannot.
//
// In order: (1) settle the streams' events and look again: the frees of streams that hold nothing
// live (or were forgotten) reach every stream, those of streams that still allocate stay theirs
// unless growth would pass the budget (pool_impl::hand_over_completed_frees); and, when growth
// would pass the budget, wait for the request's own stream first;
// (2) map memory under a window of free address space: new handles (page_table::handle_size_for)
// while held memory stays within the growth budget, (1 + growth_slack) * peak in use, and beyond
// it whole free handles stolen from anywhere in the pool (unmapped where they lie, mapped here:
// held memory does not grow, but each costs an unmap, a map and a set-access); (3) the
// out-of-memory path.
//
// The budget is fixed, and it is a cap, not what keeps held memory down: placement does that
// (placement.cpp: best fit with the frontier rule holds the recorded loops and the loader at
// expandable segments' figure or below with no stealing). Stealing keeps held memory near live
// memory when a workload fragments past the cap, since a request needs contiguous addresses, not
// contiguous memory; but a workload past the cap misses the cache in every step and steals in every
// step, forever, and the handles it moves are ones placement would have reused; a steal while a
// program still grows toward its peak leaves a hole in the free memory that later passes lay out
// around. So the default slack (pool_options::growth_slack, 1.0) sits well above what the measured
// workloads need. The budget does not widen by itself: one that did while stealing went on drifted
// far above both. The figures, and the frontier between held memory and driver time slack by
// slack, are in docs/RESULTS.md.
//
// A growth streak is growths with no free between them (a model's weights loaded, an optimizer's
// state made). Grown request by request it makes a handle or two per request, where expandable
// segments map 20 MiB pages and serve the next requests from a page's rest. So in a streak a large
// arena's growth maps at least what the streak has mapped so far, up to one such page and up to
// 1/64 of peak in use: the rest lies free at the frontier, where the streak's next request takes
// it, and what a streak can leave unused at its end is no more than expandable segments leave of
// their last page nor half the margin of DESIGN's 1.03 target. A free ends the streak, so the steps
// of a loop, whose temporaries come and go between growths, grow exactly as before. Not at the
// device's limit, past the growth budget, while aliasing, nor in a pool that gives its cache back
// by itself (pool_options::release); a rounded growth the device or a byte cap refuses is made
// again unrounded. What it saves and costs is in docs/RESULTS.md ("Growth streaks").
#include <fmt/format.h>

#include <limits>

#include "core/pool_impl.hpp"

namespace tidepool::detail {

namespace {
constexpr std::size_t preferred_stolen_handle_granules = 16;
// The most a growth streak rounds a growth up to: PyTorch's expandable segments' page.
constexpr std::size_t largest_streak_growth = std::size_t{20} << 20;
// ...and to no more than this fraction of peak in use.
constexpr std::size_t streak_rest_of_peak_inverse = 64;
// The device's limit ends, and its nearness begins, where the device could give the pool less than
// this fraction of what it holds.
constexpr std::size_t room_of_held_inverse = 4;
// The device fills (page_table::filling) once a growth would leave it less room than this many of
// the largest requests the pool has served: the fewest of those measured that settled the loops,
// two recordings of a diffusion U-Net among them (at four, the second placed its first step's blocks
// in 64 MiB handles made before the device filled, and their rests failed allocations:
// docs/RESULTS.md, section 0, "The device filling", "A second recording of each loop").
constexpr std::size_t filling_room_in_largest_requests = 6;
// The pool holds a share of the device once a growth would leave it less room than this many times
// what the pool would hold: from there a request's end granule gets a handle of its own (grow).
constexpr std::size_t device_share_room_in_held = 16;

[[noreturn]] void throw_driver_failure(const char* what, int device, driver_status status) {
  throw error(error_code::driver_failure,
              fmt::format("tidepool: {} failed on device {}: {}", what, device, to_string(status)));
}
}  // namespace

block* pool_impl::allocate_slow(arena& where, std::size_t size, std::size_t requested, stream_state& s) {
  // Blocks waiting in other threads' caches stay there while growth fits the budget: taken back,
  // they make those threads miss in turn, and with more threads than blocks of a size the misses
  // chase each other through this path for ever and the pool never grows to the threads' working
  // set (docs/RESULTS.md, section 8). Past the budget they come back before growth steals.
  // Within the growth budget each stream keeps the memory it freed (hand_over_completed_frees());
  // past it, every stream's completed frees serve the request before growth steals. Not while
  // aliasing: its placement keeps the two indexes apart and was measured with the hand-over.
  settle_frees_keeping_lent(options_.alias_free_handles);
  if (block* b = where.take(size, s.slot, true)) return b;
  if (beyond_growth_budget(size)) {
    hand_over_completed_frees();
    if (block* b = where.take(size, s.slot, true)) return b;
  }
  // The best fit cuts a handle larger than growth makes now (wake() joined it, or it was made before
  // the device's limit), and this stream's frees there are not known complete: wait for them, so
  // the handle is split rather than kept whole under a smaller block (placement.cpp).
  if (where.waits_for_frees()) {
    wait_for_stream(s);
    if (block* b = where.take(size, s.slot)) return b;
  }
  if (lent_count_ != 0 && beyond_growth_budget(size)) {
    take_back_lent(false);
    if (block* b = where.take(size, s.slot)) return b;
  }
  // Growth beyond the budget steals, and only memory free for every stream can be unmapped. When
  // the GPU runs behind the program, what the request's own stream freed a moment ago is not yet
  // (no event has completed): wait for it, so the footprint does not depend on how far behind the
  // GPU is. Only the request's stream is waited for (its work is queued before anything this
  // allocation will serve), and only when growth would pass the budget.
  if (virtual_memory_ && s.in_flight > 0 && beyond_growth_budget(size)) {
    wait_for_stream(s);
    if (block* b = where.take(size, s.slot)) return b;
  }
  // take() may have passed over a wasteful fit to extend a smaller free block (placement.cpp):
  // growth maps that extension, and take() then serves from what growth mapped (the extended
  // block lies at the frontier, which take() otherwise passes over when another block fits).
  struct growth_served {
    arena& a;
    ~growth_served() { a.serve_growth(false); }
  } restore{where};
  where.serve_growth(true);
  bool may_grow = true;
  if (pages_.at_limit() || pages_.near_limit()) {
    const std::size_t creatable = leave_limit_if_device_has_room();
    if (pages_.at_limit()) may_grow = growth_fits_device(where, size, s.slot, creatable);
  } else if (virtual_memory_) {
    watch_device_room(size);
  }
  if (may_grow && grow(where, size, s.slot) == growth::grown) {
    if (block* b = where.take(size, s.slot)) return b;
  }
  // Growth failed at the device's limit (or the byte cap): from here the out-of-memory path hands
  // back only what requests lack, and once it finds memory stranded in the rests of handles live
  // blocks pin, handles are smaller, so that what they pin can be handed back (page_table.cpp).
  pages_.set_at_limit(true);
  return out_of_memory_path(where, size, requested, s);
}

bool pool_impl::growth_fits_device(const arena& where, std::size_t size, std::uint32_t slot,
                                   std::size_t creatable) const {
  // At the limit the device often has less room than any growth for a large request maps. Tried,
  // such a growth made handles until the driver refused and handed them all back (a loop at its
  // capacity, hundreds of calls a miss), before the out-of-memory path planned the growth that maps
  // least and handed back only what that lacks. So it is not tried. Past the budget growth steals
  // rather than creates, and the device's room does not bound it.
  if (!virtual_memory_ || beyond_growth_budget(size)) return true;
  return where.cheapest_growth(size, slot).map_bytes <= creatable;
}

std::size_t pool_impl::leave_limit_if_device_has_room() {
  // Looked at before growth only, never from the out-of-memory path: the room that path has just
  // handed back is the limit's, not the device's. A quarter of what the pool holds is more room
  // than a loop running at its capacity finds at a growth, so such a loop stays at the limit; a
  // program that met the limit once (a warm-up, another process since gone, a byte cap since
  // raised, a sleep) finds it at its next growth. One cuMemGetInfo, and only while at or near the
  // limit.
  const std::size_t creatable = creatable_bytes(calls_.free_bytes());
  if (creatable >= pages_.held_bytes() / room_of_held_inverse) forget_device_limit();
  return creatable;
}

void pool_impl::watch_device_room(std::size_t size) {
  // The same quarter as leave_limit_if_device_has_room(), seen from the other side: a pool growing
  // into the device's last quarter (of what it holds) makes the limit's handles from there on.
  // The room only shrinks as the pool grows (other processes aside, which the out-of-memory path
  // still meets), so the driver is asked again only half way to where that room would end: a few
  // cuMemGetInfo calls in a program's life, none in a loop that has reached its peak.
  // The device fills once the room left is less than six of the largest requests: a request
  // larger than any before moves that point, so it asks again.
  const std::size_t need = round_up(size, pages_.granularity());
  const std::size_t held_after = pages_.held_bytes() + need;
  const bool largest_yet = need > largest_request_;
  largest_request_ = std::max(largest_request_, need);
  if (held_after < next_room_check_held_ && !largest_yet) return;
  const std::size_t creatable = creatable_bytes(calls_.free_bytes());
  const std::size_t room_after = creatable > need ? creatable - need : 0;
  const std::size_t filling_room = filling_room_in_largest_requests * largest_request_;
  if (room_after < filling_room) pages_.set_filling(true);
  const std::size_t share_room = device_share_room_in_held * held_after;
  if (room_after < share_room) holds_device_share_ = true;
  const std::size_t enough = held_after / room_of_held_inverse;
  if (room_after < enough) {
    pages_.set_near_limit(true);
    next_room_check_held_ = 0;
    return;
  }
  const std::size_t next_bound = pages_.filling() ? enough : std::max(enough, filling_room);
  next_room_check_held_ = held_after + (room_after - next_bound) / 2;
  // The share's bound moves with held memory: the room falls by what the pool grows and the bound
  // rises sixteen times as fast, so half way to it is a 34th of the gap on.
  if (!holds_device_share_) {
    const std::size_t to_share = (room_after - share_room) / (2 * (device_share_room_in_held + 1));
    next_room_check_held_ = std::min(next_room_check_held_, held_after + to_share);
  }
}

bool pool_impl::end_granule_gets_own_handle() const noexcept {
  // A block carved from the free rest of a request's end granule pins whatever handle holds that
  // granule, after the request's block is gone; in a granule handle of its own it pins 2 MiB, in
  // the growth's last large handle up to 64 MiB, which release() then keeps and only compact()
  // hands back. That matters where the device could fill: such rests stranded enough memory to
  // fail allocations on loops run near their capacity. A pool holding a small share of the device
  // would pay the extra handle of every growth for nothing but release()'s figure.
  return holds_device_share_ || pages_.filling() || pages_.near_limit() || pages_.at_limit();
}

void pool_impl::forget_device_limit() noexcept {
  pages_.set_at_limit(false);
  pages_.set_near_limit(false);
  pages_.set_filling(false);
  holds_device_share_ = false;
  next_room_check_held_ = 0;
}

std::size_t pool_impl::peak_with(std::size_t size) const noexcept {
  // Lent blocks count as in use: a thread's cache holds them for its next request; so do held-back
  // frees, which other streams' work still holds.
  return std::max(peak_in_use_, in_use_ + lent_bytes_ + held_back_bytes_ + size);
}

double pool_impl::budget_with(double slack, std::size_t size) const noexcept {
  return (1.0 + slack) * static_cast<double>(peak_with(size));
}

double pool_impl::alias_budget(std::size_t size) const noexcept {
  return budget_with(std::min(options_.alias_slack, options_.growth_slack), size);
}

double pool_impl::growth_budget(std::size_t size) const noexcept { return budget_with(options_.growth_slack, size); }

bool pool_impl::beyond_growth_budget(std::size_t size) const noexcept {
  return static_cast<double>(pages_.held_bytes() + round_up(size, pages_.granularity())) > growth_budget(size);
}

bool pool_impl::within_limits(std::size_t bytes, std::size_t& headroom_budget, std::size_t from_recycled) {
  if (byte_cap_ != std::numeric_limits<std::size_t>::max() &&
      (pages_.held_bytes() > byte_cap_ || bytes > byte_cap_ - pages_.held_bytes())) {
    return false;
  }
  if (options_.headroom != 0) {
    if (headroom_budget == std::numeric_limits<std::size_t>::max()) {
      const std::size_t free = calls_.free_bytes();
      headroom_budget = free > options_.headroom ? free - options_.headroom : 0;
    }
    // Recycled handles are the driver's memory already: its free figure does not count them.
    const std::size_t new_bytes = bytes - std::min(bytes, from_recycled);
    if (new_bytes > headroom_budget) return false;
    headroom_budget -= new_bytes;
  }
  return true;
}

pool_impl::growth pool_impl::grow(arena& where, std::size_t size, std::uint32_t slot, bool round_streak) {
  std::size_t headroom_budget = std::numeric_limits<std::size_t>::max();
  if (!virtual_memory_) {
    const std::size_t segment = round_up(size, pages_.granularity());
    if (!within_limits(segment, headroom_budget)) return growth::no_memory;
    const driver_status status = where.grow_segment(segment, tick_);
    if (status == driver_status::out_of_memory) return growth::no_memory;
    if (status != driver_status::success) throw_driver_failure("mem_alloc", device_, status);
    return growth::grown;
  }

  arena::window w;
  driver_status status = where.open_window(size, slot, w);
  if (status == driver_status::out_of_memory) return growth::no_memory;
  if (status != driver_status::success) throw_driver_failure("address_reserve", device_, status);

  address_range& range = *w.room->range;
  growth result = growth::grown;
  driver_status failure = driver_status::success;
  const char* failed_call = "";

  // Stolen handles: the other arenas' free memory first, then this arena's own: a hole cut in
  // another region's cache is less likely to be wanted back at once by a request like this one.
  // In the large arenas the granule that the request's end falls in gets a granule handle of its
  // own, stolen or new, so the block's neighbour above, carved from the rest of that granule,
  // never shares a large handle with it; large stolen handles stop short of it. Not when the
  // growth's last handle would be small anyway (at most a granule and a quarter of growth's
  // largest handle): the neighbour then pins at most a quarter of a handle more, what placement's
  // keep-whole rule accepts (placement.cpp), and the growth makes one handle fewer. Nor while the
  // pool holds a small share of the device (end_granule_gets_own_handle).
  const std::size_t g = pages_.granularity();
  const bool large = where.guards_large_handles();
  const std::size_t have = w.below != nullptr ? w.below->size : 0;
  // With aliases (pool_options::alias_free_handles), growth past the alias budget maps idle
  // handles again before it makes new ones; the end granule gets no handle of its own then: an
  // alias spans whole handles, and granule handles, aliased in turn, refused the blocks around
  // them (the serving loop held 2.2x with them; docs/RESULTS.md).
  const bool aliasing = large && where.aliasing();
  if (deallocations_ != deallocations_at_growth_) streak_bytes_ = 0;  // a free ended the streak
  bool rounded = false;
  if (round_streak && large && !aliasing && streak_bytes_ != 0 && !automatic_release_ && !pages_.at_limit() &&
      w.above == nullptr) {
    const std::size_t streak_growth = std::min({round_up(streak_bytes_, g), round_up(largest_streak_growth, g),
                                                round_down(peak_with(size) / streak_rest_of_peak_inverse, g)});
    const std::size_t bytes = std::min(std::max(w.map_bytes, streak_growth), w.room->size);
    if (bytes > w.map_bytes && static_cast<double>(pages_.held_bytes() + bytes) <= growth_budget(size)) {
      w.map_bytes = bytes;
      rounded = true;
    }
  }
  const std::size_t largest_handle = pages_.largest_growth_handle(aliasing);
  const std::size_t last_handle = w.map_bytes % largest_handle;
  const bool small_last_handle = last_handle != 0 && last_handle <= g + largest_handle / 4;
  const bool partial_end =
      large && !aliasing && !rounded && size > have && (size - have) % g != 0 && !small_last_handle &&
      end_granule_gets_own_handle();
  // The growth budget (pool_options::growth_slack): new handles up to it, stolen ones beyond.
  const double over = static_cast<double>(pages_.held_bytes() + w.map_bytes) - growth_budget(size);
  const std::size_t steal_at_least = over <= 0 ? 0 : round_up(static_cast<std::size_t>(over), g);
  std::vector<std::uint32_t> stolen;
  std::size_t want = std::min(w.map_bytes, steal_at_least);
  std::size_t aliased = 0;
  if (aliasing && static_cast<double>(pages_.held_bytes() + w.map_bytes) > alias_budget(size)) {
    aliased = where.map_idle_aliases(w, w.map_bytes, slot, status);
    if (status != driver_status::success) {
      failure = status;
      failed_call = "mem_map";
    }
    want -= std::min(want, aliased);
  }

  auto steal = [&](std::size_t& room, std::size_t largest, std::size_t smallest) {
    std::array<arena*, arena_kinds> order{};
    unsigned n = 0;
    for (auto& a : arenas_) {
      if (a.get() != &where) order[n++] = a.get();
    }
    order[n] = &where;
    for (arena* a : order) {
      if (want == 0 || failure != driver_status::success) break;
      status = a->unmap_free_handles(want, room, std::numeric_limits<std::uint64_t>::max(), stolen, largest, smallest);
      if (status != driver_status::success) {
        failure = status;
        failed_call = "mem_unmap";
      }
    }
  };
  if (want > 0) {
    if (large) {
      std::size_t room = (partial_end ? w.map_bytes - g : w.map_bytes) - aliased;
      // Handles of 32 MiB or more first (fewer calls per byte moved), then any size.
      steal(room, std::numeric_limits<std::size_t>::max(), preferred_stolen_handle_granules * g);
      steal(room, std::numeric_limits<std::size_t>::max(), 0);
      std::size_t rest = want;
      steal(rest, g, 0);  // the end granule, and whatever large handles could not cover
    } else {
      std::size_t room = w.room->size;
      steal(room, g, 0);  // small blocks share pages: granule handles only
    }
  }
  std::size_t mapped = aliased;
  for (std::uint32_t id : stolen) {
    const std::size_t handle_size = pages_.record(id).size;
    status = pages_.map(id, range, w.cursor);
    if (status != driver_status::success) {
      (void)pages_.release(id);  // unmapped and unusable here: hand it back rather than lose it
      if (failure == driver_status::success) {
        failure = status;
        failed_call = "mem_map";
      }
      continue;
    }
    w.cursor += handle_size;
    mapped += handle_size;
  }

  // New handles for what stealing could not cover: all of them within the byte cap and headroom,
  // or none (the out-of-memory path then makes room for the whole request; handles made for part
  // of it would only be handed back, and with them, by release_free's order, other cached ones).
  std::size_t new_bytes = 0;
  std::size_t remaining = failure == driver_status::success && w.map_bytes > mapped ? w.map_bytes - mapped : 0;
  auto next_handle_size = [&](std::size_t left) {
    return pages_.handle_size_for(partial_end && left > g ? left - g : left, where.settings().large_handles, aliasing);
  };
  // On the out-of-memory path the handles it handed back are kept for this growth
  // (handle_recycling.cpp): those of no size it makes go back to the driver before it creates any.
  if (pages_.recycled_bytes() != 0) {
    std::vector<std::size_t> sizes;
    for (std::size_t left = remaining; left > 0;) {
      sizes.push_back(next_handle_size(left));
      left -= sizes.back();
    }
    pages_.keep_recycled_for(std::move(sizes));
  }
  if (remaining > 0 && !within_limits(remaining, headroom_budget, pages_.recycled_bytes())) {
    result = growth::no_memory;
    remaining = 0;
  }
  std::vector<std::uint32_t> made;
  while (remaining > 0) {
    const std::size_t handle_size = next_handle_size(remaining);
    std::uint32_t id = 0;
    status = pages_.create(handle_size, id);
    if (status == driver_status::out_of_memory) {
      result = growth::no_memory;
      break;
    }
    if (status != driver_status::success) {
      failure = status;
      failed_call = "mem_create";
      break;
    }
    status = pages_.map(id, range, w.cursor);
    if (status != driver_status::success) {
      (void)pages_.release(id);
      if (status == driver_status::out_of_memory) {
        result = growth::no_memory;
      } else {
        failure = status;
        failed_call = "mem_map";
      }
      break;
    }
    w.cursor += handle_size;
    remaining -= handle_size;
    new_bytes += handle_size;
    made.push_back(id);
  }
  // The driver ran out part way: the handles made for this request go back, last first, so the
  // pool is as it was before it (a failed unmap or release leaves the rest mapped and counted).
  while (result == growth::no_memory && failure == driver_status::success && !made.empty()) {
    const std::uint32_t id = made.back();
    const std::size_t handle_size = pages_.record(id).size;
    if (pages_.unmap(id) != driver_status::success) break;
    w.cursor -= handle_size;
    new_bytes -= handle_size;
    made.pop_back();
    (void)pages_.release(id);  // a failed release is kept by the page table and retried by release()
  }
  where.close_window(w, tick_);
  deallocations_at_growth_ = deallocations_;
  streak_bytes_ += mapped + new_bytes;
  if (aliasing) {
    where.note_alias_growth(pages_.held_bytes(), alias_budget(size), new_bytes, peak_in_use_);
  }
  if (failure != driver_status::success) throw_driver_failure(failed_call, device_, failure);
  if (result == growth::no_memory && rounded) return grow(where, size, slot, false);
  return result;
}

}  // namespace tidepool::detail
