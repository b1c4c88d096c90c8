// The reclaim hook registry: process-wide, thread safe.
//
// Hooks are called without holding the registry's lock, so a hook may add or remove hooks and two
// pools may run the hooks at once. Each entry counts the calls in progress, and
// remove_reclaim_hook() waits until none is left: once it returns, the hook is neither running nor
// called again, so its captured state (the C API's user_data, Python's ctypes thunk) may be freed.
// A hook that removes itself (or another hook this thread is inside) from within its own call
// does not wait for that call, which has not returned yet: it would wait for itself.
#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "tidepool/errors.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool {

namespace {
struct hook_entry {
  explicit hook_entry(reclaim_hook h) : hook(std::move(h)) {}
  reclaim_hook hook;
  int running = 0;       // calls in progress, on any thread (under the registry's mutex)
  bool removed = false;  // no new call starts
};

struct hook_registry {
  std::mutex mutex;
  std::condition_variable call_finished;
  std::map<int, std::shared_ptr<hook_entry>> hooks;
  int next_id = 1;
};

hook_registry& registry() {
  static hook_registry instance;  // built on first use: safe from static initialization order
  return instance;
}

// The hooks the calling thread is inside now, innermost last (a hook may run the hooks again).
thread_local std::vector<const hook_entry*> calls_on_this_thread;

// Ends one call of `entry` made by this thread (also when the hook threw).
class call_scope {
 public:
  call_scope(hook_registry& r, hook_entry& entry) : r_(r), entry_(entry) { calls_on_this_thread.push_back(&entry); }
  ~call_scope() {
    calls_on_this_thread.pop_back();
    std::lock_guard guard(r_.mutex);
    if (--entry_.running == 0 && entry_.removed) r_.call_finished.notify_all();
  }
  call_scope(const call_scope&) = delete;
  call_scope& operator=(const call_scope&) = delete;

 private:
  hook_registry& r_;
  hook_entry& entry_;
};
}  // namespace

int add_reclaim_hook(reclaim_hook hook) {
  if (!hook) throw error(error_code::invalid_argument, "tidepool: add_reclaim_hook given an empty hook");
  auto entry = std::make_shared<hook_entry>(std::move(hook));
  hook_registry& r = registry();
  std::lock_guard guard(r.mutex);
  const int id = r.next_id++;
  r.hooks.emplace(id, std::move(entry));
  return id;
}

void remove_reclaim_hook(int id) {
  hook_registry& r = registry();
  std::unique_lock lock(r.mutex);
  const auto it = r.hooks.find(id);
  if (it == r.hooks.end()) {
    throw error(error_code::invalid_argument, fmt::format("tidepool: no reclaim hook with id {}", id));
  }
  const std::shared_ptr<hook_entry> entry = it->second;
  r.hooks.erase(it);
  entry->removed = true;
  const auto own_calls = static_cast<int>(std::count(calls_on_this_thread.begin(), calls_on_this_thread.end(), entry.get()));
  r.call_finished.wait(lock, [&] { return entry->running == own_calls; });
}

std::size_t run_reclaim_hooks(int device, std::size_t bytes_needed) {
  hook_registry& r = registry();
  std::vector<std::shared_ptr<hook_entry>> hooks;
  {
    std::lock_guard guard(r.mutex);
    hooks.reserve(r.hooks.size());
    for (const auto& entry : r.hooks) hooks.push_back(entry.second);
  }
  std::size_t reclaimed = 0;
  for (const auto& entry : hooks) {
    {
      std::lock_guard guard(r.mutex);
      if (entry->removed) continue;  // removed since the copy: its owner may have freed its state
      ++entry->running;
    }
    const call_scope scope(r, *entry);
    reclaimed += entry->hook(device, bytes_needed);
  }
  return reclaimed;
}

}  // namespace tidepool
