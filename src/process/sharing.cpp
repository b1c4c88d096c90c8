// The process's side of the GPU ledgers (sharing.hpp): joining, and asking the others before an
// allocation fails. The helper threads are ledger_server.cpp, the options sharing_options.cpp.
//
// Order of reclaim: the hook that asks is registered when the first pool joins a ledger, after
// the hooks a front end registers when the library loads (Python's for PyTorch's and CuPy's
// caches), so the out-of-memory path has emptied this process's own caches before it asks.
//
// Threads: one helper per joined GPU, detached, sleeping on a futex in its own slot; it wakes for
// a request, or every publish interval to publish the pool's figures. It is stopped (and its slot
// freed) by stop_sharing(), at exit (atexit), or when sharing is turned off; the wait for it is
// bounded (a second), so an exit never hangs on a thread stuck in a hook. A forked child starts
// with no joined GPU (its parent's threads are not in it): pthread_atfork gives it fresh state.
#include "process/sharing.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "process/ledger.hpp"
#include "process/process_identity.hpp"
#include "process/process_state.hpp"
#include "process/sharing_state.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool::detail {
namespace {

std::once_flag process_hooks_once;

// The reclaim hook: never throws into the out-of-memory path (which would then fail the
// allocation with this error instead of out-of-memory).
std::size_t hook(int device, std::size_t bytes_needed) {
  try {
    return ask_neighbours(device, bytes_needed);
  } catch (...) {
    return 0;
  }
}

// In a forked child the helper threads do not exist and the state's mutex may be held: start
// afresh (the parent's state is left as it was, never freed). The options carry over.
void after_fork_in_child() {
  sharing_state* old = current_state.load(std::memory_order_relaxed);
  auto* fresh = new sharing_state();
  if (old != nullptr) {
    fresh->options_read = true;
    fresh->enabled = old->enabled.load();
    fresh->gives = old->gives.load();
    fresh->wait_ms = old->wait_ms.load();
    fresh->publish_ms = old->publish_ms;
    fresh->directory = old->directory;
  }
  current_state.store(fresh, std::memory_order_release);
}

void install_process_hooks() {
  std::call_once(process_hooks_once, [] {
    (void)add_reclaim_hook(hook);
    (void)std::atexit([] { (void)stop_all(); });
    (void)::pthread_atfork(nullptr, nullptr, [] { after_fork_in_child(); });
  });
}

}  // namespace

void sharing_join(int device) noexcept {
  try {
    sharing_state& s = sharing();
    std::lock_guard guard(s.mutex);
    read_options(s);
    if (!s.enabled.load() || s.devices.count(device) != 0) return;
    const auto drv = process_driver();
    if (!drv) return;
    auto share = std::make_shared<device_share>();
    share->device = device;
    s.devices.emplace(device, share);
    device_uuid_bytes uuid{};
    const driver_status status = drv->device_uuid(device, &uuid);
    if (status != driver_status::success) {
      share->refused = fmt::format("the driver gives no UUID for device {} ({})", device, to_string(status));
      return;
    }
    std::optional<std::size_t> slot;
    for (int attempt = 0; attempt < 4 && !slot; ++attempt) {
      try {
        share->book = ledger::open_or_create(s.directory, uuid);
      } catch (const error& e) {
        share->refused = e.what();
        return;
      }
      slot = share->book->claim(s.gives.load());
      if (!slot && !share->book->unlinked()) break;  // full, not removed: opening again will not help
    }
    if (!slot) {
      share->refused = fmt::format("ledger {} has no free slot ({} running processes)", share->book->path(),
                                   ledger_slot_count);
      share->book.reset();
      return;
    }
    share->slot = *slot;
    install_process_hooks();
    publish(*share, s.gives.load());
    share->running = true;
    std::thread(serve, share, &s).detach();
  } catch (...) {
    // Sharing is an addition: a process that cannot join still allocates as before.
  }
}

std::size_t ask_neighbours(int device, std::size_t bytes_needed) {
  if (on_helper_thread || bytes_needed == SIZE_MAX) return 0;
  sharing_state& s = sharing();
  if (!s.enabled.load(std::memory_order_relaxed)) return 0;
  std::shared_ptr<device_share> share;
  {
    std::lock_guard guard(s.mutex);
    const auto found = s.devices.find(device);
    if (found != s.devices.end()) share = found->second;
  }
  pool* p = find_pool(device);
  const auto drv = process_driver();
  if (!share || !share->book || p == nullptr || !drv) return 0;
  const std::size_t page = std::max<std::size_t>(drv->granularity(device), 1);
  const std::size_t rounded = (bytes_needed + page - 1) / page * page;
  const std::size_t need = rounded + p->options().headroom;
  auto missing = [&]() -> std::size_t {
    const std::size_t free = drv->free_bytes(device);
    return need > free ? need - free : 0;
  };
  std::size_t lacking = missing();
  if (lacking == 0) return 0;  // the device has room: what failed is not for the others to fix
  s.asks.fetch_add(1, std::memory_order_relaxed);
  publish(*share, s.gives.load());
  const std::uint64_t deadline = monotonic_ns() + s.wait_ms.load() * 1'000'000;
  std::vector<ledger_entry> others = share->book->entries();
  const std::uint64_t me = owner_word(static_cast<std::uint64_t>(::getpid()), own_start_time());
  std::erase_if(others, [&](const ledger_entry& e) { return e.owner == me || !e.gives; });
  // The largest caches first: fewest processes disturbed.
  std::stable_sort(others.begin(), others.end(),
                   [](const ledger_entry& a, const ledger_entry& b) { return a.cached_bytes > b.cached_bytes; });
  std::size_t handed_back = 0;
  for (const ledger_entry& other : others) {
    if (monotonic_ns() >= deadline) break;
    s.requests.fetch_add(1, std::memory_order_relaxed);
    const ask_result r = share->book->ask(other, lacking, deadline, [&] { return missing() == 0; });
    switch (r.outcome) {
      case ask_outcome::answered:
        s.answered.fetch_add(1, std::memory_order_relaxed);
        s.answered_bytes.fetch_add(r.bytes, std::memory_order_relaxed);
        s.last_round_trip_ns.store(r.waited_ns, std::memory_order_relaxed);
        handed_back += static_cast<std::size_t>(r.bytes);
        break;
      case ask_outcome::enough:
        s.answered.fetch_add(1, std::memory_order_relaxed);
        s.last_round_trip_ns.store(r.waited_ns, std::memory_order_relaxed);
        break;
      case ask_outcome::busy: s.busy.fetch_add(1, std::memory_order_relaxed); break;
      case ask_outcome::timed_out: s.timed_out.fetch_add(1, std::memory_order_relaxed); break;
      case ask_outcome::gone: s.gone.fetch_add(1, std::memory_order_relaxed); break;
    }
    // What the driver says is free decides, not what the others claim.
    lacking = missing();
    if (lacking == 0) break;
  }
  return handed_back;
}

std::vector<sharing_device_status> sharing_devices() {
  sharing_state& s = sharing();
  std::lock_guard guard(s.mutex);
  std::vector<sharing_device_status> out;
  for (const auto& [device, share] : s.devices) {
    sharing_device_status st;
    st.device = device;
    st.ledger_path = share->book ? share->book->path() : std::string();
    st.refused = share->refused;
    st.slot = share->slot;
    std::lock_guard g(share->mutex);
    st.serving = share->running;
    out.push_back(st);
  }
  return out;
}

sharing_counters sharing_counts() {
  sharing_state& s = sharing();
  sharing_counters c;
  c.asks = s.asks.load();
  c.requests = s.requests.load();
  c.answered = s.answered.load();
  c.timed_out = s.timed_out.load();
  c.busy = s.busy.load();
  c.gone = s.gone.load();
  c.answered_bytes = s.answered_bytes.load();
  c.last_round_trip_ns = s.last_round_trip_ns.load();
  c.served = s.served.load();
  return c;
}

void reset_sharing_for_testing() {
  const bool stopped = stop_all();
  sharing_state* old = current_state.exchange(new sharing_state(), std::memory_order_acq_rel);
  if (stopped) delete old;  // else a stuck thread may still read it: left alone
}

}  // namespace tidepool::detail
