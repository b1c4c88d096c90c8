// Pages: creating, mapping, unmapping and releasing physical handles, and the handle size policy.
//
// Handle size (DESIGN 2a: the driver's cost is per handle, not per byte; an 8 MiB handle costs
// about what a 2 MiB one does). Small and medium regions always use the granularity: their pages
// must go back one by one, and a handle that a live block pins only in part strands the rest. The
// huge region (requests above 16 granules, 32 MiB, where only huge blocks live) maps handles that
// grow with the request: the largest power-of-two multiple of the granularity that is at most
// 1/large_handle_divisor of the request, capped at max_large_handle_granules (64 MiB).
//
// Measured with `tidepool replay traces/*.csv.gz` (sim, H200 costs; gpt2 / loader / resnet50;
// huge from 32 MiB on, before the threshold moved above 32 MiB):
//   divisor/cap   peak held/live        after release (goal: live in 2 MiB + 2%)   driver ms (exact: 506/575/267)
//   2 MiB only    1.004/1.025/1.006     68/5720/70 MiB                            730/3350/140
//   16 / 2 (4M)   1.007/1.007/1.008     74/5630/70                                478/951/153
//   16 / 4 (8M)   1.008/1.012/1.009     78/5710/70                                369/503/146   <- chosen
//   16 / 32 (64M) 1.012/1.019/1.009     102/5820/70                               299/296/146
// Larger handles cut driver time but strand more behind huge blocks still live at release
// (a handle goes back whole or not at all); 8 MiB is the largest cap that keeps driver time under
// the `exact` baseline on every trace with peak held/live at most 1.012. With 32 MiB requests
// kept in the medium region (2 MiB handles), the chosen row became 1.006/1.012/1.011,
// 72/5710/66 MiB, 375/504/143 ms.
// Since then no block cuts a handle larger than a granule (placement.cpp), so a large handle no
// longer strands memory at release and larger ones cost only cut repairs. With extension
// (placement.cpp), driver ms gpt2/loader/resnet50 (exact: 506/575/267) and peak held/live:
//   16 / 4 (8M)     346/655/159   1.011/1.005/1.015
//    8 / 16 (32M)   253/600/143   1.010/1.005/1.021
//    8 / 32 (64M)   255/586/143   1.010/1.005/1.021
//    4 / 16 (32M)   227/582/125   1.011/1.009/1.014
//    4 / 32 (64M)   224/573/125   1.013/1.008/1.014   <- chosen: the loader under exact's
//    4 / 64 (128M)  219/587/125   1.023/1.006/1.014
#include "core/page_table.hpp"

#include <algorithm>

#include "core/units.hpp"

namespace tidepool::detail {
namespace {
constexpr std::size_t max_large_handle_granules = 32;
}  // namespace

void page_table::add_held(std::size_t bytes) noexcept {
  held_ += bytes;
  peak_held_ = std::max(peak_held_, held_);
}

driver_status page_table::create(std::size_t size, std::uint32_t& id) {
  physical_handle handle = 0;
  const driver_status status = calls_.mem_create(size, &handle);
  if (status != driver_status::success) return status;
  if (free_ids_.empty()) {
    id = static_cast<std::uint32_t>(handles_.size());
    handles_.emplace_back();
  } else {
    id = free_ids_.back();
    free_ids_.pop_back();
  }
  handles_[id] = handle_record{handle, size, 0, nullptr};
  add_held(size);
  return driver_status::success;
}

driver_status page_table::map(std::uint32_t id, address_range& range, device_address at) {
  handle_record& h = handles_[id];
  driver_status status = calls_.mem_map(at, h.size, h.handle);
  if (status != driver_status::success) return status;
  for (int peer : peers_) {
    status = calls_.mem_set_access(at, h.size, peer);
    if (status != driver_status::success) {
      (void)calls_.mem_unmap(at, h.size);
      return status;
    }
  }
  h.at = at;
  h.range = &range;
  const std::size_t first = (at - range.base) / granularity_;
  std::fill_n(range.page_handle.begin() + static_cast<std::ptrdiff_t>(first), h.size / granularity_, id);
  return driver_status::success;
}

driver_status page_table::unmap(std::uint32_t id) {
  handle_record& h = handles_[id];
  const driver_status status = calls_.mem_unmap(h.at, h.size);
  if (status != driver_status::success) return status;
  const std::size_t first = (h.at - h.range->base) / granularity_;
  std::fill_n(h.range->page_handle.begin() + static_cast<std::ptrdiff_t>(first), h.size / granularity_, no_handle);
  h.at = 0;
  h.range = nullptr;
  return driver_status::success;
}

driver_status page_table::release(std::uint32_t id) {
  handle_record& h = handles_[id];
  const driver_status status = calls_.mem_release(h.handle, h.size);
  if (status != driver_status::success) return status;
  remove_held(h.size);
  h = handle_record{};
  free_ids_.push_back(id);
  return driver_status::success;
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

std::size_t page_table::handle_size_for(std::size_t bytes, bool large_handles) const noexcept {
  if (!large_handles) return granularity_;
  return std::min(bytes, max_large_handle_granules * granularity_);
}

}  // namespace tidepool::detail
