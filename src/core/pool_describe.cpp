// pool_impl::describe: every block and mapped handle of the pool, for reports and snapshots
// (tidepool.dump_snapshot, tidepool.summary). Slow, under the lock; reads arenas and the page
// table through their const queries only.
#include <algorithm>

#include "core/pool_impl.hpp"

namespace tidepool::detail {

namespace {

block_description::status status_of(block_state state) noexcept {
  switch (state) {
    case block_state::live:
      return block_description::status::live;
    case block_state::free_mapped:
      return block_description::status::free;
    case block_state::free_unmapped:
      return block_description::status::unmapped;
    default:  // pending, busy, moving, parked: freed, not yet reusable by every stream
      return block_description::status::pending;
  }
}

}  // namespace

pool_description pool_impl::describe() {
  std::lock_guard guard(lock_);
  take_back_lent(true);  // blocks in threads' caches are shown as what they are to the program
  flush_parked();  // a parked block is free: show it so (and let it join its neighbours)
  pool_description d;
  d.stats = stats_locked();
  for (unsigned k = 0; k < arenas_.size(); ++k) {
    const arena& a = *arenas_[k];
    const auto kind = a.settings().kind;
    const bool small = kind == arena_kind::small_scratch || kind == arena_kind::small_persistent;
    const bool persistent = kind == arena_kind::small_persistent || kind == arena_kind::large_persistent;
    a.for_each_block([&](const block& b) {
      block_description bd;
      bd.address = b.address;
      bd.size = b.size;
      bd.state = status_of(b.state);
      bd.requested = b.state == block_state::live ? b.requested : 0;
      // Slot 0 is "any stream"; a slot above it names the stream that allocated (live) or may
      // reuse (free) the block.
      const bool named = b.owner != 0 && (b.state == block_state::live || b.state == block_state::free_mapped);
      bd.stream = named ? reinterpret_cast<std::uintptr_t>(streams_.at(b.owner).stream) : 0;
      bd.small = small;
      bd.persistent = persistent;
      bd.range = b.range != nullptr ? b.range->base : 0;
      d.blocks.push_back(bd);
    });
    d.largest_free_block = std::max(d.largest_free_block, a.largest_free_block());
    if (!asleep_) d.releasable_bytes += a.whole_free_handle_bytes();  // asleep, release() hands back nothing
  }
  pages_.for_each_mapped([&](const page_table::handle_record& h) {
    if (h.handle != 0) d.handles.push_back({h.at, h.size});  // 0: asleep (page_table::sleep_handle)
  });
  std::sort(d.handles.begin(), d.handles.end(),
            [](const handle_description& x, const handle_description& y) { return x.address < y.address; });
  return d;
}

}  // namespace tidepool::detail
