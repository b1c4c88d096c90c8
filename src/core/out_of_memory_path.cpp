// The out-of-memory path (DESIGN 3.4): before an allocation fails, reclaim everywhere the pool
// can reach, cheapest first, and retry after each step:
//   1. the pool's own cache: frees already safe go back to the driver (stealing has already tried
//      to reuse them; this also frees whole fallback segments);
//   2. the CUDA stream-ordered pools (memory parked by cudaMallocAsync users);
//   3. the process's reclaim hooks (other frameworks' caches), called without the pool's lock so a
//      hook may free into this pool;
//   4. frees still waiting for their streams: wait for the device, release, retry.
// Then hand back every free handle (the failed retries may have mapped some) and throw tidepool::out_of_memory with the figures a user needs to understand why.
#include <fmt/format.h>

#include <limits>

#include "core/pool_impl.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool::detail {

namespace {
constexpr std::uint64_t any_tick = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t everything = std::numeric_limits<std::size_t>::max();
}  // namespace

block* pool_impl::out_of_memory_path(arena& where, std::size_t size, std::size_t requested, stream_state& s) {
  auto retry = [&]() -> block* {
    if (block* b = where.take(size, s.slot)) return b;
    if (grow(where, size) == growth::grown) return where.take(size, s.slot);
    return nullptr;
  };
  auto recovered = [&](block* b) {
    ++recoveries_;
    return b;
  };

  settle_frees(false);
  (void)release_free(everything, any_tick);
  if (block* b = retry()) return recovered(b);

  (void)calls_.trim_async_pools();
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
  (void)release_free(everything, any_tick);
  if (block* b = retry()) return recovered(b);

  // Giving up: what the last retries mapped for this request (and every other free handle) goes
  // back, so other users of the GPU (plain cudaMalloc, other processes) can have it.
  (void)release_free(everything, any_tick);

  out_of_memory_report report;
  report.device = device_;
  report.requested_bytes = requested;
  report.in_use_bytes = in_use_;
  report.cached_bytes = pages_.held_bytes() - in_use_;
  report.driver_free_bytes = calls_.memory_info().free;
  report.largest_possible_bytes = largest_possible(report.driver_free_bytes);
  report.byte_cap = options_.byte_cap;
  throw out_of_memory(report);
}

std::size_t pool_impl::largest_possible(std::size_t driver_free) {
  std::size_t largest_block = 0;
  std::size_t whole_handles = 0;
  for (const auto& a : arenas_) {
    largest_block = std::max(largest_block, a->largest_free_block());
    whole_handles += a->whole_free_handle_bytes();
  }
  std::size_t creatable = driver_free > options_.headroom ? driver_free - options_.headroom : 0;
  const std::size_t held = pages_.held_bytes();
  if (options_.byte_cap != everything) creatable = std::min(creatable, held < options_.byte_cap ? options_.byte_cap - held : 0);
  // With the virtual memory API, whole free handles are stolen under any request; without it,
  // only a wholly free segment goes back (counted in whole_handles) to make room.
  const std::size_t grown = round_down(whole_handles + creatable, pages_.granularity());
  return std::max(largest_block, grown);
}

}  // namespace tidepool::detail
