// The release policy: when free memory becomes safe for every stream, and when free handles go
// back to the driver.
//
// Frees become safe (slot 0) on slow paths only: an event is recorded on each stream that owns
// free blocks and queried. When the pool must wait (release(), the destructor, the last step of
// the out-of-memory path) it synchronizes the whole device instead and records nothing on user
// streams, which the program may already have destroyed. Free handles go back on release(), under memory pressure
// (out_of_memory_path.cpp), and automatically per pool_options::release: immediately, above
// max_cached_bytes, or after `decay`. Only whole handles inside slot-0 blocks are released, so
// nothing goes while queued work may still use it; release() returns the exact bytes handed back.
#include <fmt/format.h>

#include <chrono>
#include <limits>

#include "core/pool_impl.hpp"

namespace tidepool::detail {

namespace {
constexpr std::uint64_t any_tick = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t everything = std::numeric_limits<std::size_t>::max();
// How many operations pass between two looks at the clock when a decay is set.
constexpr unsigned operations_per_clock_read = 64;

// Milliseconds on the policy's clock.
std::uint64_t milliseconds_now(const release_policy& policy) {
  const auto now = policy.clock ? policy.clock() : std::chrono::steady_clock::now();
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count());
}
}  // namespace

void pool_impl::settle_stream(stream_state& s) {
  for (int round = 0; round < 2; ++round) {
    bool owns_free = false;
    for (auto& a : arenas_) owns_free = owns_free || a->has_free(s.slot);
    if (!owns_free) return;
    if (s.event == nullptr) {
      s.event = events_.acquire();
      const driver_status recorded = calls_.event_record(s.event, s.stream);
      if (recorded != driver_status::success) {
        events_.give_back(s.event);
        s.event = nullptr;
        throw error(error_code::driver_failure, fmt::format("tidepool: event_record failed on device {}: {}",
                                                            device_, to_string(recorded)));
      }
      s.watermark = s.last_free;
    }
    const driver_status status = calls_.event_query(s.event);
    if (status == driver_status::not_ready) return;
    if (status != driver_status::success) {
      throw error(error_code::driver_failure,
                  fmt::format("tidepool: waiting for an event failed on device {}: {}", device_, to_string(status)));
    }
    for (auto& a : arenas_) a->make_global(s.slot, s.watermark);
    events_.give_back(s.event);
    s.event = nullptr;
  }
}

void pool_impl::flush_parked() {
  streams_.for_each([](stream_state& s) {
    if (block* b = s.parked) {
      s.parked = nullptr;
      b->owner_arena->give_back(b, s.slot, b->free_sequence, b->freed_tick);
    }
  });
}

void pool_impl::settle_frees(bool wait) {
  if (wait) {
    wait_for_device();
    return;
  }
  flush_parked();
  // Frees held back by record_stream() streams.
  for (std::size_t i = 0; i < pending_.size();) {
    pending_free& p = pending_[i];
    bool done = true;
    for (event_t e : p.events) {
      if (calls_.event_query(e) == driver_status::not_ready) {
        done = false;
        break;
      }
    }
    if (!done) {
      ++i;
      continue;
    }
    for (event_t e : p.events) events_.give_back(e);
    p.freed->owner_arena->give_back(p.freed, p.slot, p.sequence, tick_);
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
  streams_.for_each([&](stream_state& s) { settle_stream(s); });
}

void pool_impl::wait_for_device() {
  flush_parked();
  // One device-wide wait, no event recorded on any user stream: a program may have destroyed a
  // stream it freed memory on (recording on it would be a use after free in the driver).
  const driver_status status = calls_.device_synchronize();
  if (status != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("tidepool: device_synchronize failed on device {}: {}", device_, to_string(status)));
  }
  for (pending_free& p : pending_) {
    for (event_t e : p.events) events_.give_back(e);  // complete: the device is idle
    p.freed->owner_arena->give_back(p.freed, p.slot, p.sequence, tick_);
  }
  pending_.clear();
  streams_.for_each([&](stream_state& s) {
    if (s.event != nullptr) {
      events_.give_back(s.event);
      s.event = nullptr;
    }
    for (auto& a : arenas_) a->make_global(s.slot, s.last_free);
  });
}

std::size_t pool_impl::release_free(std::size_t want, std::uint64_t freed_by) {
  std::size_t released = 0;
  if (!virtual_memory_) {
    for (auto& a : arenas_) {
      if (released >= want) break;
      released += a->release_free_segments(freed_by, want - released);
    }
    return released;
  }
  std::vector<std::uint32_t> ids;
  for (auto& a : arenas_) {
    if (released >= want) break;
    std::size_t left = want - released;
    std::size_t room = everything;
    ids.clear();
    const driver_status unmapped = a->unmap_free_handles(left, room, freed_by, ids, everything);
    for (std::uint32_t id : ids) {
      const std::size_t size = pages_.record(id).size;
      const driver_status status = pages_.release(id);
      if (status != driver_status::success) {
        throw error(error_code::driver_failure,
                    fmt::format("tidepool: mem_release failed on device {}: {}", device_, to_string(status)));
      }
      released += size;
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
  settle_frees(true);
  trim_floor_ = 0;
  return release_free(everything, any_tick);
}

void pool_impl::after_operation(bool freed) {
  const release_policy& policy = options_.release;
  if (policy.decay.count() > 0 && operations_since_clock_++ % operations_per_clock_read == 0) {
    // Ticks count from the first operation, so what it freed (tick 0) is as old as it really is.
    const std::uint64_t now = milliseconds_now(policy);
    if (operations_since_clock_ == 1) clock_origin_ = now;
    tick_ = now > clock_origin_ ? now - clock_origin_ : 0;
    const auto decay = static_cast<std::uint64_t>(policy.decay.count());
    if (tick_ >= last_decay_check_ + std::max<std::uint64_t>(decay / 4, 1) && tick_ >= decay) {
      last_decay_check_ = tick_;
      settle_frees(false);
      (void)release_free(everything, tick_ - decay);
    }
  }
  if (!freed) return;
  if (policy.immediate) {
    settle_frees(false);
    (void)release_free(everything, any_tick);
    return;
  }
  const std::size_t cached = pages_.held_bytes() - in_use_;
  if (cached <= policy.max_cached_bytes) {
    trim_floor_ = 0;
    return;
  }
  if (cached <= trim_floor_) return;  // what is left above the limit cannot go back yet
  settle_frees(false);
  (void)release_free(cached - policy.max_cached_bytes, any_tick);
  const std::size_t left = pages_.held_bytes() - in_use_;
  trim_floor_ = left > policy.max_cached_bytes ? left + pages_.granularity() : 0;
}

}  // namespace tidepool::detail
