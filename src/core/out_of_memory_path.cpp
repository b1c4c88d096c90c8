// The out-of-memory path (DESIGN 3.4): before an allocation fails, reclaim where the pool can
// reach, cheapest first, and retry after each step:
//   1. the pool's own cache: frees whose events completed, and free handles handed back to the
//      driver so that new ones fit (growth steals free handles only beyond its budget);
//   2. the CUDA stream-ordered pools (memory parked by cudaMallocAsync users);
//   3. the process's reclaim hooks (other frameworks' caches);
//   4. frees still waiting for their streams: wait for the device;
//   5. with pool_options::compact_on_out_of_memory, compaction (compaction.cpp): the granules of
//      handles that live blocks touch only in part, handed back by moving the live bytes, when
//      that covers what the request lacks.
// Steps 2-5 run with the pool's lock dropped (the hooks may free into this pool; the others take
// as long as the GPU does, and cached allocations on other threads must not wait behind them).
//
// Reclaim only what the request needs. A request the byte cap could never hold fails at once; what
// growth mapped for a request it could not finish goes back; at each step free handles go back
// only when what the driver can still give falls short and the handles cover the rest, those of
// the request's own arena first. When nothing helps, the cache stays as it was, and
// tidepool::out_of_memory carries the figures a user needs to understand why.
//
// The path also tells the pool at its limit when it strands memory (page_table::mark_stranding):
// at an entry where free memory outside whole free handles is more than a 64th of what it holds,
// where what it holds free cannot serve the request, and when a request fails. Only from then on
// are handles smaller and split (page_table.cpp, placement.cpp).
#include <fmt/format.h>

#include <limits>
#include <optional>

#include "core/pool_impl.hpp"
#include "core/unlocked_call.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool::detail {

namespace {
constexpr std::uint64_t any_tick = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t everything = std::numeric_limits<std::size_t>::max();
// The pool at the limit strands memory (page_table::mark_stranding) once free memory outside whole
// free handles is more than this fraction of what it holds at an entry to the path.
constexpr std::size_t stranded_of_held_inverse = 64;

// Recycles the handles handed back while it lives (page_table::start_recycling); those growth did
// not take go back to the driver when it ends, on every way out.
class recycling_scope {
 public:
  recycling_scope(page_table& pages, bool virtual_memory) : pages_(virtual_memory ? &pages : nullptr) {
    if (pages_ != nullptr) pages_->start_recycling();
  }
  ~recycling_scope() {
    if (pages_ == nullptr) return;
    try {
      pages_->stop_recycling();
    } catch (...) {
      // A driver that throws from mem_release: the handle stays on the unreleased list, which
      // release() and the destructor try again.
    }
  }
  recycling_scope(const recycling_scope&) = delete;
  recycling_scope& operator=(const recycling_scope&) = delete;

 private:
  page_table* pages_;
};
}  // namespace

block* pool_impl::out_of_memory_path(arena& where, std::size_t size, std::size_t requested, stream_state& s) {
  const std::size_t need = round_up(size, pages_.granularity());
  // What growth mapped for a request it could not finish goes back (it lies in the request's
  // arena): the pool is then as it was before the request, and each attempt starts from there.
  auto hand_back_growth = [&](std::size_t held_before) {
    const std::size_t held = pages_.held_bytes();
    if (held > held_before) (void)release_free(held - held_before, any_tick, &where, true);
  };
  // Whether growth can serve the request now: what the driver can still give, and free handles
  // handed back for the rest, only when those cover it (else releasing them only costs the program
  // their re-creation later). With the virtual memory API growth maps only what its window lacks:
  // at the device's limit a request often misses the largest free block by a little and the room
  // above it takes the rest. Handing back the request's whole size would give up the free blocks
  // the loop's next requests are placed in, and they would miss in turn, in every step
  // (docs/RESULTS.md, section 0, "What the window lacks"). So the growth that maps the fewest bytes
  // is planned, only what it lacks goes back, never the free blocks its window joins, and
  // open_window() takes the cheapest room (retry, below).
  //
  // Returns what the driver can give once the handles are back (nullopt: not enough reachable).
  auto make_room = [&]() -> std::optional<std::size_t> {
    const std::size_t creatable = creatable_bytes(calls_.free_bytes());
    // Whole free handles of every arena (what stealing or releasing can reach), counted once.
    std::optional<std::size_t> whole_handles;
    auto whole_free_handles = [&]() {
      if (!whole_handles) whole_handles = whole_free_handle_bytes();
      return *whole_handles;
    };
    if (virtual_memory_) {
      const arena::growth_plan plan = where.cheapest_growth(size, s.slot);
      if (plan.room != nullptr) {
        std::size_t reachable = whole_free_handles();
        const std::size_t kept =
            where.whole_handle_bytes(plan.joined.below) + where.whole_handle_bytes(plan.joined.above);
        reachable -= std::min(reachable, kept);
        // What the growth lacks, and what would take the pool past its growth budget (which
        // growth would have to steal: handed back here, it steals nothing), as far as reachable.
        const std::size_t lacks = plan.map_bytes > creatable ? plan.map_bytes - creatable : 0;
        const double over = static_cast<double>(pages_.held_bytes() + plan.map_bytes) - growth_budget(size);
        const std::size_t beyond_budget =
            over > 0 ? round_up(static_cast<std::size_t>(over), pages_.granularity()) : 0;
        const std::size_t give = std::min(std::max(lacks, beyond_budget), reachable);
        if (give >= lacks) {
          // From the request's own arena first. In the arenas' order a large request took the
          // small arenas' free pages first, and each of their next pages came back through this
          // path, for a large handle each (docs/RESULTS.md, section 0, "The request's own arena
          // first").
          std::size_t given = give != 0 ? release_free(give, any_tick, &where, false, plan.joined) : 0;
          if (given < give) given += release_free(give - given, any_tick, nullptr, false, plan.joined);
          return creatable + given;
        }
        // Not without the joined blocks' handles: as when no room serves.
      }
    }
    if (creatable >= need) return creatable;
    // Whole free handles, and the free block growth may extend (its granules shared with live
    // neighbours are not whole handles): an upper bound.
    const std::size_t reachable = where.largest_free_block() + whole_free_handles();
    if (reachable < need - creatable) return std::nullopt;
    return creatable + release_free(need - creatable, any_tick);
  };
  // Whether the growth planned over what is there now (handing back made rooms of its own) fits
  // what the driver can give; if so the next open_window() takes that room. Handles count as
  // reachable above whatever their frees' state, but only those whose frees the GPU has finished
  // go back (release_free): tried with less, the growth made handles until the driver refused and
  // then handed them all back, at every step before the device-wide wait (docs/RESULTS.md, section
  // 0, "No growth the driver would refuse"). The path's later steps, that wait last, complete those
  // frees. A growth past the budget steals free handles instead, and is tried.
  auto growth_fits = [&](std::size_t driver_room) {
    if (!virtual_memory_) return true;
    const arena::growth_plan plan = where.cheapest_growth(size, s.slot);
    const bool steals = static_cast<double>(pages_.held_bytes() + plan.map_bytes) > growth_budget(size);
    if (plan.map_bytes > driver_room && !steals) return false;
    where.prefer_room(plan.room, s.slot);
    return true;
  };
  // A request the pool cannot serve from what it holds free strands memory, unless it could never
  // fit beside what is in use (could_ever_fit): such a request (a program probing the largest
  // allocation it can make) says nothing of how the pool's memory lies.
  auto strands = [&]() {
    if (could_ever_fit(size)) pages_.mark_stranding();
  };
  auto retry = [&]() -> block* {
    cover_frees(s);  // frees made on s while the lock was dropped
    settle_frees(false);
    if (block* b = where.take(size, s.slot)) return b;
    bool grown = false;
    {
      // The handles handed back here are kept for the growth below, which maps those of the sizes
      // it makes again rather than the driver releasing and creating them (handle_recycling.cpp).
      const recycling_scope recycling(pages_, virtual_memory_);
      const std::optional<std::size_t> driver_room = make_room();
      if (!driver_room) strands();  // what the pool holds free cannot serve it
      if (!driver_room || !growth_fits(*driver_room)) return nullptr;
      const std::size_t held_before_growth = pages_.held_bytes();
      grown = grow(where, size, s.slot) == growth::grown;
      if (!grown) hand_back_growth(held_before_growth);
    }
    return grown ? where.take(size, s.slot) : nullptr;
  };
  auto recovered = [&](block* b) {
    ++recoveries_;
    return b;
  };

  mark_stranding_if_rests_hold_much();
  hand_over_completed_frees();
  hand_back_growth(held_before_miss_);
  if (!over_byte_cap(size)) {
    if (block* b = retry()) return recovered(b);

    (void)call_unlocked(lock_, calls_, driver_call::async_pool_trim, 0,
                        [this](driver& d) { return d.trim_async_pools(device_); });
    if (block* b = retry()) return recovered(b);

    {
      // The hooks may call back into this pool (a framework emptying its cache frees into it).
      lock_.unlock();
      try {
        (void)run_reclaim_hooks(device_, size);
      } catch (...) {
        lock_.lock();
        throw;
      }
      lock_.lock();
    }
    if (block* b = retry()) return recovered(b);

    settle_frees(true);
    if (block* b = retry()) return recovered(b);

    if (compact_for(need, s)) {
      if (block* b = retry()) return recovered(b);
    }
  }
  strands();
  out_of_memory_report report;
  report.device = device_;
  report.requested_bytes = requested;
  report.in_use_bytes = in_use_;
  report.cached_bytes = pages_.held_bytes() - in_use_;
  report.driver_free_bytes = calls_.free_bytes();
  report.largest_possible_bytes = largest_possible(report.driver_free_bytes);
  report.byte_cap = byte_cap_;
  if (virtual_memory_ && !options_.alias_free_handles) report.compactable_bytes = compactable_bytes();
  if (recording_) note(recorded_event::kind::allocate_failure, 0, requested, s.stream);
  throw out_of_memory(report);
}

void pool_impl::mark_stranding_if_rests_hold_much() {
  // Free memory outside whole free handles (the rests of handles live blocks pin, and free blocks
  // within granules live ones share) is what only smaller handles and splits could have kept
  // reachable. A loop whose large blocks cover their handles whole leaves little of it, and at its
  // limit is spared their driver calls; one that strands a 64th of what it holds is near failing
  // requests the pool holds enough for (docs/RESULTS.md, section 0, "Smaller handles at the limit
  // only once memory strands"). compactable_bytes() counts the pinned rests alone, but lists every
  // partly live handle; one walk of the free blocks serves at every entry to the path.
  const std::size_t held = pages_.held_bytes();
  const std::size_t live_or_whole = in_use_ + whole_free_handle_bytes();
  const std::size_t stranded = held > live_or_whole ? held - live_or_whole : 0;
  if (stranded * stranded_of_held_inverse > held) pages_.mark_stranding();
}

std::size_t pool_impl::largest_possible(std::size_t driver_free) {
  std::size_t largest_block = 0;
  for (const auto& a : arenas_) largest_block = std::max(largest_block, a->largest_free_block());
  const std::size_t whole_handles = whole_free_handle_bytes();
  const std::size_t creatable = creatable_bytes(driver_free);
  // With the virtual memory API, whole free handles are stolen under any request; without it,
  // only a wholly free segment goes back (counted in whole_handles) to make room.
  const std::size_t grown = round_down(whole_handles + creatable, pages_.granularity());
  return std::max(largest_block, grown);
}

std::size_t pool_impl::whole_free_handle_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& a : arenas_) bytes += a->whole_free_handle_bytes();
  return bytes;
}

std::size_t pool_impl::creatable_bytes(std::size_t driver_free) const noexcept {
  std::size_t creatable = driver_free > options_.headroom ? driver_free - options_.headroom : 0;
  const std::size_t held = pages_.held_bytes();
  if (byte_cap_ != everything) creatable = std::min(creatable, held < byte_cap_ ? byte_cap_ - held : 0);
  return creatable;
}

}  // namespace tidepool::detail
