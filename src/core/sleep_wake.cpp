// Sleep and wake: a pool hands every physical handle back while its addresses and allocations
// stay, and later takes memory again under the same addresses (issue 13; RL trainers and
// inference servers that pass one GPU between two engines).
//
// Sleeping changes nothing above the page table: the block lists, free indices and live map stay
// as they are, and each mapped handle keeps its page-table record with its driver handle dropped
// (page_table::sleep_handle). Waking makes a handle of each slept record's size at its address, so
// the pool is exactly as it was, pointers and CUDA graphs captured over them included. Before
// sleeping, the cache goes back as release() would (whole free handles), so what sleeps is only
// what live blocks touch; the bytes returned are the sum, exact.
//
// A slept handle that live blocks touched only in part is trimmed to the runs of granules they
// touch (trim_slept_handles, as compaction.cpp re-makes awake ones): wake maps what the live blocks
// need, not the free rest a live block pinned, and the rest becomes unmapped room.
//
// Slept handles lying wholly inside one live block are joined (up to max_joined_handle_bytes), so
// wake makes one handle where growth made several: the driver's cost is per handle (DESIGN 2a),
// and growth keeps handles small only so that a block pins little of a handle other blocks share,
// which a handle under one block is not. Once that block is freed, the first smaller block placed
// there splits the handle back into growth's sizes, waiting for its stream's frees if it must
// (placement.cpp, growth.cpp): kept whole, a small block would pin all of it.
//
// Waiting: the driver does not wait before unmapping (docs/DESIGN.md, H200 point 3), so sleep
// waits for the work queued on every stream the pool's blocks were allocated, freed or recorded
// on, with an event recorded on each (cheaper than a device-wide wait, which would also wait for
// the other engine's work). A stream that cannot be named (forgotten, another thread's per-thread
// stream, an event the driver refuses: destroyed) and pending record_stream frees make it wait for
// the whole device instead. Work on a stream the pool never saw (a kernel reading a tensor on a
// stream that did not allocate it, without record_stream) is the program's to finish first, as for
// any free.
//
// Memory exported to another process and not yet ended (pool::export_allocation, end_export)
// stays awake, with every live block on its handles: the other process maps it, so released here
// it would stay held there, and after wake the two would see different memory.
//
// The copy of the contents: one pinned host buffer for every live block's requested bytes, filled
// by asynchronous copies on a stream of the pool's own and waited for once, before any unmap.
// Touching a sleeping pool's memory from the GPU faults (an illegal address on CUDA, which ends
// the context); sim counts it (sim_driver::unmapped_access_count).
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/pool_impl.hpp"
#include "core/unlocked_call.hpp"

namespace tidepool::detail {

namespace {

constexpr std::size_t everything = std::numeric_limits<std::size_t>::max();
// The largest handle whose driver costs DESIGN 2a measured; per byte, a handle that large costs the
// driver no more than growth's do.
constexpr std::size_t max_joined_handle_bytes = std::size_t{2} << 30;
constexpr std::uint64_t any_tick = std::numeric_limits<std::uint64_t>::max();

// Out of memory in wake(): the report's figures, and a message that says the pool is still asleep.
class wake_out_of_memory final : public out_of_memory {
 public:
  explicit wake_out_of_memory(const out_of_memory_report& report)
      : out_of_memory(report),
        message_(fmt::format("tidepool: wake of device {} needs {} bytes the device cannot give; the memory stays "
                             "asleep with its contents and wake() may be tried again ({})",
                             report.device, report.requested_bytes, out_of_memory::what())) {}
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

[[noreturn]] void throw_driver(int device, const char* what, driver_status status) {
  throw error(error_code::driver_failure,
              fmt::format("tidepool: {} failed on device {}: {}", what, device, to_string(status)));
}

}  // namespace

void pool_impl::throw_asleep(std::size_t bytes) const {
  if (compacting_) {
    throw error(error_code::asleep,
                fmt::format("tidepool: cannot allocate {} bytes on device {}: this thread is compacting the pool "
                            "(allocate once compact() returns)",
                            bytes, device_));
  }
  throw error(error_code::asleep,
              fmt::format("tidepool: cannot allocate {} bytes on device {}: this memory is asleep (wake() it first)",
                          bytes, device_));
}

bool pool_impl::asleep() {
  std::lock_guard guard(lock_);
  return asleep_ && !compacting_;
}

void pool_impl::wait_for_streams_in_use() {
  flush_parked();
  // Streams whose queued work may use the pool's memory: those with live blocks, frees not known
  // done, or events in flight, and those record_stream named.
  std::vector<stream_state*> streams;
  bool whole_device = !pending_.empty();
  const std::uint64_t me = this_thread_key();
  auto add = [&](stream_state* s) {
    if (std::find(streams.begin(), streams.end(), s) != streams.end()) return;
    // A capture's memory is used by its graph's launches, on whatever stream they go.
    if (s->retired || (s->thread != 0 && s->thread != me) || s->capture != 0) whole_device = true;
    streams.push_back(s);
  };
  streams_.for_each([&](stream_state& s) {
    if (s.live != 0 || s.in_flight != 0 || s.last_free > s.completed) add(&s);
  });
  for (auto& [b, extra] : extra_streams_) {
    for (stream_state* s : extra) add(s);
  }
  if (whole_device || streams.empty()) {
    if (!streams.empty()) wait_for_device(true);
    return;
  }
  // One event per stream, recorded now, each waited for with the lock dropped. allocate() refuses
  // meanwhile (asleep_), so no stream is added; a free on another thread may add frees after the
  // fence, which stay with their stream and keep their handles mapped until the next release.
  struct fence {
    stream_state* s;
    event_t e;
    std::uint64_t freed_up_to;
  };
  std::vector<fence> fences;
  // The streams keep their slots while the lock is dropped (another thread's slow path recycles
  // idle ones).
  for (stream_state* s : streams) ++s->holds;
  struct unhold {
    std::vector<stream_state*>& streams;
    ~unhold() {
      for (stream_state* s : streams) --s->holds;
    }
  } release_holds{streams};
  bool refused = false;
  try {
    for (stream_state* s : streams) {
      const event_t e = events_.acquire();
      if (calls_.event_record(e, s->stream) != driver_status::success) {
        events_.give_back(e);
        refused = true;  // a stream the driver does not know (destroyed): only the device can be waited for
        break;
      }
      fences.push_back({s, e, s->last_free});
    }
  } catch (...) {
    for (const fence& f : fences) events_.give_back(f.e);
    throw;
  }
  driver_status status = driver_status::success;
  for (const fence& f : fences) {
    if (status == driver_status::success) {
      status = call_unlocked(lock_, calls_, driver_call::event_synchronize, 0,
                             [&](driver& d) { return d.event_synchronize(device_, f.e); });
    }
    events_.give_back(f.e);
  }
  if (status != driver_status::success) {
    throw_driver(device_, compacting_ ? "waiting for an event before compact" : "waiting for an event before sleep",
                 status);
  }
  if (refused) {
    wait_for_device(true);
    return;
  }
  flush_parked();
  for (const fence& f : fences) {
    stream_state& s = *f.s;
    s.completed = std::max(s.completed, f.freed_up_to);
    for (auto& a : arenas_) a->make_global(s.slot, f.freed_up_to);
  }
  settle_frees(false);  // gives back the events the fences overtook, and recycles idle slots
}

driver_status pool_impl::copy_kept(bool to_host) {
  stream_t stream = nullptr;
  driver_status status = calls_.stream_create(&stream);
  if (status != driver_status::success) return status;
  auto* host = static_cast<std::byte*>(host_copy_);
  for (const kept_block& k : kept_) {
    status = to_host ? calls_.copy_to_host(host + k.offset, k.address, k.bytes, stream)
                     : calls_.copy_to_device(k.address, host + k.offset, k.bytes, stream);
    if (status != driver_status::success) break;
  }
  // Waited for even after a failed copy: the ones queued before it must end before any unmap.
  const driver_status waited = call_unlocked(lock_, calls_, driver_call::stream_synchronize, 0,
                                             [&](driver& d) { return d.stream_synchronize(device_, stream); });
  (void)calls_.stream_destroy(stream);
  return status != driver_status::success ? status : waited;
}

std::size_t pool_impl::sleep(sleep_keep keep) {
  std::lock_guard guard(lock_);
  if (compacting_) {
    throw error(error_code::asleep,
                fmt::format("tidepool: cannot sleep device {}: compact() is moving its memory on another thread",
                            device_));
  }
  if (asleep_) {
    throw error(error_code::asleep, fmt::format("tidepool: the memory of device {} is asleep already", device_));
  }
  if (!virtual_memory_) {
    throw error(error_code::unavailable,
                fmt::format("tidepool: sleep needs the virtual memory API, which device {} lacks", device_));
  }
  asleep_ = true;  // from here allocate() refuses
  take_back_lent(true);  // and no thread's cache holds a block: live ones are copied below
  automatic_release_awake_ = automatic_release_;
  automatic_release_ = false;
  auto stay_awake = [&] {
    asleep_ = false;
    automatic_release_ = automatic_release_awake_;
  };
  std::size_t released = 0;
  try {
    wait_for_streams_in_use();
    // The cache goes back as in release(): what sleeps below is what live blocks touch.
    trim_floor_ = 0;
    released = release_in_steps(everything, any_tick);  // unmaps idle handles' further mappings too
  } catch (...) {
    stay_awake();
    throw;
  }
  // A handle still mapped at more than one address (alias_free_handles) has a live block through
  // one of them: sleep does not save and restore such handles. The cache has gone back, as release()
  // would; the pool stays awake.
  if (pages_.aliased_handles() != 0) {
    stay_awake();
    throw error(error_code::unavailable,
                fmt::format("tidepool: device {} has live blocks on {} handle(s) mapped at more than one address "
                            "(alias_free_handles), which sleep does not support; the cache went back ({} bytes) "
                            "and the pool stays awake",
                            device_, pages_.aliased_handles(), released));
  }
  const std::unordered_set<std::uint32_t> shared = handles_staying_awake();
  auto stays_awake = [&](const block& b) {
    if (shared.empty() || b.range->segment) return false;
    bool found = false;
    for_each_handle_of(b, b.size, [&](std::uint32_t id, device_address) { found = found || shared.contains(id); });
    return found;
  };
  // The contents: every live block's requested bytes, in one pinned buffer.
  kept_.clear();
  if (keep == sleep_keep::contents) {
    // Live blocks next to each other are copied as one (many small tensors, few copies); a block
    // is copied whole as placed, which is mapped, padding included.
    std::size_t total = 0;
    for (const auto& a : arenas_) {
      a->for_each_block([&](const block& b) {
        if (b.state != block_state::live || stays_awake(b)) return;
        if (!kept_.empty() && kept_.back().address + kept_.back().bytes == b.address) {
          kept_.back().bytes += b.size;
        } else {
          kept_.push_back({b.address, b.size, total});
        }
        total += b.size;
      });
    }
    if (total != 0) {
      // The pinned buffer outlives the wake for the next sleep: pinning host memory costs many times
      // what the copy does (docs/RESULTS.md, section 10), and a trainer sleeps the same tag often.
      if (host_copy_ != nullptr && host_copy_capacity_ < total) drop_host_copy();
      if (host_copy_ == nullptr) {
        const driver_status status = calls_.host_alloc(total, &host_copy_);
        if (status != driver_status::success) {
          kept_.clear();
          host_copy_ = nullptr;
          stay_awake();
          throw error(error_code::driver_failure,
                      fmt::format("tidepool: sleep of device {} could not pin {} bytes of host memory for the "
                                  "contents ({}); nothing slept",
                                  device_, total, to_string(status)));
        }
        host_copy_capacity_ = total;
      }
      host_copy_bytes_ = total;
      if (const driver_status copied = copy_kept(true); copied != driver_status::success) {
        host_copy_bytes_ = 0;
        kept_.clear();
        stay_awake();
        throw_driver(device_, "copying the contents to host memory (nothing slept)", copied);
      }
    }
  }
  // Every mapped handle goes but the shared ones; the records stay for wake().
  sleep_ids_.clear();
  for (std::uint32_t id : pages_.mapped_ids()) {
    if (shared.contains(id)) continue;
    bool remapped = true;
    const std::size_t size = pages_.record(id).size;
    const driver_status status = pages_.sleep_handle(id, remapped);
    if (status == driver_status::success) {
      sleep_ids_.push_back(id);
      asleep_bytes_ += size;
      released += size;
      continue;
    }
    // Put back what slept, so the pool is awake as before (contents from the copy, if kept).
    const std::size_t slept = sleep_ids_.size();
    bool restored = remapped;
    std::size_t woken = 0;
    while (restored && woken < slept && pages_.wake_handle(sleep_ids_[woken]) == driver_status::success) ++woken;
    restored = restored && woken == slept && copy_kept(false) == driver_status::success;
    if (restored) {
      sleep_ids_.clear();
      asleep_bytes_ = 0;
      host_copy_bytes_ = 0;
      kept_.clear();
      stay_awake();
      throw_driver(device_, "sleep (unmapping a handle; the memory stays awake)", status);
    }
    // Could not put it back: asleep for what slept, which wake() restores.
    (void)undo_wake(woken);
    throw_driver(device_, "sleep (unmapping a handle; the memory is asleep in part: wake() restores it)", status);
  }
  trim_slept_handles(shared);
  join_slept_handles();
  return released;
}

std::unordered_set<std::uint32_t> pool_impl::handles_staying_awake() {
  std::unordered_set<std::uint32_t> shared;
  for (std::uint32_t id : pages_.mapped_ids()) {
    if (pages_.record(id).exports_in_use != 0) shared.insert(id);
  }
  // A live block on a shared handle keeps every handle under it awake, and so on through blocks
  // sharing those: each live block then lies wholly awake or wholly asleep.
  for (bool grew = !shared.empty(); grew;) {
    grew = false;
    for (const auto& a : arenas_) {
      a->for_each_block([&](const block& b) {
        if (b.state != block_state::live || b.range->segment) return;
        std::vector<std::uint32_t> ids;
        for_each_handle_of(b, b.size, [&](std::uint32_t id, device_address) { ids.push_back(id); });
        if (std::none_of(ids.begin(), ids.end(), [&](std::uint32_t id) { return shared.contains(id); })) return;
        for (std::uint32_t id : ids) grew = shared.insert(id).second || grew;
      });
    }
  }
  return shared;
}

void pool_impl::trim_slept_handles(const std::unordered_set<std::uint32_t>& shared) {
  const std::vector<std::uint32_t> staying(shared.begin(), shared.end());
  for (const auto& a : arenas_) {
    // An aliasing arena counts live blocks on each handle record, which new records would lack.
    if (a->settings().aliases) continue;
    for (const arena::partly_live_handle& h : a->partly_live_handles(staying, true)) {
      std::vector<std::pair<device_address, std::size_t>> runs;
      for (const arena::partly_live_handle::granule_run& run : h.kept) runs.emplace_back(run.from, run.to - run.from);
      std::erase(sleep_ids_, h.id);  // before the split, whose first piece may take the id again
      pages_.split_slept(h.id, runs, sleep_ids_);
      asleep_bytes_ -= h.size - h.kept_bytes();
      a->carve_unkept(h);
    }
  }
}

void pool_impl::join_slept_handles() {
  const std::size_t g = pages_.granularity();
  bool joined = false;
  for (const auto& a : arenas_) {
    // Not where handles are mapped twice: an alias spans whole handles (aliases.cpp).
    if (!a->guards_large_handles() || a->settings().aliases) continue;
    a->for_each_block([&](const block& b) {
      if (b.state != block_state::live || b.range == nullptr || b.range->segment) return;
      std::uint32_t run = page_table::no_handle;
      for (device_address page = round_up(b.address, g); page + g <= b.end();) {
        const std::uint32_t id = pages_.handle_at(*b.range, page);
        if (id == page_table::no_handle) {
          run = page_table::no_handle;
          page += g;
          continue;
        }
        const page_table::handle_record& h = pages_.record(id);
        const device_address next = h.at + h.size;
        if (h.at < b.address || next > b.end() || !pages_.asleep(id)) {
          run = page_table::no_handle;
        } else if (run != page_table::no_handle && pages_.record(run).size + h.size <= max_joined_handle_bytes) {
          pages_.join_slept(run, id);
          joined = true;
        } else {
          run = id;
        }
        page = next;
      }
    });
  }
  if (joined) std::erase_if(sleep_ids_, [&](std::uint32_t id) { return !pages_.asleep(id); });
}

bool pool_impl::undo_wake(std::size_t count) {
  bool all = true;
  for (std::size_t i = 0; i < count; ++i) {
    bool remapped = true;
    if (pages_.sleep_handle(sleep_ids_[i], remapped) != driver_status::success) all = false;
  }
  return all;
}

void pool_impl::wake() {
  std::lock_guard guard(lock_);
  if (!asleep_ || compacting_) {  // compact() sets asleep_ while it runs: not asleep all the same
    throw error(error_code::asleep, fmt::format("tidepool: the memory of device {} is not asleep{}", device_,
                                                compacting_ ? " (compact() runs on another thread)" : ""));
  }
  // The byte cap holds while waking too.
  if (pages_.held_bytes() + asleep_bytes_ > byte_cap_) {
    out_of_memory_report report;
    report.device = device_;
    report.requested_bytes = asleep_bytes_;
    report.in_use_bytes = in_use_;
    report.byte_cap = byte_cap_;
    report.largest_possible_bytes = byte_cap_ - std::min(byte_cap_, pages_.held_bytes());
    throw wake_out_of_memory(report);
  }
  std::size_t woken = 0;
  driver_status status = driver_status::success;
  for (; woken < sleep_ids_.size(); ++woken) {
    status = pages_.wake_handle(sleep_ids_[woken]);
    if (status != driver_status::success) break;
  }
  if (status == driver_status::success && host_copy_bytes_ != 0) status = copy_kept(false);
  if (status != driver_status::success) {
    // Back to sleep, all of it: the copy still holds the contents.
    const bool undone = undo_wake(woken);
    if (status == driver_status::out_of_memory && undone) {
      out_of_memory_report report;
      report.device = device_;
      report.requested_bytes = asleep_bytes_;
      report.in_use_bytes = in_use_;
      report.driver_free_bytes = calls_.free_bytes();
      report.byte_cap = byte_cap_;
      report.largest_possible_bytes = std::min(report.driver_free_bytes, byte_cap_);
      throw wake_out_of_memory(report);
    }
    throw error(error_code::driver_failure,
                fmt::format("tidepool: wake of device {} failed: {}; the memory stays asleep{}", device_,
                            to_string(status), undone ? "" : " (some handles could not be put back to sleep)"));
  }
  host_copy_bytes_ = 0;  // the buffer stays for the next sleep
  kept_.clear();
  sleep_ids_.clear();
  asleep_bytes_ = 0;
  asleep_ = false;
  automatic_release_ = automatic_release_awake_;
}

void pool_impl::drop_host_copy() noexcept {
  if (host_copy_ != nullptr) (void)calls_.host_free(host_copy_, host_copy_capacity_);
  host_copy_ = nullptr;
  host_copy_capacity_ = 0;
  host_copy_bytes_ = 0;
}

void pool_impl::forget_sleep() noexcept {
  for (std::uint32_t id : sleep_ids_) {
    if (pages_.asleep(id)) pages_.forget_slept(id);
  }
  sleep_ids_.clear();
  asleep_bytes_ = 0;
  drop_host_copy();
  kept_.clear();
  asleep_ = false;
}

}  // namespace tidepool::detail
