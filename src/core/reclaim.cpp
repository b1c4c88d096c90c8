// The reclaim hook registry: process-wide, thread safe.
//
// Hooks are called on a copy of the registry taken under the lock, and without holding it, so a
// hook may add or remove hooks, and two pools may run the hooks at once.
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "tidepool/errors.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool {

namespace {
struct hook_registry {
  std::mutex mutex;
  std::map<int, reclaim_hook> hooks;
  int next_id = 1;
};

hook_registry& registry() {
  static hook_registry instance;  // built on first use: safe from static initialization order
  return instance;
}
}  // namespace

int add_reclaim_hook(reclaim_hook hook) {
  if (!hook) throw error(error_code::invalid_argument, "tidepool: add_reclaim_hook given an empty hook");
  hook_registry& r = registry();
  std::lock_guard guard(r.mutex);
  const int id = r.next_id++;
  r.hooks.emplace(id, std::move(hook));
  return id;
}

void remove_reclaim_hook(int id) {
  hook_registry& r = registry();
  std::lock_guard guard(r.mutex);
  if (r.hooks.erase(id) == 0) {
    throw error(error_code::invalid_argument, fmt::format("tidepool: no reclaim hook with id {}", id));
  }
}

std::size_t run_reclaim_hooks(int device, std::size_t bytes_needed) {
  std::vector<reclaim_hook> hooks;
  {
    hook_registry& r = registry();
    std::lock_guard guard(r.mutex);
    hooks.reserve(r.hooks.size());
    for (const auto& entry : r.hooks) hooks.push_back(entry.second);
  }
  std::size_t reclaimed = 0;
  for (const reclaim_hook& hook : hooks) reclaimed += hook(device, bytes_needed);
  return reclaimed;
}

}  // namespace tidepool
