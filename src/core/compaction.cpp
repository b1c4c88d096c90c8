// Compaction (pool::compact): handles that live blocks cover only in part are made again as
// handles under just the granules those blocks touch, so that the pool holds no more than that.
//
// release() hands back whole free handles only: a live block pins the rest of every handle it
// touches (up to 64 MiB, growth's largest, or a whole joined handle after wake()), which is what
// held after a release keeps above live memory (docs/RESULTS.md, section 0, "Held after release:
// what the layout pins and what the handles pin"). The driver maps a handle whole and cannot give
// back part of one, and the addresses of live blocks must stay, so the only way to hand back the
// rest is to move the live bytes: new handles for the runs of granules that something touches,
// the contents copied through pinned host memory (the driver table has no device-to-device copy),
// the old handle unmapped, the new ones mapped at the same addresses, the contents copied back,
// and only then the old handle released. Until that release the old handle still holds the bytes,
// so every failure before it puts the handle back as it was (remake_undo).
//
// What stays mapped in a kept run: every granule that a live block touches, and every granule
// of a block that is not free for every stream (a capture's private free blocks, frees another
// stream's work may still read): only free blocks of any stream are carved to unmapped room.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <unordered_set>

#include "core/arena.hpp"
#include "core/pool_impl.hpp"
#include "core/unlocked_call.hpp"
#include "core/units.hpp"

namespace tidepool::detail {

namespace {
constexpr std::uint64_t any_tick = std::numeric_limits<std::uint64_t>::max();  // release_free: freed at any time
}  // namespace

std::vector<arena::partly_live_handle> arena::partly_live_handles(const std::vector<std::uint32_t>& staying,
                                                                  bool asleep) const {
  std::vector<partly_live_handle> found;
  if (!guards_large_handles_) return found;  // granule handles: nothing to cut
  const std::size_t g = granularity_;
  for (const auto& r : ranges_) {
    if (r->segment) continue;
    // Granules that something other than a free block of any stream touches.
    std::vector<bool> touched(r->size / g, false);
    for (const block* b = r->first; b != nullptr; b = b->next) {
      if (b->state == block_state::free_unmapped) continue;
      if (b->state == block_state::free_mapped && b->owner == 0) continue;
      const std::size_t first = (round_down(b->address, g) - r->base) / g;
      const std::size_t last = (round_up(b->end(), g) - r->base) / g;
      for (std::size_t i = first; i < last; ++i) touched[i] = true;
    }
    for (std::size_t i = 0; i < touched.size();) {
      const std::uint32_t id = r->page_handle[i];
      if (id == page_table::no_handle) {
        ++i;
        continue;
      }
      const page_table::handle_record& h = pages_.record(id);
      const std::size_t granules = h.size / g;
      const bool eligible = h.size > g && h.at == r->base + i * g && (h.handle == 0) == asleep && h.aliases.empty() &&
                            std::find(staying.begin(), staying.end(), id) == staying.end();
      if (eligible) {
        partly_live_handle p{id, h.at, h.size, r.get(), {}, {}};
        for (std::size_t k = i; k < i + granules; ++k) {
          if (!touched[k]) continue;
          const device_address at = r->base + k * g;
          if (!p.kept.empty() && p.kept.back().to == at) {
            p.kept.back().to += g;
          } else {
            p.kept.push_back({at, at + g});
          }
        }
        const std::size_t kept = p.kept_bytes();
        if (kept != 0 && kept < h.size) found.push_back(std::move(p));
      }
      i += std::max<std::size_t>(granules, 1);
    }
  }
  return found;
}

driver_status arena::remake_begin(partly_live_handle& h, bool& restored) {
  restored = true;
  h.pieces.clear();
  auto drop_pieces = [&] {
    for (std::uint32_t id : h.pieces) (void)pages_.release(id);  // a failed release is kept and retried
    h.pieces.clear();
  };
  for (const partly_live_handle::granule_run& run : h.kept) {
    std::uint32_t id = 0;
    const driver_status status = pages_.create(run.to - run.from, id);
    if (status != driver_status::success) {
      drop_pieces();
      return status;
    }
    h.pieces.push_back(id);
  }
  driver_status status = pages_.unmap(h.id);
  if (status != driver_status::success) {
    drop_pieces();
    return status;
  }
  std::size_t mapped = 0;
  for (; mapped < h.pieces.size(); ++mapped) {
    status = pages_.map(h.pieces[mapped], *h.range, h.kept[mapped].from);
    if (status != driver_status::success) break;
  }
  if (status == driver_status::success) return status;
  // Back as it was: the pieces mapped so far unmapped, the old handle mapped again.
  for (std::size_t i = 0; i < mapped; ++i) (void)pages_.unmap(h.pieces[i]);
  restored = pages_.map(h.id, *h.range, h.at) == driver_status::success;
  drop_pieces();
  return status;
}

driver_status arena::remake_undo(partly_live_handle& h) {
  for (std::uint32_t id : h.pieces) {
    const driver_status status = pages_.unmap(id);
    if (status != driver_status::success) return status;
  }
  const driver_status status = pages_.map(h.id, *h.range, h.at);
  if (status != driver_status::success) return status;
  for (std::uint32_t id : h.pieces) (void)pages_.release(id);
  h.pieces.clear();
  return driver_status::success;
}

driver_status arena::remake_finish(const partly_live_handle& h) {
  // A failed release is kept by the page table (still held) and tried again by release().
  const driver_status released = pages_.release(h.id);
  carve_unkept(h);
  return released;
}

void arena::carve_unkept(const partly_live_handle& h) {
  auto carve = [&](device_address from, device_address to) {
    while (from < to) {
      // partly_live_handles() left out every granule that anything but a free block touches. A
      // free block there may since have joined a block freed on one stream while compact()'s
      // copies ran with the lock dropped: it stays that stream's, in that stream's index.
      block* b = find_containing(from);
      free_index& index = *slots_[b->owner];
      const device_address end = std::min(b->end(), to);
      index.remove(b);
      block* room = b;
      if (from > b->address) {
        room = cut(b, from - b->address);
        index.insert(b);
      }
      block* above = end < room->end() ? cut(room, end - room->address) : nullptr;
      coalesce_unmapped(room);
      if (above != nullptr) index.insert(above);
      from = end;
    }
  };
  device_address from = h.at;
  for (const partly_live_handle::granule_run& run : h.kept) {
    carve(from, run.from);
    from = run.to;
  }
  carve(from, h.at + h.size);
}

std::size_t pool_impl::compact() {
  std::lock_guard guard(lock_);
  if (asleep_) {
    throw error(error_code::asleep,
                fmt::format("tidepool: cannot compact device {}: its memory is asleep (wake() it first)", device_));
  }
  if (!virtual_memory_) {
    throw error(error_code::unavailable,
                fmt::format("tidepool: compact needs the virtual memory API, which device {} lacks", device_));
  }
  if (options_.alias_free_handles) {
    // An aliasing pool counts live blocks on each handle (aliases.cpp); new handles would start
    // without their counts, and aliasing could map one under a live block.
    throw error(error_code::unavailable,
                fmt::format("tidepool: compact does not support alias_free_handles (device {})", device_));
  }
  const compaction_scope scope(*this);
  // Nothing may still run on the blocks whose bytes move, nor on the free memory that goes.
  wait_for_streams_in_use();
  trim_floor_ = 0;
  forget_device_limit();
  std::size_t released = release_in_steps(std::numeric_limits<std::size_t>::max(), any_tick);
  remake_partly_live(std::numeric_limits<std::size_t>::max(), released);
  return released;
}

bool pool_impl::compact_for(std::size_t need, const stream_state& s) {
  if (!options_.compact_on_out_of_memory || !virtual_memory_ || options_.alias_free_handles || asleep_ ||
      s.capture != 0) {
    return false;
  }
  // Waiting for the streams would break a capture under way on another thread (a capture's work
  // cannot be waited for): the request fails as it would have without this step.
  bool capturing = false;
  streams_.for_each([&](stream_state& t) {
    if (t.capture != 0 && !t.retired && stream_captured(t.stream)) capturing = true;
  });
  if (capturing) return false;
  const std::size_t creatable = creatable_bytes(calls_.free_bytes());
  if (creatable >= need) return false;  // growth failed for want of something compaction cannot give
  const std::size_t whole_handles = whole_free_handle_bytes();
  const std::size_t lacks = need - creatable;
  if (whole_handles + compactable_bytes() < lacks) return false;
  const compaction_scope scope(*this);
  // The whole device, not just the streams the pool knows: a live block may be read on a stream
  // that never allocated or freed it.
  wait_for_device(true);
  // A remade handle's new handles exist beside the old one for a moment: with the device full they
  // have no room until the whole free handles (counted above, and handed back by the retry anyway)
  // go back, so those go first.
  std::size_t released = whole_handles != 0 ? release_free(std::min(whole_handles, lacks), any_tick) : 0;
  if (released < lacks) remake_partly_live(lacks - released, released);
  return released != 0;
}

pool_impl::compaction_scope::compaction_scope(pool_impl& pool) : p(pool) {
  // From here allocate() waits (wait_out_compaction), no thread's cache holds a block, and no
  // automatic release runs: the copies drop the lock while they are waited for.
  p.asleep_ = true;
  p.compacting_ = true;
  p.compacting_thread_ = this_thread_key();
  p.take_back_lent(true);
  p.automatic_release_awake_ = p.automatic_release_;
  p.automatic_release_ = false;
}

pool_impl::compaction_scope::~compaction_scope() {
  p.asleep_ = false;
  p.compacting_ = false;
  p.automatic_release_ = p.automatic_release_awake_;
  p.kept_.clear();
  p.host_copy_bytes_ = 0;
}

void pool_impl::wait_out_compaction(std::size_t bytes) {
  // compact() or another thread's out-of-memory path is moving memory with the lock dropped: the
  // request waits for it, as it would wait for the lock, and is then served from what it left.
  // The compacting thread itself (a driver hook or callback allocating inside the compaction)
  // would wait for ever: it is refused, with the reason.
  while (asleep_ && compacting_ && compacting_thread_ != this_thread_key()) {
    lock_.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock_.lock();
  }
  if (asleep_) throw_asleep(bytes);
}

std::size_t pool_impl::compactable_bytes() {
  const std::unordered_set<std::uint32_t> shared = handles_staying_awake();
  const std::vector<std::uint32_t> staying(shared.begin(), shared.end());
  std::size_t bytes = 0;
  for (const auto& a : arenas_) {
    for (const arena::partly_live_handle& h : a->partly_live_handles(staying)) bytes += h.size - h.kept_bytes();
  }
  return bytes;
}

void pool_impl::remake_partly_live(std::size_t enough, std::size_t& released) {
  const std::unordered_set<std::uint32_t> shared = handles_staying_awake();
  const std::vector<std::uint32_t> staying(shared.begin(), shared.end());
  struct candidate {
    arena* a;
    arena::partly_live_handle h;
  };
  std::vector<candidate> candidates;
  for (auto& a : arenas_) {
    for (arena::partly_live_handle& h : a->partly_live_handles(staying)) candidates.push_back({a.get(), std::move(h)});
  }
  // Most handed back first: where only `enough` is wanted (the out-of-memory path), those reach it
  // with the fewest moves. The new handles exist beside the old one for a moment, so a
  // handle with no room for them now is tried again once others have gone back.
  std::stable_sort(candidates.begin(), candidates.end(), [](const candidate& x, const candidate& y) {
    return x.h.size - x.h.kept_bytes() > y.h.size - y.h.kept_bytes();
  });
  const std::size_t released_before = released;
  bool progress = true;
  while (progress && released - released_before < enough) {
    progress = false;
    for (candidate& c : candidates) {
      if (c.a == nullptr || released - released_before >= enough) continue;
      if (remake_one(*c.a, c.h, released)) {
        c.a = nullptr;
        progress = true;
      }
    }
  }
}

bool pool_impl::remake_one(arena& a, arena::partly_live_handle& h, std::size_t& released) {
  auto fail = [&](const char* what, driver_status status) {
    throw error(error_code::driver_failure,
                fmt::format("tidepool: compact of device {}: {} failed ({}); that handle stays as it was, {} bytes "
                            "were handed back before it",
                            device_, what, to_string(status), released));
  };
  const std::size_t kept = h.kept_bytes();
  // The new handles exist beside the old one for a moment: not past the byte cap.
  if (byte_cap_ != std::numeric_limits<std::size_t>::max() && pages_.held_bytes() + kept > byte_cap_) return false;
  if (host_copy_capacity_ < kept) {
    drop_host_copy();
    if (const driver_status status = calls_.host_alloc(kept, &host_copy_); status != driver_status::success) {
      host_copy_ = nullptr;
      fail("pinning host memory for the contents", status);
    }
    host_copy_capacity_ = kept;
  }
  kept_.clear();
  std::size_t offset = 0;
  for (const arena::partly_live_handle::granule_run& run : h.kept) {
    kept_.push_back({run.from, run.to - run.from, offset});
    offset += run.to - run.from;
  }
  host_copy_bytes_ = kept;
  if (const driver_status status = copy_kept(true); status != driver_status::success) {
    fail("copying the contents to host memory", status);
  }
  bool restored = true;
  const driver_status begun = a.remake_begin(h, restored);
  if (!restored) {
    throw error(error_code::driver_failure,
                fmt::format("tidepool: compact of device {}: re-making the handle at {:#x} failed ({}) and so did "
                            "mapping it back; the live blocks there have no memory mapped under them",
                            device_, h.at, to_string(begun)));
  }
  if (begun == driver_status::out_of_memory) return false;  // no room for the new handles now: stays as it is
  if (begun != driver_status::success) fail("re-making a handle", begun);
  if (const driver_status status = copy_kept(false); status != driver_status::success) {
    // Copies queued before the failure may still be writing the new handles: the whole device
    // is waited for before they are unmapped. Where even that fails, unmapping them could race
    // those copies: they stay, the old handle goes, and the program hears that the bytes there
    // may be lost.
    const driver_status waited = call_unlocked(lock_, calls_, driver_call::device_synchronize, 0,
                                               [&](driver& d) { return d.device_synchronize(device_); });
    const driver_status undone = waited == driver_status::success ? a.remake_undo(h) : waited;
    if (undone != driver_status::success) {
      if (waited != driver_status::success) (void)a.remake_finish(h);
      throw error(error_code::driver_failure,
                  fmt::format("tidepool: compact of device {}: copying the contents back failed ({}) and so did "
                              "putting the old handle back ({}); the live blocks at {:#x} may have lost their "
                              "contents",
                              device_, to_string(status), to_string(undone), h.at));
    }
    fail("copying the contents back", status);
  }
  if (const driver_status status = a.remake_finish(h); status != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("tidepool: compact of device {}: releasing a re-made handle's old memory failed ({}); "
                            "its {} bytes stay held and the next release() tries again ({} bytes were handed "
                            "back before it)",
                            device_, to_string(status), h.size, released));
  }
  released += h.size - kept;
  return true;
}

}  // namespace tidepool::detail
