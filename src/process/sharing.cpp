// The process's side of the GPU ledgers (sharing.hpp): joining, the helper threads that serve the
// other processes' requests, and asking them before an allocation fails.
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
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "process/ledger.hpp"
#include "process/process_identity.hpp"
#include "process/process_state.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool {
namespace detail {
namespace {

constexpr std::uint64_t longest_wait_ms = 60'000;
constexpr auto stop_wait = std::chrono::seconds(1);

// True on a helper thread: its reclaim hooks must not ask the others in turn.
thread_local bool on_helper_thread = false;

std::string_view environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string_view{} : std::string_view{value};
}

bool parse_switch(const char* name, std::string_view value, bool fallback) {
  if (value.empty()) return fallback;
  if (value == "1" || value == "on" || value == "true" || value == "yes") return true;
  if (value == "0" || value == "off" || value == "false" || value == "no") return false;
  throw error(error_code::invalid_argument, fmt::format("{}='{}' is not valid: expected 1 or 0", name, value));
}

std::uint64_t parse_ms(const char* name, std::string_view value, std::uint64_t fallback, std::uint64_t most) {
  if (value.empty()) return fallback;
  std::uint64_t number = 0;
  for (const char c : value) {
    if (c < '0' || c > '9' || number > most) {
      throw error(error_code::invalid_argument,
                  fmt::format("{}='{}' is not valid: expected milliseconds from 0 to {}", name, value, most));
    }
    number = number * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (number > most) {
    throw error(error_code::invalid_argument,
                fmt::format("{}='{}' is not valid: expected milliseconds from 0 to {}", name, value, most));
  }
  return number;
}

// One joined GPU. Shared by the process state and its helper thread.
struct device_share {
  int device = 0;
  std::unique_ptr<ledger> book;
  std::string refused;
  std::atomic<std::size_t> slot{0};  // moved by the helper thread when it must take a new one
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable stopped_cv;
  bool running = false;  // under mutex
};

struct sharing_state {
  std::mutex mutex;
  bool options_read = false;
  std::string options_error;
  std::atomic<bool> enabled{true};
  std::atomic<bool> gives{true};
  std::atomic<std::uint64_t> wait_ms{100};
  std::uint64_t publish_ms = 100;
  std::string directory;
  std::map<int, std::shared_ptr<device_share>> devices;
  std::atomic<std::uint64_t> asks{0}, requests{0}, answered{0}, timed_out{0}, busy{0}, gone{0},
      answered_bytes{0}, last_round_trip_ns{0}, served{0};
};

std::atomic<sharing_state*> current_state{nullptr};
std::once_flag process_hooks_once;

void read_options(sharing_state& s) {
  if (s.options_read) return;
  s.options_read = true;
  try {
    s.enabled = parse_switch("TIDEPOOL_SHARING", environment("TIDEPOOL_SHARING"), true);
    s.gives = parse_switch("TIDEPOOL_SHARING_GIVES", environment("TIDEPOOL_SHARING_GIVES"), true);
    s.wait_ms = parse_ms("TIDEPOOL_SHARING_WAIT_MS", environment("TIDEPOOL_SHARING_WAIT_MS"), 100, longest_wait_ms);
    s.publish_ms = parse_ms("TIDEPOOL_SHARING_PUBLISH_MS", environment("TIDEPOOL_SHARING_PUBLISH_MS"), 100, 10'000);
    if (s.publish_ms == 0) s.publish_ms = 1;
  } catch (const error& e) {
    s.options_error = e.what();
    s.enabled = false;
  }
  const auto dir = environment("TIDEPOOL_LEDGER_DIR");
  s.directory = dir.empty() ? std::string("/dev/shm") : std::string(dir);
}

// The state, made on first use; never freed (a helper thread may outlive any owner).
sharing_state& state() {
  sharing_state* s = current_state.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  auto* fresh = new sharing_state();
  if (current_state.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *s;
}

std::shared_ptr<driver> process_driver() {
  auto* table = process().table.load(std::memory_order_acquire);
  return table == nullptr ? nullptr : table->drv;
}

void publish(device_share& share, bool gives) noexcept {
  pool* p = find_pool(share.device);
  if (p == nullptr) return;
  try {
    const pool_stats st = p->stats();
    share.book->publish(share.slot, st.mapped_bytes, st.in_use_bytes, st.cached_bytes, gives);
  } catch (...) {
  }
}

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

std::string ledger_directory() {
  sharing_state& s = state();
  std::lock_guard guard(s.mutex);
  read_options(s);
  return s.directory;
}

void sharing_join(int device) noexcept {
  try {
    sharing_state& s = state();
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
  sharing_state& s = state();
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
    const std::size_t free = drv->memory_info(device).free;
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
  sharing_state& s = state();
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
  sharing_state& s = state();
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

}  // namespace detail

sharing_options get_sharing_options() {
  auto& s = detail::state();
  std::lock_guard guard(s.mutex);
  detail::read_options(s);
  if (!s.options_error.empty()) throw error(error_code::invalid_argument, s.options_error);
  sharing_options o;
  o.enabled = s.enabled.load();
  o.gives = s.gives.load();
  o.wait = std::chrono::milliseconds(s.wait_ms.load());
  return o;
}

void set_sharing_options(const sharing_options& options) {
  if (options.wait.count() < 0 || static_cast<std::uint64_t>(options.wait.count()) > detail::longest_wait_ms) {
    throw error(error_code::invalid_argument,
                fmt::format("sharing wait of {} ms: expected 0 to {} ms", options.wait.count(), detail::longest_wait_ms));
  }
  auto& s = detail::state();
  {
    std::lock_guard guard(s.mutex);
    detail::read_options(s);
    s.options_error.clear();
    s.enabled = options.enabled;
    s.gives = options.gives;
    s.wait_ms = static_cast<std::uint64_t>(options.wait.count());
  }
  if (!options.enabled) {
    (void)detail::stop_all();
    return;
  }
  // Turned on (or kept on): join the GPUs whose pools exist already.
  const auto pools = existing_pools();
  for (std::size_t d = 0; d < pools.size(); ++d) {
    if (pools[d] != nullptr) detail::sharing_join(static_cast<int>(d));
  }
}

void stop_sharing() { (void)detail::stop_all(); }

}  // namespace tidepool
