// Pages: physical memory handles, where each is mapped, and how big a new one should be.
//
// A handle (mem_create) is mapped whole (the driver refuses a mapping at an offset into a handle),
// so it is the unit of release and of "stealing": a free handle is unmapped where it is and mapped
// under a new request elsewhere, never copied. Each reserved range keeps one entry per granule
// saying which handle backs it, so the arena can tell which handles lie wholly inside a free block.
//
// The table also keeps the pool's count of physical bytes held (handles created and not released,
// and fallback segments), which is what the driver charges the process for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/driver_calls.hpp"
#include "tidepool/driver.hpp"

namespace tidepool::detail {

struct block;
class arena;

/// One reserved virtual range (or, without the virtual memory API, one mem_alloc segment).
struct address_range {
  device_address base = 0;
  std::size_t size = 0;
  arena* owner = nullptr;
  block* first = nullptr;               ///< lowest block; blocks cover the range with no gap
  std::vector<std::uint32_t> page_handle;  ///< handle id per granule (virtual memory only)
  bool segment = false;                 ///< a plain mem_alloc segment (no virtual memory API)
  /// The stream slot whose growth reserved the range: growth maps only in its stream's ranges
  /// (arena::open_window).
  std::uint32_t stream_slot = 0;

  [[nodiscard]] device_address end() const noexcept { return base + size; }
  [[nodiscard]] bool contains(device_address a) const noexcept { return a >= base && a < base + size; }
};

class page_table {
 public:
  static constexpr std::uint32_t no_handle = ~std::uint32_t{0};

  /// A further mapping of a handle (pool_options::alias_free_handles).
  struct alias_mapping {
    device_address at = 0;
    address_range* range = nullptr;
    std::uint32_t live = 0;  ///< live blocks touching the handle through this mapping
  };

  struct handle_record {
    physical_handle handle = 0;
    std::size_t size = 0;
    device_address at = 0;          ///< where it is mapped; 0 when not mapped
    address_range* range = nullptr; ///< the range it is mapped in
    // What aliasing needs: the further mappings, live blocks through each (the first mapping's
    // in live_first, all of them in live), and the latest stream to free a block on the handle
    // while it has aliases (a free not known complete there keeps its other mappings out of use
    // on other streams).
    std::vector<alias_mapping> aliases;
    std::uint32_t live = 0;
    std::uint32_t live_first = 0;
    std::uint32_t freed_slot = 0;
    std::uint64_t freed_sequence = 0;
    // The handle's first export (pool::export_allocation), kept open while the handle lives:
    // the driver's export is slow beside a copy of the descriptor (docs/RESULTS.md, "Memory
    // shared between processes").
    int export_fd = -1;
    // That export's id, which importers see (page_table::export_handle): the same for every
    // export while the handle lives, never another handle's in this process, so that an
    // importer already mapping the handle can reuse its mapping.
    std::uint64_t export_id = 0;
    // Exports another process may still map (pool::export_allocation counts one up, and
    // pool::end_export down): while any, sleep() leaves the handle awake, since its memory is that
    // process's too (released, it would live on there, and the two would part at wake).
    std::uint32_t exports_in_use = 0;
  };

  page_table(driver_calls& calls, std::size_t granularity) : calls_(calls), granularity_(granularity) {}

  /// Creates a handle of `size` bytes (a granularity multiple), not yet mapped.
  driver_status create(std::size_t size, std::uint32_t& id);
  /// Maps handle `id` at `at` in `range` and grants access to the device and its peers.
  driver_status map(std::uint32_t id, address_range& range, device_address at);
  /// Unmaps handle `id` (the caller knows no queued work uses it); it must have no aliases.
  driver_status unmap(std::uint32_t id);
  /// A new descriptor through which another process can import handle `id` (the caller closes
  /// it): a copy of the one the handle's first export made, kept until the handle is released;
  /// `*export_id` names that export (handle_record::export_id).
  driver_status export_handle(std::uint32_t id, int* fd, std::uint64_t* export_id);
  /// Closes every kept export (a forked child's copies: open, each would pin its handle's memory
  /// until the child exits, whatever the parent releases); no export is in use after it.
  void close_exports() noexcept;
  /// Counts an export of handle `id` in use (`change` +1) or ended (-1; never below 0).
  void count_export_use(std::uint32_t id, int change) noexcept {
    std::uint32_t& n = handles_[id].exports_in_use;
    n = change > 0 ? n + 1 : (n > 0 ? n - 1 : 0);
  }

  // --- aliases (pool_options::alias_free_handles) ---
  /// Maps handle `id`, already mapped, a further time at `at` in `range`.
  driver_status map_alias(std::uint32_t id, address_range& range, device_address at);
  /// Unmaps the further mapping of `id` at `at` (no live block uses it).
  driver_status unmap_alias(std::uint32_t id, device_address at);
  /// Where the mapping of `id` that covers `address` starts.
  [[nodiscard]] device_address mapping_start(std::uint32_t id, device_address address) const noexcept;
  /// Live blocks of handle `id` through the mapping covering `address`.
  [[nodiscard]] std::uint32_t live_through(std::uint32_t id, device_address address) const noexcept;
  /// A live block touching handle `id` at `address` came (change +1) or went (-1); a block that
  /// went is noted with its stream slot and free number.
  void count_live(std::uint32_t id, device_address address, int change, std::uint32_t slot,
                  std::uint64_t sequence) noexcept;
  /// Handles that have at least one alias.
  [[nodiscard]] std::size_t aliased_handles() const noexcept { return aliased_; }
  /// Handle records (some of them free ids), for the arena's scans over every handle.
  [[nodiscard]] std::uint32_t handle_slots() const noexcept { return static_cast<std::uint32_t>(handles_.size()); }
  /// Releases an unmapped handle: its bytes go back to the driver. A handle whose mem_release
  /// fails is kept (still held, covering nothing) and tried again by retry_unreleased, so no
  /// caller can lose it, whichever path unmapped it.
  driver_status release(std::uint32_t id);
  /// Releases the unmapped handles `ids` (as release() does each); adds the bytes that went back
  /// to `released` and returns the first failure (the handles that failed stay kept).
  driver_status release_all(const std::vector<std::uint32_t>& ids, std::size_t& released);
  /// Tries again every handle whose release failed: release_all over them.
  driver_status retry_unreleased(std::size_t& released);

  // --- handles recycled from the out-of-memory path's hand-back into its growth (handle_recycling.cpp) ---
  /// From here until stop_recycling(), release_all() keeps the unmapped handles it is given instead
  /// of releasing them: they leave held_bytes() at once (and count as released to its caller), and
  /// create() of a kept handle's size takes one back with no driver call.
  void start_recycling() noexcept { recycling_ = true; }
  /// Releases every kept handle create() has not taken, and keeps no more. A failed release is
  /// kept on the unreleased list, as release() keeps it.
  void stop_recycling();
  /// Releases the kept handles that creating handles of `sizes`, in any order, would not take: the
  /// driver then has their room before the first create of a size none was kept of.
  void keep_recycled_for(std::vector<std::size_t> sizes);
  /// Bytes of the kept handles: the driver still counts them, held_bytes() does not.
  [[nodiscard]] std::size_t recycled_bytes() const noexcept { return recycled_bytes_; }
  [[nodiscard]] bool has_unreleased() const noexcept { return !unreleased_.empty(); }
  [[nodiscard]] std::size_t unreleased_bytes() const noexcept;

  /// The handle backing the granule at `page` of `range`, or no_handle.
  [[nodiscard]] std::uint32_t handle_at(const address_range& range, device_address page) const noexcept {
    return range.page_handle[(page - range.base) / granularity_];
  }
  [[nodiscard]] const handle_record& record(std::uint32_t id) const noexcept { return handles_[id]; }

  /// Grants `peer` access to every mapped handle, now and on every later map.
  driver_status add_peer(int peer);

  /// Fallback segments count as held too.
  void add_held(std::size_t bytes) noexcept;
  void remove_held(std::size_t bytes) noexcept { held_ -= bytes; released_ += bytes; }

  /// Size of the next handle to create when `bytes` (a granularity multiple) are still to map, in
  /// a region that may (`large_handles`) or may not use handles above the granularity, and that
  /// maps idle handles a second time (`aliasing`) or not: see the policy in page_table.cpp.
  [[nodiscard]] std::size_t handle_size_for(std::size_t bytes, bool large_handles, bool aliasing) const noexcept;
  /// The largest handle growth makes in a large region that aliases or not away from the device's
  /// filling (largest_new_handle() is 20 MiB there); what placement's keep-whole rules compare
  /// with. Only wake() makes larger ones (join_slept).
  [[nodiscard]] std::size_t largest_growth_handle(bool aliasing) const noexcept;
  /// The most the pool could hold on its device (the device's capacity, or a byte cap below it):
  /// no handle growth makes outside aliases is larger than a 256th of it (see the policy in
  /// page_table.cpp).
  void set_device_bytes(std::size_t bytes) noexcept;
  /// Whether the pool is at the device's limit: its out-of-memory path has run, and since then
  /// neither release() nor a growth that found the device with room again (growth.cpp) ended it.
  /// Ending the limit ends stranding() too.
  void set_at_limit(bool at_limit) noexcept {
    at_limit_ = at_limit;
    if (!at_limit) stranding_ = false;
  }
  [[nodiscard]] bool at_limit() const noexcept { return at_limit_; }
  /// Marks the pool at the limit as stranding memory: its out-of-memory path found free memory
  /// stranded in the rests of handles live blocks pin, or a request it could not serve
  /// (out_of_memory_path.cpp). From then until the limit ends, growth makes the limit's smaller
  /// handles and placement splits large ones (see the policy in page_table.cpp); before, the limit
  /// changes neither. Ignored away from the limit.
  void mark_stranding() noexcept { stranding_ = at_limit_; }
  [[nodiscard]] bool stranding() const noexcept { return stranding_; }
  /// Whether the pool is near the device's limit: a growth found that it would leave the device
  /// less room than a quarter of what the pool holds (growth.cpp), and nothing has ended it since
  /// (as at_limit()). There the last 256 MiB of each growth are in the limit's handles; placement
  /// does not change.
  void set_near_limit(bool near_limit) noexcept { near_limit_ = near_limit; }
  [[nodiscard]] bool near_limit() const noexcept { return near_limit_; }
  /// Whether the device is filling: a growth found that it would leave the device less room than
  /// six of the largest requests the pool has served (growth.cpp), and nothing has ended it since
  /// (as at_limit()). There growth's handles are 20 MiB, and placement splits a larger handle under
  /// a block smaller than a quarter of it (placement.cpp).
  void set_filling(bool filling) noexcept { filling_ = filling; }
  [[nodiscard]] bool filling() const noexcept { return filling_; }
  /// The largest handle the pool makes now, in growth (handle_size_for's cap but for the near
  /// limit's tail) and in placement's splits: largest_growth_handle(), but 20 MiB while the device
  /// fills (below the limit).
  [[nodiscard]] std::size_t largest_new_handle(bool aliasing) const noexcept;

  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  [[nodiscard]] std::size_t held_bytes() const noexcept { return held_; }
  [[nodiscard]] std::size_t peak_held_bytes() const noexcept { return peak_held_; }
  /// The peak held from now on starts at what is held now (pool::reset_peak_stats).
  void reset_peak_held() noexcept { peak_held_ = held_; }
  [[nodiscard]] std::size_t released_bytes() const noexcept { return released_; }
  [[nodiscard]] std::size_t live_handles() const noexcept { return handles_.size() - free_ids_.size(); }
  template <class F>
  void for_each_mapped(F&& f) const {
    for (const handle_record& h : handles_) {
      if (h.size != 0 && h.at != 0) f(h);
    }
  }

  // --- sleep and wake (pool::sleep, src/core/sleep_wake.cpp) ---
  // A slept handle keeps its record (size, address, range, the granules it backs) with its driver
  // handle 0 (no driver hands out 0), so every structure above the page table stays as it was and
  // wake_handle() makes it again in place. for_each_mapped still visits it: callers that show
  // what is mapped skip records whose handle is 0.

  /// Ids of every mapped handle (slept ones too), in id order.
  [[nodiscard]] std::vector<std::uint32_t> mapped_ids() const;
  /// Unmaps mapped handle `id` and releases its memory, keeping the record. The caller knows no
  /// queued work uses it. On failure nothing changed (or, when the release failed after the unmap,
  /// the handle is mapped again where it was; `remapped` false if even that failed).
  driver_status sleep_handle(std::uint32_t id, bool& remapped);
  /// Creates a handle of slept `id`'s size and maps it where it was (with the peers' access).
  /// On failure nothing changed.
  driver_status wake_handle(std::uint32_t id);
  /// Joins slept handle `next`, which begins where slept handle `first` ends in the same range,
  /// into `first`: wake_handle() then makes one handle of both sizes there. `next`'s id is free.
  void join_slept(std::uint32_t first, std::uint32_t next) noexcept;
  /// Whether handle `id` is asleep.
  [[nodiscard]] bool asleep(std::uint32_t id) const noexcept { return handles_[id].size != 0 && handles_[id].handle == 0; }
  /// Forgets slept handle `id` with no driver call (its memory went back when it slept): its
  /// granules back nothing any more and its id is free.
  void forget_slept(std::uint32_t id) noexcept;
  /// Replaces slept handle `id` by slept handles of the spans `runs` (address and size, inside
  /// it, granule multiples), which wake() makes instead; its other granules back nothing. Appends
  /// the new ids to `out`.
  void split_slept(std::uint32_t id, const std::vector<std::pair<device_address, std::size_t>>& runs,
                   std::vector<std::uint32_t>& out);

 private:
  driver_calls& calls_;
  std::size_t granularity_;
  std::vector<handle_record> handles_;
  std::vector<std::uint32_t> free_ids_;
  std::vector<int> peers_;
  // Handles already unmapped whose mem_release failed: no block covers them any more, so only this
  // list keeps them from leaking.
  std::vector<std::uint32_t> unreleased_;
  // Handles the out-of-memory path handed back while recycling: unmapped, not in held_, still the
  // driver's to release (handle_recycling.cpp).
  bool recycling_ = false;
  std::vector<std::uint32_t> recycled_;
  std::size_t recycled_bytes_ = 0;
  // Releases the kept handles `ids` (out of recycled_); one whose release fails stays on the
  // unreleased list.
  void release_recycled(std::vector<std::uint32_t> ids);
  // Takes a kept handle of `size` bytes into held_bytes(); false when none of that size is kept.
  bool take_recycled(std::size_t size, std::uint32_t& id) noexcept;
  // Maps handle `id` at `at` with the peers' access and names it in the range's granules; undoes
  // the map if access fails. map() and map_alias() record the mapping.
  driver_status map_at(std::uint32_t id, address_range& range, device_address at);
  // An empty record under a free id (one freed before, else a new one): create() and split_slept().
  std::uint32_t new_record();
  // Names handle `id` (or no_handle) as what backs the granules of [at, at + size) in `range`.
  void name_pages(address_range& range, device_address at, std::size_t size, std::uint32_t id) noexcept;

  bool at_limit_ = false;
  bool stranding_ = false;  // only while at_limit_
  bool near_limit_ = false;
  bool filling_ = false;
  std::size_t largest_handle_of_device_ = static_cast<std::size_t>(-1);  // set_device_bytes
  std::size_t aliased_ = 0;
  std::size_t held_ = 0;
  std::size_t peak_held_ = 0;
  std::size_t released_ = 0;
};

}  // namespace tidepool::detail
