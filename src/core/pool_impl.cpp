// pool_impl: construction and tear-down, streams (adding, forgetting, record_stream), the queries
// and figures, and the errors for bad input (each names the value and leaves the pool as it was).
#include "core/pool_impl.hpp"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "core/fork_safety.hpp"

namespace tidepool::detail {

namespace {
constexpr std::size_t no_limit = std::numeric_limits<std::size_t>::max();

driver& checked(const std::shared_ptr<driver>& drv) {
  if (!drv) throw error(error_code::invalid_argument, "tidepool: pool created without a driver");
  return *drv;
}

// Checks the device ordinal, opens its context if this process holds none, and returns its
// granularity: the first things a pool needs, before any member that depends on them.
std::size_t open_device(const std::shared_ptr<driver>& drv, int device) {
  driver& d = checked(drv);
  if (device < 0 || device >= d.device_count()) {
    throw error(error_code::invalid_device,
                fmt::format("tidepool: device {} out of range ({} devices)", device, d.device_count()));
  }
  if (!d.has_context(device)) {
    const driver_status status = d.open_context(device);
    if (status != driver_status::success) {
      throw error(error_code::driver_failure,
                  fmt::format("tidepool: cannot open a context on device {}: {}", device, to_string(status)));
    }
  }
  const std::size_t granularity = d.granularity(device);
  if (granularity == 0 || granularity % block_alignment != 0) {
    throw error(error_code::driver_failure,
                fmt::format("tidepool: device {} reports granularity {}", device, granularity));
  }
  return granularity;
}

// The size of each address range an arena reserves when pool_options::address_range_bytes is 0.
// Blocks keep their addresses, so a layout near the device's capacity keeps holes (handles handed
// back) at addresses it still uses, and needs address space beyond the bytes it maps: in ranges of
// the device's size the large scratch arena ran out of addresses before memory, reserved new ranges
// and moved handles between them in every step. At four times the device it no longer ran out
// first on the loops measured (docs/RESULTS.md, section 0, "Address ranges near the device's
// capacity"). The other arenas keep the device's size: their requests are small or long-lived, and
// address space is the process's, shared by every stream, arena and device.
std::size_t default_range_bytes(arena_kind kind, std::size_t device_total, std::size_t granularity) {
  const std::size_t device = round_up(device_total, granularity);
  return kind == arena_kind::large_scratch ? 4 * device : device;
}
}  // namespace

pool_impl::pool_impl(std::shared_ptr<driver> drv, int device, pool_options options)
    : driver_(std::move(drv)),
      device_(device),
      options_(options),
      calls_(checked(driver_), device),
      pages_(calls_, open_device(driver_, device)),
      events_(calls_) {
  for (const auto& [name, slack] : {std::pair{"growth_slack", options_.growth_slack},
                                     std::pair{"alias_slack", options_.alias_slack}}) {
    if (!(slack >= 0.0) || slack > 1e6) {  // also refuses NaN
      throw error(error_code::invalid_argument, fmt::format("tidepool: {} {} is not a number from 0 up", name, slack));
    }
  }
  driver& d = *driver_;
  const std::size_t granularity = pages_.granularity();
  virtual_memory_ = d.supports_virtual_memory(device);
  device_total_ = calls_.memory_info().total;
  pages_.set_device_bytes(std::min(device_total_, byte_cap_));
  for (unsigned k = 0; k < arenas_.size(); ++k) {
    arena_settings settings;
    settings.kind = static_cast<arena_kind>(k);
    settings.virtual_memory = virtual_memory_;
    settings.large_handles = k >= 2;
    settings.range_bytes = options_.address_range_bytes != 0 ? options_.address_range_bytes
                                                             : default_range_bytes(settings.kind, device_total_, granularity);
    settings.aliases = options_.alias_free_handles && virtual_memory_ && k >= 2;
    arenas_[k] = std::make_unique<arena>(settings, pages_, calls_, slab_);
    arenas_[k]->set_pool_queries(this, &pool_impl::frees_done, &pool_impl::growth_would_steal);
  }
  const release_policy& policy = options_.release;
  automatic_release_ = policy.immediate || policy.max_cached_bytes != no_limit || policy.decay.count() > 0;
  link_->pool.store(this, std::memory_order_release);  // threads' caches reach the pool through it
  caching_threads_ = options_.thread_caches == thread_cache_policy::always;
  note_pool_made(*this);  // last: a constructor that threw leaves nothing to unregister
}

bool pool_impl::frees_done(void* self, std::uint32_t slot, std::uint64_t sequence) {
  auto& pool = *static_cast<pool_impl*>(self);
  // A recycled slot held no free in flight when it was recycled (aliases.cpp asks about the
  // latest free on a handle, whose stream may have gone since).
  if (!pool.streams_.holds(slot)) return true;
  const stream_state& s = pool.streams_.at(slot);
  if (sequence <= s.completed) return true;
  for (std::uint32_t i = 0; i < s.in_flight; ++i) {
    if (s.events[i].watermark >= sequence) return pool.calls_.event_query(s.events[i].event) == driver_status::success;
  }
  return false;  // no event covers them yet
}

bool pool_impl::growth_would_steal(void* self, std::size_t bytes) {
  return static_cast<const pool_impl*>(self)->beyond_growth_budget(bytes);
}

pool_impl::~pool_impl() {
  note_pool_gone(*this);  // before taking the lock, which fork()'s handlers may hold
  {
    // Threads ending from here on leave their caches alone (the blocks go with the arenas).
    std::lock_guard link_guard(link_->mutex);
    link_->pool.store(nullptr, std::memory_order_release);
  }
  std::lock_guard guard(lock_);
  try {
    // Nothing is unmapped under queued work; no event goes on a user stream (it may be gone).
    wait_for_device(false);
  } catch (const error&) {
    // The device could not be waited for; unmapping below is still the only way to give the
    // memory back, so go on.
  }
  forget_sleep();  // slept handles hold nothing: the tear-down must not unmap or release them
  let_go_of_graphs();
  for (auto& a : arenas_) a->tear_down();
  std::size_t last_try = 0;
  (void)pages_.retry_unreleased(last_try);  // a last try for every failed release; nothing else holds them
  events_.destroy_all();
}

stream_state& pool_impl::add_stream(stream_t stream) {
  // A stream being captured cannot be asked its device (graph_capture.cpp): taken on trust.
  if (!stream_captured(stream) && !driver_->stream_on_device(stream, device_)) {
    throw error(error_code::invalid_stream,
                fmt::format("tidepool: stream {} does not belong to device {}", fmt::ptr(stream), device_));
  }
  stream_state& s = streams_.add(stream);
  for (auto& a : arenas_) a->ensure_slots(streams_.slot_count());
  return s;
}

stream_state& pool_impl::stream_for_free(const block& b, stream_t stream, stream_state* found) {
  stream_state& allocated_on = streams_.at(b.owner);
  // Allocated in a graph capture: the graph's while it may launch, whatever stream frees it; once
  // it is gone, an ordinary free on the stream named.
  if (allocated_on.capture != 0) {
    if (kept_for_graph(allocated_on)) return allocated_on;
    return found != nullptr ? *found : add_stream(stream);
  }
  // The handle was forgotten (its stream destroyed, then a garbage collector freeing what was
  // allocated there): the free stays with that stream, and no driver call names the handle.
  if (allocated_on.retired && stream_registry::names(allocated_on, stream)) return allocated_on;
  // Allocated on another thread's per-thread stream, freed on "the per-thread stream" here (a
  // front end passing the allocation's stream, or a garbage collector on another thread): the
  // work that used it may be on the first thread's stream, which this thread cannot name, so the
  // free stays with that stream (record_event names no other thread's stream).
  if (allocated_on.thread != 0 && reinterpret_cast<std::uintptr_t>(stream) == per_thread_stream_handle) {
    return allocated_on;
  }
  if (found != nullptr) return *found;
  return add_stream(stream);
}

void pool_impl::forget_stream(stream_t stream) {
  std::lock_guard guard(lock_);
  stream_state* s = streams_.find(stream);
  if (s == nullptr || s->stream == nullptr) return;  // unknown, or the legacy stream (never destroyed)
  // Threads' caches reuse a block on the handle it was freed on, which may name a new stream now.
  take_back_lent(true, s->slot);
  give_back_parked(*s);
  streams_.retire(*s);
}

void pool_impl::throw_invalid_size(std::size_t bytes) const {
  if (bytes == 0) {
    throw error(error_code::invalid_size, fmt::format("tidepool: allocation of 0 bytes on device {}", device_));
  }
  throw error(error_code::invalid_size,
              fmt::format("tidepool: allocation of {} bytes is larger than device {} ({} bytes in all)", bytes,
                          device_, device_total_));
}

void pool_impl::throw_bad_pointer(const char* operation, const void* ptr) {
  flush_parked();  // a parked block is free: name it so
  const auto address = reinterpret_cast<device_address>(ptr);
  for (const auto& a : arenas_) {
    const block* b = a->find_containing(address);
    if (b == nullptr) continue;
    if (b->state == block_state::live || b->state == block_state::lent) {  // lent: handed out (flushed above)
      throw error(error_code::invalid_pointer,
                  fmt::format("tidepool: {} of {}: an interior pointer, {} bytes into the allocation at {:#x} "
                              "(device {})",
                              operation, ptr, address - b->address, b->address, device_));
    }
    throw error(error_code::double_free,
                fmt::format("tidepool: {} of {}: not allocated now (already freed?) on device {}", operation, ptr,
                            device_));
  }
  throw error(error_code::invalid_pointer,
              fmt::format("tidepool: {} of {}: not a pointer of the pool of device {}", operation, ptr, device_));
}

void pool_impl::record_stream(void* ptr, stream_t stream) {
  const auto address = reinterpret_cast<device_address>(ptr);
  std::lock_guard guard(lock_);
  block* b = live_.find(address);
  if (b == nullptr) throw_bad_pointer("record_stream", ptr);
  if (b->state == block_state::lent) take_back_handed_out(b, "record_stream", ptr);
  stream_state* s = streams_.find(stream);
  if (s == nullptr) s = &add_stream(stream);
  std::vector<stream_state*>& extra = extra_streams_[b];
  if (std::find(extra.begin(), extra.end(), s) == extra.end()) {
    extra.push_back(s);
    ++s->holds;
  }
  b->has_extra_streams = true;
}

bool pool_impl::held_back_for_its_stream(const block& b, const stream_state& freeing) {
  if (b.owner == freeing.slot) return false;
  return streams_.at(b.owner).capture == 0;
}

void pool_impl::free_held_back(block* b, stream_state& s, std::uint64_t sequence, bool elsewhere) {
  std::vector<stream_state*> waits_for;
  if (b->has_extra_streams) {
    auto it = extra_streams_.find(b);
    waits_for = std::move(it->second);
    extra_streams_.erase(it);
    b->has_extra_streams = false;
    for (stream_state* other : waits_for) --other->holds;
  }
  stream_state& back_to = elsewhere ? streams_.at(b->owner) : s;
  if (&back_to != &s && std::find(waits_for.begin(), waits_for.end(), &s) == waits_for.end()) waits_for.push_back(&s);
  pending_free pending;
  pending.freed = b;
  pending.slot = back_to.slot;
  pending.sequence = sequence;
  pending.freed_elsewhere = &back_to != &s;
  for (stream_state* other : waits_for) {
    if (other == &back_to) continue;  // the stream whose list it joins orders its own work already
    // As in PyTorch, the event goes on the recorded stream at the free: the program keeps that
    // stream alive until then, or forgets it first (then, as for another thread's per-thread
    // stream, which this thread cannot name, only a device-wide wait proves its work done).
    if (other->retired || (other->thread != 0 && other->thread != this_thread_key()) || other->capture != 0 ||
        stream_captured(other->stream)) {
      pending.needs_device_wait = true;
      continue;
    }
    event_t e = nullptr;
    try {
      e = events_.acquire();
    } catch (const error&) {
      pending.needs_device_wait = true;
      continue;
    }
    if (calls_.event_record(e, other->stream) != driver_status::success) {
      events_.give_back(e);
      pending.needs_device_wait = true;  // no event, no proof: wait for the device instead
      continue;
    }
    pending.events.push_back(e);
  }
  if (pending.events.empty() && !pending.needs_device_wait) {
    b->owner_arena->give_back(b, free_slot(s, sequence), sequence, tick_);
    return;
  }
  b->state = block_state::pending;
  ++back_to.holds;
  held_back_bytes_ += b->size;
  held_back_frees_waiting_ = held_back_frees_waiting_ || !pending.needs_device_wait;
  pending_.push_back(std::move(pending));
}

const block& pool_impl::handed_out_block(const void* ptr, const char* operation, std::size_t& requested) {
  const block* b = live_.find(reinterpret_cast<device_address>(ptr));
  if (b == nullptr) throw_bad_pointer(operation, ptr);
  requested = b->requested;
  if (b->state == block_state::lent && !handed_out(*b, &requested)) throw_bad_pointer(operation, ptr);
  return *b;
}

std::size_t pool_impl::allocation_size(const void* ptr) {
  std::lock_guard guard(lock_);
  std::size_t requested = 0;
  (void)handed_out_block(ptr, "allocation_size", requested);
  return requested;
}

bool pool_impl::owns(const void* ptr) {
  std::lock_guard guard(lock_);
  const block* b = live_.find(reinterpret_cast<device_address>(ptr));
  return b != nullptr && (b->state != block_state::lent || handed_out(*b, nullptr));
}

std::size_t pool_impl::available_bytes() {
  std::lock_guard guard(lock_);
  flush_parked();
  return largest_possible(calls_.free_bytes());
}

pool_stats pool_impl::stats() {
  std::lock_guard guard(lock_);
  return stats_locked();
}

void pool_impl::reset_peak_stats() {
  std::lock_guard guard(lock_);
  reported_peak_in_use_ = in_use_ + lent_bytes_;
  peak_requested_ = requested_ + lent_bytes_;
  pages_.reset_peak_held();
}

void pool_impl::set_byte_cap(std::size_t bytes) {
  std::lock_guard guard(lock_);
  byte_cap_ = bytes;
  pages_.set_device_bytes(std::min(device_total_, byte_cap_));
  next_room_check_held_ = 0;  // the room is the new cap's: the next growth looks again (growth.cpp)
}

std::size_t pool_impl::byte_cap() {
  std::lock_guard guard(lock_);
  return byte_cap_;
}

pool_stats pool_impl::stats_locked() {
  pool_stats s;
  s.in_use_bytes = in_use_;
  s.requested_bytes = requested_;
  s.mapped_bytes = pages_.held_bytes();
  s.asleep_bytes = asleep_bytes_;
  s.graph_kept_bytes = graph_kept_bytes();
  s.graphs = graphs_kept_;
  for (const auto& a : arenas_) s.reserved_address_bytes += a->reserved_bytes();
  s.peak_in_use_bytes = reported_peak_in_use_;
  s.peak_requested_bytes = peak_requested_;
  s.peak_mapped_bytes = pages_.peak_held_bytes();
  s.live_allocations = live_.size() - lent_count_;
  s.streams = streams_.size();
  s.allocations = allocations_;
  s.deallocations = deallocations_;
  s.out_of_memory_recoveries = recoveries_;
  s.released_bytes = pages_.released_bytes();
  s.driver = calls_.counts();
  add_cache_figures(s);  // what threads' caches handed out, before cached is worked out
  s.cached_bytes = s.mapped_bytes + asleep_bytes_ - s.in_use_bytes;
  return s;
}

void pool_impl::enable_peer_access(int peer_device) {
  std::lock_guard guard(lock_);
  if (peer_device < 0 || peer_device >= driver_->device_count()) {
    throw error(error_code::invalid_device, fmt::format("tidepool: peer device {} out of range", peer_device));
  }
  if (!virtual_memory_) return;  // plain allocations: peer access is the driver's context-wide switch
  const driver_status status = pages_.add_peer(peer_device);
  if (status != driver_status::success) {
    throw error(error_code::driver_failure, fmt::format("tidepool: granting device {} access to device {}: {}",
                                                        peer_device, device_, to_string(status)));
  }
}

}  // namespace tidepool::detail
