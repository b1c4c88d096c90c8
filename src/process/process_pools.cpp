// One pool per device, made on first use: device_pool(), existing_pools(), the default options,
// and the lock-free lookups the C API's fast path uses.
#include <pthread.h>

#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/fork_safety.hpp"
#include "process/process_state.hpp"
#include "process/sharing.hpp"
#include "process/tags.hpp"
#include "process/recorder.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

namespace tidepool {
namespace detail {

pool_table::pool_table(std::shared_ptr<driver> drv_in, int count)
    : drv(std::move(drv_in)),
      device_count(count),
      slots(std::make_unique<std::atomic<pool*>[]>(static_cast<std::size_t>(count))),
      owned(static_cast<std::size_t>(count)) {}

namespace {

// fork(): every pool is locked across it by core's handlers (fork_safety.hpp), so a child (a
// data-loader worker) never inherits a pool another thread was in the middle of changing, with
// its lock held for ever. They are installed when the process state is first made, before the
// recorder's handlers and the tag registry's below, whose prepare steps run first: the recorder's
// writer takes a pool's lock under its mutexes, and tag_pool_of() makes a pool (which registers
// it with core) under the tag registry's mutex.
void register_fork_handlers() {
  install_pool_fork_handlers();
  (void)::pthread_atfork(&lock_tags_for_fork, &unlock_tags_after_fork, &unlock_tags_after_fork);
}

}  // namespace

process_state& process() {
  // Leaked on purpose: frees from a framework may arrive during static destruction.
  static auto* const state = [] {
    auto* made = new process_state();
    register_fork_handlers();
    return made;
  }();
  return *state;
}

pool* find_pool(int device) noexcept {
  auto* table = process().table.load(std::memory_order_acquire);
  if (table == nullptr || device < 0 || device >= table->device_count) return nullptr;
  return table->slots[device].load(std::memory_order_acquire);
}

pool* find_owning_pool(const void* ptr) {
  auto* table = process().table.load(std::memory_order_acquire);
  if (table == nullptr) return nullptr;
  for (int d = 0; d < table->device_count; ++d) {
    pool* p = table->slots[d].load(std::memory_order_acquire);
    if (p != nullptr && p->owns(ptr)) return p;
  }
  return tag_pool_owning(ptr, -1);
}

pool_options default_pool_options() {
  auto& state = process();
  std::lock_guard lock(state.mutex);
  return state.options;
}

void reset_process_for_testing() {
  // The helper threads read the pools: stopped before the pools go.
  reset_sharing_for_testing();
  auto& state = process();
  std::lock_guard lock(state.mutex);
  recorder::instance().stop(existing_pools());
  reset_tags_for_testing();
  state.recording_environment_read = false;
  delete state.table.exchange(nullptr, std::memory_order_acq_rel);
  state.drv.reset();
  state.options = pool_options{};
  state.device_byte_caps.clear();
}

namespace {

// The slow path of device_pool: makes the table (fixing the driver) and the pool, under the lock.
pool& create_device_pool(int device) {
  auto& state = process();
  std::lock_guard lock(state.mutex);
  auto* table = state.table.load(std::memory_order_acquire);
  if (table == nullptr) {
    if (!state.drv) state.drv = driver_from_environment();
    const int count = state.drv->device_count();
    table = new pool_table(state.drv, count);
    state.table.store(table, std::memory_order_release);
  }
  if (device < 0 || device >= table->device_count) {
    throw error(error_code::invalid_device,
                fmt::format("device {} does not exist: the '{}' driver has {} device(s)", device,
                            table->drv->name(), table->device_count));
  }
  auto& slot = table->slots[device];
  if (pool* existing = slot.load(std::memory_order_acquire)) return *existing;
  auto& owner = table->owned[static_cast<std::size_t>(device)];
  pool_options options = state.options;
  if (auto cap = state.device_byte_caps.find(device); cap != state.device_byte_caps.end()) {
    options.byte_cap = cap->second;
    state.device_byte_caps.erase(cap);
  }
  owner = std::make_unique<pool>(table->drv, device, options);
  // A recording covers pools made after it began; TIDEPOOL_RECORD is read with the first pool.
  // Either happens before the pool is published, so no event of it is missed.
  auto& rec = recorder::instance();
  if (rec.active()) {
    rec.attach(*owner);
  } else if (!state.recording_environment_read) {
    start_recording_from_environment({owner.get()});
  }
  state.recording_environment_read = true;
  slot.store(owner.get(), std::memory_order_release);
  return *owner;
}

}  // namespace
}  // namespace detail

pool& device_pool(int device) {
  if (pool* p = detail::find_pool(device)) return *p;
  pool& made = detail::create_device_pool(device);
  // Outside the process's lock: joining opens a file and starts a thread (once per device).
  detail::sharing_join(device);
  return made;
}

std::vector<pool*> existing_pools() {
  std::vector<pool*> pools;
  auto* table = detail::process().table.load(std::memory_order_acquire);
  if (table == nullptr) return pools;
  pools.reserve(static_cast<std::size_t>(table->device_count));
  for (int d = 0; d < table->device_count; ++d) {
    pools.push_back(table->slots[d].load(std::memory_order_acquire));
  }
  return pools;
}

void set_default_pool_options(const pool_options& options) {
  auto& state = detail::process();
  std::lock_guard lock(state.mutex);
  // A pool keeps the options it was made with, so options set later would silently apply to
  // nothing a program already uses: refuse, naming the pools that exist.
  if (auto* table = state.table.load(std::memory_order_acquire)) {
    std::string devices;
    for (int d = 0; d < table->device_count; ++d) {
      if (table->slots[d].load(std::memory_order_acquire) == nullptr) continue;
      devices += fmt::format("{}{}", devices.empty() ? "" : ", ", d);
    }
    if (!devices.empty()) {
      throw error(error_code::invalid_argument,
                  fmt::format("tidepool: pool options must be set before the first allocation: the pool of "
                              "device(s) {} exists already and keeps the options it was made with",
                              devices));
    }
  }
  state.options = options;
}

// A device's cap goes to its pool, or waits in the process state for the pool to be made. The
// pool's lock is never taken under the process's mutex here: pools live as long as the process.
void set_device_byte_cap(int device, std::size_t bytes) {
  pool* made = detail::find_pool(device);
  if (made == nullptr) {
    const auto drv = default_driver();  // before the lock: it takes it
    detail::check_device(*drv, device);
    auto& state = detail::process();
    std::lock_guard lock(state.mutex);
    // Under the lock the pool is either published already or made later with this cap.
    made = detail::find_pool(device);
    if (made == nullptr) {
      state.device_byte_caps[device] = bytes;
      return;
    }
  }
  made->set_byte_cap(bytes);
}

std::size_t device_byte_cap(int device) {
  pool* made = detail::find_pool(device);
  if (made == nullptr) {
    const auto drv = default_driver();
    detail::check_device(*drv, device);
    auto& state = detail::process();
    std::lock_guard lock(state.mutex);
    made = detail::find_pool(device);
    if (made == nullptr) {
      auto cap = state.device_byte_caps.find(device);
      return cap != state.device_byte_caps.end() ? cap->second : state.options.byte_cap;
    }
  }
  return made->byte_cap();
}

}  // namespace tidepool
