// The thread's side of the per-thread caches (thread_cache.hpp): the slots the fast path reads,
// and the list that hands every cache back to its pool when the thread ends.
#include "core/thread_cache.hpp"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "core/pool_impl.hpp"

namespace tidepool::detail {

constinit thread_local thread_cache_slots this_thread_caches;

namespace {

// Owns the calling thread's caches. Touched only when a cache is made (a slow path), so the fast
// path never pays for its guard; its destructor runs when the thread ends.
class thread_cache_owner {
 public:
  thread_cache_owner() = default;
  thread_cache_owner(const thread_cache_owner&) = delete;
  thread_cache_owner& operator=(const thread_cache_owner&) = delete;
  ~thread_cache_owner() {
    thread_cache_slots& t = this_thread_caches;
    t.exiting = true;  // a free during the rest of the thread's exit takes the locked path
    t.pool_ids.fill(0);
    t.caches.fill(nullptr);
    for (owned& o : owned_) {
      // The pool may be going away on another thread: its destructor clears the link under the
      // link's mutex, so the pool is alive for as long as we hold it and find it set.
      std::lock_guard guard(o.link->mutex);
      if (pool_impl* pool = o.link->pool.load(std::memory_order_relaxed)) pool->take_back_cache(*o.cache);
    }
  }

  std::shared_ptr<thread_cache> add(std::uint64_t pool_id, const std::shared_ptr<pool_link>& link) {
    thread_cache_slots& t = this_thread_caches;
    std::size_t slot = thread_cache_slots::pools;
    for (std::size_t i = 0; i < thread_cache_slots::pools && slot == thread_cache_slots::pools; ++i) {
      if (t.pool_ids[i] == 0) slot = i;
    }
    if (slot == thread_cache_slots::pools) slot = drop_dead_pools();
    if (slot == thread_cache_slots::pools) return nullptr;
    auto cache = std::make_shared<thread_cache>();
    owned_.push_back({pool_id, link, cache});
    t.pool_ids[slot] = pool_id;
    t.caches[slot] = cache.get();
    return cache;
  }

 private:
  struct owned {
    std::uint64_t pool_id = 0;
    std::shared_ptr<pool_link> link;
    std::shared_ptr<thread_cache> cache;
  };
  // Frees the slots of pools destroyed since (their caches went with them); returns a free slot,
  // or `pools` if none.
  std::size_t drop_dead_pools() {
    thread_cache_slots& t = this_thread_caches;
    std::size_t free_slot = thread_cache_slots::pools;
    const bool any_dead = std::any_of(owned_.begin(), owned_.end(), [](const owned& o) {
      return o.link->pool.load(std::memory_order_acquire) == nullptr;
    });
    if (!any_dead) return free_slot;  // a thread with caches for four live pools: no allocation here
    std::vector<owned> alive;
    for (owned& o : owned_) {
      if (o.link->pool.load(std::memory_order_acquire) != nullptr) {
        alive.push_back(std::move(o));
        continue;
      }
      for (std::size_t i = 0; i < thread_cache_slots::pools; ++i) {
        if (t.pool_ids[i] != o.pool_id) continue;
        t.pool_ids[i] = 0;
        t.caches[i] = nullptr;
        free_slot = i;
      }
    }
    owned_ = std::move(alive);
    return free_slot;
  }

  std::vector<owned> owned_;
};

}  // namespace

std::shared_ptr<thread_cache> add_thread_cache(std::uint64_t pool_id, const std::shared_ptr<pool_link>& link) {
  if (this_thread_caches.exiting) return nullptr;
  thread_local thread_cache_owner owner;
  return owner.add(pool_id, link);
}

std::uint64_t next_pool_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tidepool::detail
