// Pages: creating, mapping, unmapping and releasing physical handles, and the handle size policy.
//
// Handle size. The driver's cost is per handle, not per byte (DESIGN 2a: create, map, set access
// and unmap cost about the same from 2 to 64 MiB), so growth in the large arenas maps as few
// handles as it can: each as large as what is left to map, up to max_large_handle_granules (64 MiB).
// That cap is the trade between first-pass driver time and what release() alone can give back: a
// live block pins every handle it touches, and a handle shared by several blocks stays pinned by
// the last of them. compact() hands that rest back by moving the live bytes (compaction.cpp), so
// the cap no longer decides what a program can get back, only what release() gets without a move;
// at 64 MiB a loop's first pass calls the driver less than expandable segments' 20 MiB pages do
// (docs/RESULTS.md, section 0, "64 MiB handles and no splits"). At the device's limit (once the
// pool's out-of-memory path has run, until release() or the device has room again: growth.cpp)
// and stranding (the path has found free memory stranded in the rests of handles live blocks pin,
// a 64th of what the pool holds, or a request it could not serve: out_of_memory_path.cpp) the cap
// is 8 MiB: there the free rest of a handle that a live block pins is memory no request can use
// and the out-of-memory path cannot hand back without moving bytes, and larger handles stranded
// enough of it to fail allocations on devices where expandable segments ran (docs/RESULTS.md,
// section 0, "Handles at the device's limit"). A pool at its limit that strands little (most
// loops at a few percent above their peak: their large blocks cover their handles whole) grows as
// near the limit (below) and keeps placement's rules away from it: the limit's 8 MiB handles and
// splits cost such a loop several times expandable segments' driver calls for no allocation saved
// (section 0, "Smaller handles at the limit only once memory strands"). Near the limit (a growth
// would leave the device less room than a quarter of what the pool holds: growth.cpp), before any
// allocation has failed, the last 256 MiB of each growth are mapped in 8 MiB handles: a loop at its
// capacity cuts and remaps the handles made while the pool grew into that last room, and 64 MiB
// ones there stranded rests that failed allocations where 8 MiB ones do not. What a growth maps
// before its last 256 MiB lies under the request's own block, which covers those handles whole;
// made 8 MiB as well, a loop's huge blocks cost several times the first pass's driver calls for no
// allocation saved (docs/RESULTS.md, section 0, "Near the device's limit"). Placement's rules stay
// those away from the limit until the pool strands: with the limit's splits, the 64 MiB handles
// made before were split in every such loop's first passes, for several times the driver calls.
// While the device fills (a growth would leave the device less room than six of the largest
// requests the pool has served: growth.cpp), before any of that, growth's handles are 20 MiB, and
// placement splits a larger handle made before under a block smaller than a quarter of it into
// pieces of at most 20 MiB (largest_new_handle; placement.cpp): the blocks a loop keeps from its
// first step (an optimizer's state) are placed in the holes its activations left, and in 64 MiB
// handles they stranded the rests a later large request needed, failing allocations in every step
// where expandable segments' 20 MiB pages failed none (docs/RESULTS.md, section 0, "The device
// filling"). It is measured against the largest requests rather than what the pool holds: a pool
// that holds most of a device but whose requests are small beside the room left is far from
// failing any of them, and would pay the smaller handles' calls for nothing.
// Every cap above is bounded by a 256th of what the pool could hold on its device (its capacity, or
// a byte cap below it; a granule at least): what live blocks pin of a handle's rest is bounded by
// the handle, and on a device of a few GiB (a small GPU, or a program capped to a share of a large
// one) 64 MiB handles made before the device filled stranded enough to fail allocations where
// expandable segments' 20 MiB pages (a 256th of 5 GiB) failed none. On a device of 16 GiB or more
// the bound is above every cap and nothing changes (docs/RESULTS.md, section 0, "Handles a 256th of
// the device").
// Regions that map idle handles a second time (aliases) use 64 MiB too: an alias
// spans whole handles, and smaller ones made later passes map aliases again. Small arenas use the
// granularity: small blocks share pages, and a page goes back only when none of them is live. How
// large handles are split when a block would pin a small part of one is placement.cpp's; the
// measured frontier is in docs/RESULTS.md.
#include "core/page_table.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "core/units.hpp"

namespace tidepool::detail {
namespace {
constexpr std::size_t max_large_handle_granules = 32;    // 64 MiB at the usual 2 MiB granularity
constexpr std::size_t max_handle_granules_at_limit = 4;  // 8 MiB
constexpr std::size_t max_handle_granules_while_filling = 10;  // 20 MiB
constexpr std::size_t max_aliased_handle_granules = 32;  // 64 MiB
// No growth handle (aliases aside) is larger than this fraction of what the pool could hold.
constexpr std::size_t device_bytes_per_largest_handle = 256;
// Near the limit, the last this many granules of a growth (256 MiB) get the limit's handles.
constexpr std::size_t near_limit_small_handle_tail_granules = 128;
// One sequence for every pool's exports in this process: an export id is never reused here.
std::atomic<std::uint64_t> last_export_id{0};
}  // namespace

void page_table::add_held(std::size_t bytes) noexcept {
  held_ += bytes;
  peak_held_ = std::max(peak_held_, held_);
}

std::uint32_t page_table::new_record() {
  std::uint32_t id = 0;
  if (free_ids_.empty()) {
    id = static_cast<std::uint32_t>(handles_.size());
    handles_.emplace_back();
  } else {
    id = free_ids_.back();
    free_ids_.pop_back();
  }
  handles_[id] = handle_record{};
  return id;
}

driver_status page_table::create(std::size_t size, std::uint32_t& id) {
  if (!recycled_.empty() && take_recycled(size, id)) return driver_status::success;
  physical_handle handle = 0;
  const driver_status status = calls_.mem_create(size, &handle);
  if (status != driver_status::success) return status;
  id = new_record();
  handles_[id].handle = handle;
  handles_[id].size = size;
  add_held(size);
  return driver_status::success;
}

void page_table::name_pages(address_range& range, device_address at, std::size_t size, std::uint32_t id) noexcept {
  const std::size_t first = (at - range.base) / granularity_;
  std::fill_n(range.page_handle.begin() + static_cast<std::ptrdiff_t>(first), size / granularity_, id);
}

driver_status page_table::map_at(std::uint32_t id, address_range& range, device_address at) {
  const handle_record& h = handles_[id];
  driver_status status = calls_.mem_map(at, h.size, h.handle);
  if (status != driver_status::success) return status;
  for (int peer : peers_) {
    status = calls_.mem_set_access(at, h.size, peer);
    if (status != driver_status::success) {
      (void)calls_.mem_unmap(at, h.size);
      return status;
    }
  }
  name_pages(range, at, h.size, id);
  return driver_status::success;
}

driver_status page_table::map(std::uint32_t id, address_range& range, device_address at) {
  const driver_status status = map_at(id, range, at);
  if (status != driver_status::success) return status;
  handles_[id].at = at;
  handles_[id].range = &range;
  return driver_status::success;
}

driver_status page_table::unmap(std::uint32_t id) {
  handle_record& h = handles_[id];
  if (!h.aliases.empty()) return driver_status::invalid_value;
  const driver_status status = calls_.mem_unmap(h.at, h.size);
  if (status != driver_status::success) return status;
  name_pages(*h.range, h.at, h.size, no_handle);
  h.at = 0;
  h.range = nullptr;
  return driver_status::success;
}

driver_status page_table::map_alias(std::uint32_t id, address_range& range, device_address at) {
  const driver_status status = map_at(id, range, at);
  if (status != driver_status::success) return status;
  handle_record& h = handles_[id];
  if (h.aliases.empty()) ++aliased_;
  h.aliases.push_back(alias_mapping{at, &range, 0});
  return driver_status::success;
}

driver_status page_table::unmap_alias(std::uint32_t id, device_address at) {
  handle_record& h = handles_[id];
  auto it = std::find_if(h.aliases.begin(), h.aliases.end(), [at](const alias_mapping& m) { return m.at == at; });
  if (it == h.aliases.end()) return driver_status::invalid_value;
  const driver_status status = calls_.mem_unmap(at, h.size);
  if (status != driver_status::success) return status;
  name_pages(*it->range, at, h.size, no_handle);
  h.aliases.erase(it);
  if (h.aliases.empty()) --aliased_;
  return driver_status::success;
}

device_address page_table::mapping_start(std::uint32_t id, device_address address) const noexcept {
  const handle_record& h = handles_[id];
  if (address >= h.at && address < h.at + h.size) return h.at;
  for (const alias_mapping& m : h.aliases) {
    if (address >= m.at && address < m.at + h.size) return m.at;
  }
  return h.at;
}

std::uint32_t page_table::live_through(std::uint32_t id, device_address address) const noexcept {
  const handle_record& h = handles_[id];
  if (address >= h.at && address < h.at + h.size) return h.live_first;
  for (const alias_mapping& m : h.aliases) {
    if (address >= m.at && address < m.at + h.size) return m.live;
  }
  return 0;
}

void page_table::count_live(std::uint32_t id, device_address address, int change, std::uint32_t slot,
                            std::uint64_t sequence) noexcept {
  handle_record& h = handles_[id];
  h.live = static_cast<std::uint32_t>(static_cast<int>(h.live) + change);
  if (address >= h.at && address < h.at + h.size) {
    h.live_first = static_cast<std::uint32_t>(static_cast<int>(h.live_first) + change);
  } else {
    for (alias_mapping& m : h.aliases) {
      if (address >= m.at && address < m.at + h.size) m.live = static_cast<std::uint32_t>(static_cast<int>(m.live) + change);
    }
  }
  if (change < 0 && sequence >= h.freed_sequence) {
    h.freed_slot = slot;
    h.freed_sequence = sequence;
  }
}

driver_status page_table::export_handle(std::uint32_t id, int* fd, std::uint64_t* export_id) {
  handle_record& h = handles_[id];
  if (h.export_fd < 0) {
    int exported = -1;
    const driver_status status = calls_.mem_export(h.handle, &exported);
    if (status != driver_status::success) return status;
    h.export_fd = exported;
    h.export_id = last_export_id.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  *export_id = h.export_id;
  *fd = ::fcntl(h.export_fd, F_DUPFD_CLOEXEC, 0);
  return *fd >= 0 ? driver_status::success : driver_status::error;
}

namespace {

void close_export(page_table::handle_record& h) noexcept {
  if (h.export_fd >= 0) ::close(h.export_fd);
  h.export_fd = -1;
  h.export_id = 0;
  h.exports_in_use = 0;
}

}  // namespace

void page_table::close_exports() noexcept {
  for (handle_record& h : handles_) close_export(h);
}

driver_status page_table::release(std::uint32_t id) {
  handle_record& h = handles_[id];
  const driver_status status = calls_.mem_release(h.handle, h.size);
  if (status != driver_status::success) {
    if (std::find(unreleased_.begin(), unreleased_.end(), id) == unreleased_.end()) unreleased_.push_back(id);
    return status;
  }
  close_export(h);
  remove_held(h.size);
  h = handle_record{};
  free_ids_.push_back(id);
  return driver_status::success;
}

driver_status page_table::release_all(const std::vector<std::uint32_t>& ids, std::size_t& released) {
  driver_status first_failure = driver_status::success;
  for (std::uint32_t id : ids) {
    const std::size_t size = handles_[id].size;
    // Kept for the growth that follows; released by stop_recycling() if it takes none of this size.
    // Never a handle this pool exported: another process may map its memory, which must not come
    // back under a new allocation here (released, it lives on there alone).
    if (recycling_ && handles_[id].export_fd < 0) {
      held_ -= size;
      recycled_.push_back(id);
      recycled_bytes_ += size;
      released += size;
      continue;
    }
    const driver_status status = release(id);  // a failure is kept on the unreleased list
    if (status == driver_status::success) {
      released += size;
    } else if (first_failure == driver_status::success) {
      first_failure = status;
    }
  }
  return first_failure;
}

driver_status page_table::retry_unreleased(std::size_t& released) {
  std::vector<std::uint32_t> retry;
  retry.swap(unreleased_);
  return release_all(retry, released);
}

std::size_t page_table::unreleased_bytes() const noexcept {
  std::size_t bytes = 0;
  for (std::uint32_t id : unreleased_) bytes += handles_[id].size;
  return bytes;
}

driver_status page_table::add_peer(int peer) {
  if (std::find(peers_.begin(), peers_.end(), peer) != peers_.end()) return driver_status::success;
  for (const handle_record& h : handles_) {
    if (h.size == 0 || h.at == 0) continue;
    const driver_status status = calls_.mem_set_access(h.at, h.size, peer);
    if (status != driver_status::success) return status;
  }
  peers_.push_back(peer);
  return driver_status::success;
}

std::size_t page_table::handle_size_for(std::size_t bytes, bool large_handles, bool aliasing) const noexcept {
  if (!large_handles) return granularity_;
  if (near_limit_ && !aliasing && bytes < near_limit_small_handle_tail_granules * granularity_) {
    return std::min({bytes, max_handle_granules_at_limit * granularity_, largest_handle_of_device_});
  }
  return std::min(bytes, largest_new_handle(aliasing));
}

std::size_t page_table::largest_new_handle(bool aliasing) const noexcept {
  if (filling_ && !at_limit_ && !aliasing) {
    return std::min(max_handle_granules_while_filling * granularity_, largest_growth_handle(aliasing));
  }
  return largest_growth_handle(aliasing);
}

void page_table::set_device_bytes(std::size_t bytes) noexcept {
  largest_handle_of_device_ = std::max(granularity_, round_down(bytes / device_bytes_per_largest_handle, granularity_));
}

std::size_t page_table::largest_growth_handle(bool aliasing) const noexcept {
  if (aliasing) return max_aliased_handle_granules * granularity_;
  return std::min((stranding_ ? max_handle_granules_at_limit : max_large_handle_granules) * granularity_,
                  largest_handle_of_device_);
}

// --- sleep and wake (pool::sleep, sleep_wake.cpp) ---

std::vector<std::uint32_t> page_table::mapped_ids() const {
  std::vector<std::uint32_t> ids;
  for (std::uint32_t id = 0; id < handles_.size(); ++id) {
    if (handles_[id].size != 0 && handles_[id].at != 0) ids.push_back(id);
  }
  return ids;
}

driver_status page_table::sleep_handle(std::uint32_t id, bool& remapped) {
  remapped = true;
  handle_record& h = handles_[id];
  if (!h.aliases.empty()) return driver_status::not_supported;  // pool::sleep refuses aliases first
  driver_status status = calls_.mem_unmap(h.at, h.size);
  if (status != driver_status::success) return status;
  status = calls_.mem_release(h.handle, h.size);
  if (status != driver_status::success) {
    // Still held: mapped back where it was, so the caller can leave the pool as it found it.
    remapped = calls_.mem_map(h.at, h.size, h.handle) == driver_status::success;
    for (int peer : peers_) {
      if (remapped) remapped = calls_.mem_set_access(h.at, h.size, peer) == driver_status::success;
    }
    return status;
  }
  close_export(h);
  remove_held(h.size);
  h.handle = 0;
  return driver_status::success;
}

driver_status page_table::wake_handle(std::uint32_t id) {
  handle_record& h = handles_[id];
  physical_handle handle = 0;
  driver_status status = calls_.mem_create(h.size, &handle);
  if (status != driver_status::success) return status;
  status = calls_.mem_map(h.at, h.size, handle);
  for (std::size_t i = 0; status == driver_status::success && i < peers_.size(); ++i) {
    status = calls_.mem_set_access(h.at, h.size, peers_[i]);
    if (status != driver_status::success) (void)calls_.mem_unmap(h.at, h.size);
  }
  if (status != driver_status::success) {
    (void)calls_.mem_release(handle, h.size);
    return status;
  }
  h.handle = handle;
  add_held(h.size);
  return driver_status::success;
}

void page_table::join_slept(std::uint32_t first, std::uint32_t next) noexcept {
  handle_record& joined = handles_[first];
  handle_record& h = handles_[next];
  name_pages(*h.range, h.at, h.size, first);
  joined.size += h.size;
  h = handle_record{};
  free_ids_.push_back(next);
}

void page_table::split_slept(std::uint32_t id, const std::vector<std::pair<device_address, std::size_t>>& runs,
                             std::vector<std::uint32_t>& out) {
  address_range& range = *handles_[id].range;
  forget_slept(id);
  for (const auto& [at, size] : runs) {
    const std::uint32_t piece = new_record();
    handles_[piece].size = size;
    handles_[piece].at = at;
    handles_[piece].range = &range;
    name_pages(range, at, size, piece);
    out.push_back(piece);
  }
}

void page_table::forget_slept(std::uint32_t id) noexcept {
  handle_record& h = handles_[id];
  name_pages(*h.range, h.at, h.size, no_handle);
  h = handle_record{};
  free_ids_.push_back(id);
}

}  // namespace tidepool::detail
