// Handles recycled on the out-of-memory path: the physical handles its hand-back unmaps are kept
// until the growth that follows has made its handles, and a growth handle of a kept handle's size
// is that handle mapped again, with no mem_create and no mem_release.
//
// At the device's limit a miss hands free handles back so that growth can create new ones
// elsewhere (out_of_memory_path.cpp), and both sides are mostly the limit's 8 MiB handles. Released
// and created again, each handle moved costs an unmap, a release, a create, a map and a set-access;
// kept, an unmap, a map and a set-access. Nothing else changes: the same handles leave the same
// addresses and growth maps the same sizes at the same addresses, so the layout, the peak and the
// failures are those of releasing; only the driver's work is less (docs/RESULTS.md, section 0,
// "Handles recycled at the device's limit").
//
// A kept handle is out of held_bytes() from the hand-back on, as a released one would be, and is
// still the driver's memory. So growth first releases the kept handles it will not take
// (keep_recycled_for: the driver has their room before any create that needs it, and the byte cap
// and the device see no more than releasing would have left), and stop_recycling() releases what
// is left once the growth is over, whatever its outcome. Only the out-of-memory path recycles:
// release() returns its bytes to the driver at once, as it says. A handle the pool has exported is
// never recycled: another process may map it, and would see the new allocation's bytes.
#include <algorithm>

#include "core/page_table.hpp"

namespace tidepool::detail {

bool page_table::take_recycled(std::size_t size, std::uint32_t& id) noexcept {
  const auto it = std::find_if(recycled_.begin(), recycled_.end(),
                               [&](std::uint32_t kept) { return handles_[kept].size == size; });
  if (it == recycled_.end()) return false;
  id = *it;
  recycled_.erase(it);
  recycled_bytes_ -= size;
  add_held(size);
  return true;
}

void page_table::release_recycled(std::vector<std::uint32_t> ids) {
  for (std::uint32_t id : ids) std::erase(recycled_, id);
  // All of them onto the unreleased list first (held until the driver takes them back), so that a
  // driver throwing from one release loses none of the others.
  for (std::uint32_t id : ids) {
    recycled_bytes_ -= handles_[id].size;
    held_ += handles_[id].size;
    unreleased_.push_back(id);
  }
  for (std::uint32_t id : ids) {
    if (release(id) == driver_status::success) std::erase(unreleased_, id);
  }
}

void page_table::keep_recycled_for(std::vector<std::size_t> sizes) {
  std::vector<std::uint32_t> unwanted;
  for (std::uint32_t id : recycled_) {
    const auto wanted = std::find(sizes.begin(), sizes.end(), handles_[id].size);
    if (wanted == sizes.end()) {
      unwanted.push_back(id);
    } else {
      sizes.erase(wanted);
    }
  }
  release_recycled(std::move(unwanted));
}

void page_table::stop_recycling() {
  recycling_ = false;
  release_recycled(recycled_);
}

}  // namespace tidepool::detail
