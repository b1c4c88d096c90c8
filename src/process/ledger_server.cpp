// The helper thread of one joined GPU (issue 14): it sleeps on its slot's futex, wakes for a
// request or every publish interval, serves a request with cached memory only (the pool's free
// pages, then the async pools and the reclaim hooks), and publishes the pool's figures. Stopping
// it is bounded (stop_wait): an exit never hangs on a thread stuck in a hook.
#include <algorithm>
#include <thread>

#include "process/process_state.hpp"
#include "process/sharing_state.hpp"
#include "tidepool/process.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool {
namespace detail {

thread_local bool on_helper_thread = false;

namespace {

// What a request gets: the pool's free pages, then (when that is short) the CUDA async pools and
// the reclaim hooks (PyTorch's and CuPy's caches). All of it cached memory; nothing live.
std::uint64_t hand_back(int device, std::uint64_t bytes) noexcept {
  std::uint64_t got = 0;
  try {
    if (pool* p = find_pool(device)) got += p->release();
    if (got < bytes) {
      if (const auto drv = process_driver()) got += drv->trim_async_pools(device);
      got += run_reclaim_hooks(device, static_cast<std::size_t>(bytes - std::min(got, bytes)));
    }
  } catch (...) {
    // A hook that threw: what was handed back so far still counts.
  }
  return got;
}

// Whether the helper thread stopped in time.
bool stop_share(device_share& share) {
  share.stop.store(true, std::memory_order_release);
  if (!share.book) return true;
  share.book->wake(share.slot);
  std::unique_lock lock(share.mutex);
  if (!share.stopped_cv.wait_for(lock, stop_wait, [&] { return !share.running; })) {
    // Stuck (a hook that does not return): leave the slot anyway; the thread stops when it can.
    share.book->leave(share.slot);
    return false;
  }
  return true;
}

}  // namespace

void publish(device_share& share, bool gives) noexcept {
  pool* p = find_pool(share.device);
  if (p == nullptr) return;
  try {
    const pool_stats st = p->stats();
    share.book->publish(share.slot, st.mapped_bytes, st.in_use_bytes, st.cached_bytes, gives);
  } catch (...) {
  }
}

void serve(std::shared_ptr<device_share> share, sharing_state* s) {
  on_helper_thread = true;
  const std::uint64_t interval_ns = s->publish_ms * 1'000'000;
  while (!share->stop.load(std::memory_order_acquire)) {
    const bool gives = s->gives.load(std::memory_order_relaxed);
    if (!share->book->holds(share->slot)) {
      // The slot was overwritten (a corrupt or hostile write): take a slot again, or wait.
      if (const auto slot = share->book->claim(gives)) {
        share->slot = *slot;
      } else {
        std::this_thread::sleep_for(std::chrono::nanoseconds(interval_ns));
        continue;
      }
    }
    const std::uint32_t seen = share->book->current_request(share->slot);
    if (const auto request = share->book->pending(share->slot)) {
      const std::uint64_t bytes = gives ? hand_back(share->device, request->bytes) : 0;
      share->book->answer(share->slot, request->seq, bytes);
      s->served.fetch_add(1, std::memory_order_relaxed);
      publish(*share, gives);
      continue;
    }
    publish(*share, gives);
    share->book->wait_for_request(share->slot, seen, interval_ns);
  }
  share->book->leave(share->slot);
  std::lock_guard guard(share->mutex);
  share->running = false;
  share->stopped_cv.notify_all();
}

// Whether every helper thread stopped in time.
bool stop_all() noexcept {
  sharing_state* s = current_state.load(std::memory_order_acquire);
  if (s == nullptr) return true;
  bool all = true;
  std::map<int, std::shared_ptr<device_share>> devices;
  {
    std::lock_guard guard(s->mutex);
    devices.swap(s->devices);
  }
  for (auto& [device, share] : devices) {
    try {
      all = stop_share(*share) && all;
    } catch (...) {
      all = false;
    }
  }
  return all;
}

}  // namespace detail

void stop_sharing() { (void)detail::stop_all(); }

}  // namespace tidepool
