// Tags (issue 13): named pools per device, the calling thread's current tag, and putting a tag's
// memory to sleep and waking it on every device where it has a pool.
//
// Why a pool per tag rather than a label on blocks of one pool: a pool's cache is shared by all
// its allocations, and the flaw seen in torch_memory_saver (issue 85) is exactly one tag's freed
// memory reused by another through a shared cache. Pools of their own keep address ranges,
// caches and handles apart by construction, and sleep/wake is then a pool operation
// (src/core/sleep_wake.cpp). The cost: a free must find its pool by address, which asks each tag
// pool (a lock and a hash lookup each) only once some tag has a pool.
#include "process/tags.hpp"

#include <array>
#include <exception>
#include <mutex>

#include <fmt/format.h>

#include "process/process_state.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool {
namespace detail {
namespace {

constexpr std::size_t max_tag_name = 64;

struct tag_registry {
  std::mutex mutex;
  std::array<std::atomic<tag_entry*>, max_tags> tags{};
  std::atomic<std::size_t> count{0};
  std::atomic<bool> any_pool{false};
  std::atomic<tag_entry*> default_tag{nullptr};  // set_default_tag
};

tag_registry& registry() {
  static auto* const r = new tag_registry();  // leaked on purpose, as the pools (process_pools.cpp)
  return *r;
}

thread_local std::vector<tag_entry*> thread_tags;

void check_name(const std::string& name) {
  if (name.empty() || name.size() > max_tag_name) {
    throw error(error_code::invalid_argument,
                fmt::format("tidepool: a tag is a name of 1 to {} characters, not '{}'", max_tag_name, name));
  }
  for (const char c : name) {
    if (c < 0x20 || c == 0x7f) {
      throw error(error_code::invalid_argument, "tidepool: a tag name must be printable text");
    }
  }
}

tag_entry& known_tag(const std::string& name) {
  check_name(name);
  tag_entry* tag = find_tag(name);
  if (tag == nullptr) {
    throw error(error_code::invalid_argument,
                fmt::format("tidepool: no tag named '{}' (tags are made by allocating inside one)", name));
  }
  return *tag;
}

// The tag's pools that exist, with their devices.
std::vector<pool*> pools_of(tag_entry& tag) {
  std::vector<pool*> out;
  for (int d = 0; d < tag.device_count; ++d) {
    if (pool* p = tag.pools[d].load(std::memory_order_acquire)) out.push_back(p);
  }
  return out;
}

}  // namespace

tag_entry::tag_entry(std::string name_in, int devices)
    : name(std::move(name_in)),
      device_count(devices),
      pools(std::make_unique<std::atomic<pool*>[]>(static_cast<std::size_t>(devices))),
      owned(static_cast<std::size_t>(devices)) {}

tag_entry* find_tag(const std::string& name) noexcept {
  tag_registry& r = registry();
  const std::size_t n = r.count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    tag_entry* t = r.tags[i].load(std::memory_order_acquire);
    if (t != nullptr && t->name == name) return t;
  }
  return nullptr;
}

tag_entry& tag_named(const std::string& name) {
  check_name(name);
  if (tag_entry* t = find_tag(name)) return *t;
  // The device count fixes the process's driver, as the first pool does.
  const int devices = default_driver()->device_count();
  tag_registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (tag_entry* t = find_tag(name)) return *t;
  const std::size_t n = r.count.load(std::memory_order_relaxed);
  if (n == max_tags) {
    throw error(error_code::invalid_argument,
                fmt::format("tidepool: at most {} tags per process; '{}' would be one more", max_tags, name));
  }
  r.tags[n].store(new tag_entry(name, devices), std::memory_order_release);
  r.count.store(n + 1, std::memory_order_release);
  return *r.tags[n].load(std::memory_order_relaxed);
}

tag_entry* tag_at(std::size_t id) noexcept {
  tag_registry& r = registry();
  if (id >= r.count.load(std::memory_order_acquire)) return nullptr;
  return r.tags[id].load(std::memory_order_acquire);
}

std::size_t tag_count() noexcept { return registry().count.load(std::memory_order_acquire); }

std::size_t tag_id(const tag_entry& tag) noexcept {
  tag_registry& r = registry();
  for (std::size_t i = 0; i < max_tags; ++i) {
    if (r.tags[i].load(std::memory_order_acquire) == &tag) return i;
  }
  return max_tags;
}

pool& tag_pool_of(tag_entry& tag, int device) {
  if (device >= 0 && device < tag.device_count) {
    if (pool* p = tag.pools[device].load(std::memory_order_acquire)) return *p;
  }
  // The untagged pool first: it checks the device and makes the process's table (the driver).
  pool& untagged = device_pool(device);
  // Read before the registry's lock: the process's lock is taken first where both are held
  // (reset_process_for_testing).
  const pool_options options = default_pool_options();
  tag_registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (pool* p = tag.pools[device].load(std::memory_order_acquire)) return *p;
  auto& owner = tag.owned[static_cast<std::size_t>(device)];
  owner = std::make_unique<pool>(untagged.get_driver(), device, options);
  tag.pools[device].store(owner.get(), std::memory_order_release);
  r.any_pool.store(true, std::memory_order_release);
  return *owner;
}

bool tags_have_pools() noexcept { return registry().any_pool.load(std::memory_order_acquire); }

std::vector<pool*> tag_pools(int device) {
  std::vector<pool*> out;
  tag_registry& r = registry();
  const std::size_t n = r.count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    tag_entry* t = r.tags[i].load(std::memory_order_acquire);
    if (t == nullptr) continue;
    for (int d = 0; d < t->device_count; ++d) {
      if (device >= 0 && d != device) continue;
      if (pool* p = t->pools[d].load(std::memory_order_acquire)) out.push_back(p);
    }
  }
  return out;
}

pool* tag_pool_owning(const void* ptr, int device) {
  if (!tags_have_pools()) return nullptr;
  for (pool* p : tag_pools(device)) {
    if (p->owns(ptr)) return p;
  }
  return nullptr;
}

tag_entry* current_tag_entry() noexcept {
  if (!thread_tags.empty()) return thread_tags.back();
  return registry().default_tag.load(std::memory_order_acquire);
}

void lock_tags_for_fork() noexcept { registry().mutex.lock(); }

void unlock_tags_after_fork() noexcept { registry().mutex.unlock(); }

void reset_tags_for_testing() {
  tag_registry& r = registry();
  std::lock_guard lock(r.mutex);
  const std::size_t n = r.count.exchange(0, std::memory_order_acq_rel);
  for (std::size_t i = 0; i < n; ++i) delete r.tags[i].exchange(nullptr, std::memory_order_acq_rel);
  r.any_pool.store(false, std::memory_order_release);
  r.default_tag.store(nullptr, std::memory_order_release);
  thread_tags.clear();  // the calling thread's (tests run the reset on their own thread)
}

}  // namespace detail

void push_tag(const std::string& name) { detail::thread_tags.push_back(&detail::tag_named(name)); }

void pop_tag() {
  if (detail::thread_tags.empty()) {
    throw error(error_code::invalid_argument, "tidepool: pop_tag without a tag pushed on this thread");
  }
  detail::thread_tags.pop_back();
}

std::string set_default_tag(const std::string& name) {
  detail::tag_entry* tag = name.empty() ? nullptr : &detail::tag_named(name);
  const detail::tag_entry* before = detail::registry().default_tag.exchange(tag, std::memory_order_acq_rel);
  return before == nullptr ? std::string() : before->name;
}

std::string default_tag() {
  const detail::tag_entry* t = detail::registry().default_tag.load(std::memory_order_acquire);
  return t == nullptr ? std::string() : t->name;
}

std::string current_tag() {
  const detail::tag_entry* t = detail::current_tag_entry();
  return t == nullptr ? std::string() : t->name;
}

pool& current_pool(int device) {
  if (detail::tag_entry* t = detail::current_tag_entry()) [[unlikely]] return detail::tag_pool_of(*t, device);
  return device_pool(device);
}

pool& tag_pool(const std::string& name, int device) { return detail::tag_pool_of(detail::tag_named(name), device); }

std::vector<std::string> tags() {
  std::vector<std::string> names;
  for (std::size_t i = 0; detail::tag_entry* t = detail::tag_at(i); ++i) names.push_back(t->name);
  return names;
}

std::size_t sleep_tag(const std::string& name, sleep_keep keep) {
  detail::tag_entry& tag = detail::known_tag(name);
  const std::vector<pool*> pools = detail::pools_of(tag);
  for (pool* p : pools) {
    if (p->asleep()) {
      throw error(error_code::asleep, fmt::format("tidepool: tag '{}' is asleep already", name));
    }
  }
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < pools.size(); ++i) {
    try {
      bytes += pools[i]->sleep(keep);
    } catch (...) {
      // All of the tag or none: wake the devices that slept (their contents come back).
      for (std::size_t j = 0; j < i; ++j) {
        try {
          pools[j]->wake();
        } catch (...) {  // stays asleep; a later wake_tag() retries it
        }
      }
      throw;
    }
  }
  return bytes;
}

namespace {

// Makes room on `device` for a wake that found it full: every other pool's cache there (untagged
// and the other tags'), the CUDA async pools, the reclaim hooks (PyTorch's and CuPy's caches).
// Only cached memory: never another tag's live data.
void reclaim_for_wake(int device, const pool* waking, std::size_t bytes) {
  if (pool* p = detail::find_pool(device)) (void)p->release();
  for (pool* p : detail::tag_pools(device)) {
    if (p != waking) (void)p->release();
  }
  (void)waking->get_driver()->trim_async_pools(device);
  (void)run_reclaim_hooks(device, bytes);
}

}  // namespace

void wake_tag(const std::string& name) {
  detail::tag_entry& tag = detail::known_tag(name);
  const std::vector<pool*> pools = detail::pools_of(tag);
  bool any_asleep = false;
  for (pool* p : pools) any_asleep = any_asleep || p->asleep();
  if (!any_asleep) throw error(error_code::asleep, fmt::format("tidepool: tag '{}' is not asleep", name));
  std::vector<pool*> woken;
  for (pool* p : pools) {
    if (!p->asleep()) continue;  // a device that woke in an earlier, partly failed wake_tag()
    try {
      try {
        p->wake();
      } catch (const out_of_memory& e) {
        reclaim_for_wake(p->device(), p, e.report().requested_bytes);
        p->wake();  // once more, after the caches went back
      }
      woken.push_back(p);
    } catch (...) {
      // All of the tag or none: the devices woken here go back to sleep with their contents.
      for (pool* w : woken) {
        try {
          (void)w->sleep(sleep_keep::contents);
        } catch (...) {  // stays awake; the error below still says the tag did not wake
        }
      }
      throw;
    }
  }
}

bool tag_asleep(const std::string& name) {
  for (pool* p : detail::pools_of(detail::known_tag(name))) {
    if (p->asleep()) return true;
  }
  return false;
}

}  // namespace tidepool
