// The release policy: when free memory becomes safe for every stream, and when free handles go
// back to the driver.
//
// Frees become safe (slot 0) when an event covering them completes. Events are recorded only on
// the stream of the call being made (stream_order.hpp says when); slow paths query them and never
// name another stream, which the program may have destroyed. When the pool must wait (release(),
// the destructor, the last step of the out-of-memory path) it synchronizes the whole device
// instead, with its lock dropped, and everything freed before the wait began becomes safe. Free
// handles go back on release(), under memory pressure (out_of_memory_path.cpp), and automatically
// per pool_options::release: immediately, above max_cached_bytes, or after `decay`. Only whole
// handles inside slot-0 blocks are released, so nothing goes while queued work may still use it;
// release() returns the exact bytes handed back.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/pool_impl.hpp"
#include "core/unlocked_call.hpp"

namespace tidepool::detail {

namespace {
constexpr std::uint64_t any_tick = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t everything = std::numeric_limits<std::size_t>::max();
// release() works in steps of this many bytes, passing the lock to waiters between them: about a
// millisecond of driver calls in 2 MiB handles on the H200 (unmap 16 + release 10 us each).
constexpr std::size_t release_step_bytes = std::size_t{64} << 20;
// How many operations pass between two looks at the clock when a decay is set.
constexpr unsigned operations_per_clock_read = 64;

// Milliseconds on the policy's clock.
std::uint64_t milliseconds_now(const release_policy& policy) {
  const auto now = policy.clock ? policy.clock() : std::chrono::steady_clock::now();
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count());
}
}  // namespace

bool pool_impl::record_event(stream_state& s, std::uint64_t watermark, bool overwrite_newest) {
  // A capture's state never records (graph_capture.cpp); a stream being captured not now: an event
  // recorded in a capture cannot be queried afterwards. Its frees wait for its first call after
  // the capture (record_due stays) or a device-wide wait.
  if (s.capture != 0) {
    s.record_due = false;
    return true;
  }
  const bool full = s.in_flight >= stream_state::max_events;
  // Another thread's per-thread stream cannot be named from here (CU_STREAM_PER_THREAD is the
  // caller's own): its frees wait for its own thread's calls or a device-wide wait.
  if (s.thread != 0 && s.thread != this_thread_key()) return true;
  if (!s.retired && stream_captured(s.stream)) return true;
  if (s.retired || (full && !overwrite_newest) || watermark <= s.covered) {
    s.record_due = !s.retired && !full;
    return true;
  }
  if (full) {
    // Recorded again, the newest event covers everything up to now and completes later; the
    // older one still completes as before, so frees keep moving on.
    stream_event& newest = s.events[s.in_flight - 1];
    if (const driver_status status = calls_.event_record(newest.event, s.stream); status != driver_status::success) {
      record_failure_ = status;
      return false;
    }
    newest.watermark = watermark;
    s.covered = watermark;
    return true;
  }
  event_t e = nullptr;
  try {
    e = events_.acquire();
  } catch (const error&) {
    s.record_due = false;  // until its events settle: its frees wait for those or a device-wide wait
    record_failure_ = driver_status::error;
    return false;
  }
  if (const driver_status status = calls_.event_record(e, s.stream); status != driver_status::success) {
    record_failure_ = status;
    events_.give_back(e);
    s.record_due = false;
    return false;
  }
  s.events[s.in_flight++] = stream_event{e, watermark};
  s.covered = watermark;
  s.record_due = false;  // one event per settling at a free: the next settle makes room and asks again
  return true;
}

void pool_impl::record_or_throw(stream_state& s) {
  record_failure_ = driver_status::success;
  if (record_event(s, s.last_free)) return;
  s.record_due = true;  // nothing changed: try again at the stream's next call
  // A bad handle is what a destroyed stream gives; any other failure is the driver's, and says so.
  if (record_failure_ == driver_status::invalid_value) {
    throw error(error_code::invalid_stream,
                fmt::format("tidepool: cannot record an event on stream {} of device {} (destroyed?)",
                            fmt::ptr(s.stream), device_));
  }
  throw error(error_code::driver_failure,
              fmt::format("tidepool: recording an event on stream {} of device {} failed: {}", fmt::ptr(s.stream),
                          device_, to_string(record_failure_)));
}

void pool_impl::settle_stream(stream_state& s, bool hand_over) {
  if (s.capture != 0) {
    (void)kept_for_graph(s);  // its frees complete only with the graph
    return;
  }
  const std::uint64_t before = s.completed;
  while (s.in_flight > 0) {
    const driver_status status = calls_.event_query(s.events[0].event);
    if (status == driver_status::not_ready) break;
    if (status != driver_status::success) {
      throw error(error_code::driver_failure,
                  fmt::format("tidepool: waiting for an event failed on device {}: {}", device_, to_string(status)));
    }
    s.completed = std::max(s.completed, s.events[0].watermark);
    events_.give_back(s.events[0].event);
    for (std::uint32_t i = 1; i < s.in_flight; ++i) s.events[i - 1] = s.events[i];
    s.events[--s.in_flight] = stream_event{};
  }
  // Without `hand_over` (a miss within the growth budget) a stream that still allocates keeps its
  // completed frees; a forgotten stream never allocates again, and one with nothing live has left
  // its work, so theirs go to every stream, those an earlier settling left with them too.
  const bool to_every_stream = hand_over || s.retired || s.live == 0;
  if (to_every_stream && (s.completed > before || !hand_over)) {
    for (auto& a : arenas_) a->make_global(s.slot, s.completed);
  }
  // With room for an event again, the stream's next free records one (and its next allocation,
  // for frees no event covers yet).
  s.record_due = !s.retired && s.in_flight < stream_state::max_events;
}

void pool_impl::flush_parked() {
  take_back_lent(false);  // blocks waiting in threads' caches are free blocks too
  give_back_parked();
}

void pool_impl::give_back_parked() {
  streams_.for_each([](stream_state& s) { give_back_parked(s); });
}

void pool_impl::complete_pending(pending_free& p) {
  for (event_t e : p.events) events_.give_back(e);
  stream_state& s = streams_.at(p.slot);
  held_back_bytes_ -= p.freed->size;
  // Freed on another stream: its stream's work is done now, but the stream it goes back to may
  // still have work queued on its memory from before (the pool may have handed it out there over
  // an earlier free whose work was still queued), so it joins as a free of that stream: at once
  // for that stream, for the others after its next event (which covers it from here).
  if (p.freed_elsewhere) s.last_free = std::max(s.last_free, p.sequence);
  p.freed->owner_arena->give_back(p.freed, free_slot(s, p.sequence), p.sequence, tick_);
  --s.holds;
}

void pool_impl::recycle_idle_streams() {
  streams_.for_each([this](stream_state& s) {
    if (s.live != 0 || s.holds != 0 || s.in_flight != 0 || s.parked != nullptr) return;
    for (const auto& a : arenas_) {
      if (a->has_free(s.slot)) return;
    }
    streams_.recycle(s);
  });
}

void pool_impl::settle_frees(bool wait) {
  if (wait) {
    wait_for_device(true);
    return;
  }
  take_back_lent(false);
  settle_frees_keeping_lent();
}

void pool_impl::settle_frees_keeping_lent(bool hand_over) {
  give_back_parked();
  held_back_frees_waiting_ = settle_held_back_frees(false);
  streams_.for_each([this, hand_over](stream_state& s) { settle_stream(s, hand_over); });
  recycle_idle_streams();
}

void pool_impl::hand_over_completed_frees() {
  streams_.for_each([this](stream_state& s) {
    if (s.capture != 0) return;  // a capture's frees complete only with its graph (kept_for_graph)
    for (auto& a : arenas_) a->make_global(s.slot, s.completed);
  });
}

template <typename Done>
void pool_impl::complete_pending_where(Done done) {
  std::size_t still_pending = 0;  // in the order freed
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    if (done(pending_[i])) {
      complete_pending(pending_[i]);
      continue;
    }
    if (still_pending != i) pending_[still_pending] = std::move(pending_[i]);
    ++still_pending;
  }
  pending_.resize(still_pending);
}

bool pool_impl::settle_held_back_frees(bool stop_at_first_waiting) {
  // Only an event that completed proves the recorded stream's work done: a failed query leaves the
  // free waiting (for a later query or a device-wide wait), never reused under that work.
  auto done = [this](const pending_free& p) {
    if (p.needs_device_wait) return false;
    for (event_t e : p.events) {
      if (calls_.event_query(e) != driver_status::success) return false;
    }
    return true;
  };
  if (stop_at_first_waiting) {
    // An allocation's look: in the order freed, the first still waiting says the later ones are
    // (mostly) too, so one query suffices while the other streams' work runs.
    while (!pending_.empty() && done(pending_.front())) {
      complete_pending(pending_.front());
      pending_.pop_front();
    }
    return !pending_.empty();
  }
  complete_pending_where(done);
  return std::any_of(pending_.begin(), pending_.end(), [](const pending_free& p) { return !p.needs_device_wait; });
}

void pool_impl::wait_for_stream(stream_state& s) {
  if (s.in_flight == 0) return;
  // An event is never destroyed while the pool lives; if another thread settles `s` meanwhile and
  // records this event again elsewhere, the wait ends later, and the settling below still holds.
  const event_t newest = s.events[s.in_flight - 1].event;
  const driver_status status = call_unlocked(lock_, calls_, driver_call::event_synchronize, 0,
                                             [&](driver& d) { return d.event_synchronize(device_, newest); });
  if (status != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("tidepool: waiting for an event failed on device {}: {}", device_, to_string(status)));
  }
  flush_parked();
  settle_stream(s);
}

void pool_impl::wait_for_device(bool drop_lock) {
  flush_parked();
  // Everything freed up to here is done once the wait returns: the free came after the work that
  // used the block was queued. Frees made by other threads while the lock is dropped are not.
  const std::uint64_t fence = free_sequence_;
  // No event on any user stream: the program may have destroyed streams it freed memory on.
  const driver_status status =
      drop_lock ? call_unlocked(lock_, calls_, driver_call::device_synchronize, 0,
                                [this](driver& d) { return d.device_synchronize(device_); })
                : calls_.device_synchronize();
  if (status != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("tidepool: device_synchronize failed on device {}: {}", device_, to_string(status)));
  }
  flush_parked();
  complete_pending_where([fence](const pending_free& p) { return p.sequence <= fence; });
  streams_.for_each([&](stream_state& s) {
    if (kept_for_graph(s)) return;  // a graph's launches may come after the wait
    s.completed = std::max(s.completed, fence);
    std::uint32_t kept = 0;
    for (std::uint32_t i = 0; i < s.in_flight; ++i) {
      if (s.events[i].watermark <= fence) {
        events_.give_back(s.events[i].event);  // what it covers is done
      } else {
        s.events[kept++] = s.events[i];
      }
    }
    for (std::uint32_t i = kept; i < s.in_flight; ++i) s.events[i] = stream_event{};
    s.in_flight = kept;
    s.record_due = !s.retired && s.in_flight < stream_state::max_events;
    for (auto& a : arenas_) a->make_global(s.slot, fence);
  });
  recycle_idle_streams();
}

std::size_t pool_impl::release_free(std::size_t want, std::uint64_t freed_by, arena* only, bool at_most,
                                    joined_blocks keep) {
  std::size_t released = 0;
  hand_over_completed_frees();  // only memory free for every stream goes back
  if (!virtual_memory_) {
    std::vector<address_range*> segments;
    for (auto& a : arenas_) {
      if (released >= want) break;
      if (only != nullptr && a.get() != only) continue;
      const std::size_t before = segments.size();
      a->take_free_segments(freed_by, want - released, segments);
      for (std::size_t i = before; i < segments.size(); ++i) released += segments[i]->size;
    }
    if (segments.empty()) return 0;
    // cuMemFree waits for the whole device: the segments are out of every index, so the lock can go.
    released = 0;
    for (address_range* segment : segments) {
      const bool freed = call_unlocked(lock_, calls_, driver_call::mem_free, segment->size, [&](driver& d) {
        return d.mem_free(device_, segment->base) == driver_status::success;
      });
      if (freed) released += segment->size;
      segment->owner->segment_freed(segment, freed);
    }
    return released;
  }
  std::vector<std::uint32_t> ids;
  // Handles a failed release left behind go first: they are held already and cover nothing.
  if (pages_.has_unreleased()) {
    const driver_status status = pages_.retry_unreleased(released);
    if (status != driver_status::success) {
      throw error(error_code::driver_failure,
                  fmt::format("tidepool: mem_release failed on device {}: {}", device_, to_string(status)));
    }
  }
  for (auto& a : arenas_) {
    if (released >= want) break;
    if (only != nullptr && a.get() != only) continue;
    std::size_t left = want - released;
    std::size_t room = at_most ? left : everything;
    ids.clear();
    if (a->settings().aliases) {
      if (const driver_status dropped = a->drop_idle_aliases(); dropped != driver_status::success) {
        throw error(error_code::driver_failure,
                    fmt::format("tidepool: mem_unmap failed on device {}: {}", device_, to_string(dropped)));
      }
    }
    const driver_status unmapped = a->unmap_free_handles(left, room, freed_by, ids, everything, 0, keep);
    const driver_status status = pages_.release_all(ids, released);
    if (status != driver_status::success) {
      throw error(error_code::driver_failure,
                  fmt::format("tidepool: mem_release failed on device {}: {}", device_, to_string(status)));
    }
    if (unmapped != driver_status::success) {
      throw error(error_code::driver_failure,
                  fmt::format("tidepool: mem_unmap failed on device {}: {}", device_, to_string(unmapped)));
    }
  }
  return released;
}

std::size_t pool_impl::release() {
  std::lock_guard guard(lock_);
  if (asleep_) return 0;  // everything went back when it slept; what slept is wake()'s
  settle_frees(true);
  trim_floor_ = 0;
  forget_device_limit();  // handed back what it could: growth makes growth's usual handles again
  return release_in_steps(everything, any_tick);
}


std::size_t pool_impl::release_in_steps(std::size_t want, std::uint64_t freed_by) {
  // Handing back GiBs takes tens of milliseconds of unmap and release calls (about 10 ms per GiB
  // on the H200): in steps, passing the lock to waiting threads between them, so a cached
  // allocation elsewhere waits for one step at most.
  std::size_t released = 0;
  while (released < want) {
    const std::size_t ask = std::min(release_step_bytes, want - released);
    const std::size_t step = release_free(ask, freed_by);
    released += step;
    if (step < ask) break;  // nothing more to hand back
    lock_.pass_to_sleepers();
  }
  return released;
}

void pool_impl::after_operation(bool freed, stream_state& s) {
  const release_policy& policy = options_.release;
  const stream_hold hold(s);  // releasing passes the lock to waiters, whose slow paths recycle slots
  if (policy.decay.count() > 0 && operations_since_clock_++ % operations_per_clock_read == 0) {
    // Ticks count from the first operation, so what it freed (tick 0) is as old as it really is.
    const std::uint64_t now = milliseconds_now(policy);
    if (operations_since_clock_ == 1) clock_origin_ = now;
    tick_ = now > clock_origin_ ? now - clock_origin_ : 0;
    const auto decay = static_cast<std::uint64_t>(policy.decay.count());
    if (tick_ >= last_decay_check_ + std::max<std::uint64_t>(decay / 4, 1) && tick_ >= decay) {
      last_decay_check_ = tick_;
      cover_frees(s);
      settle_frees(false);
      (void)release_in_steps(everything, tick_ - decay);
    }
  }
  if (!freed) return;
  if (policy.immediate) {
    cover_frees(s);
    settle_frees(false);
    (void)release_in_steps(everything, any_tick);
    return;
  }
  const std::size_t cached = pages_.held_bytes() - in_use_;
  if (cached <= policy.max_cached_bytes) {
    trim_floor_ = 0;
    return;
  }
  if (cached <= trim_floor_) return;  // what is left above the limit cannot go back yet
  cover_frees(s);
  settle_frees(false);
  (void)release_in_steps(cached - policy.max_cached_bytes, any_tick);
  const std::size_t left = pages_.held_bytes() - in_use_;
  trim_floor_ = left > policy.max_cached_bytes ? left + pages_.granularity() : 0;
}

}  // namespace tidepool::detail
