// fork() and the pools (fork_safety.hpp): a list of every live pool under a mutex, and
// pthread_atfork handlers that take the mutex and then each pool's locks (pool_impl::lock_for_fork:
// the pool's, then its thread caches'). No thread holds two pools' locks at once, so their order
// does not matter; the list's mutex is taken only to add or drop a pool, never under a pool's
// lock. No allocation in the handlers. The child also closes the pools' kept exports of their
// handles (memory shared with other processes), which would pin the memory there.
#include "core/fork_safety.hpp"

#include <pthread.h>

#include <mutex>
#include <vector>

#include "core/pool_impl.hpp"

namespace tidepool::detail {
namespace {

struct pool_list {
  std::mutex mutex;
  std::vector<pool_impl*> pools;
};

pool_list& live_pools() {
  static auto* const list = new pool_list();  // leaked on purpose: pools may go during exit
  return *list;
}

void lock_every_pool() noexcept {
  pool_list& list = live_pools();
  list.mutex.lock();
  for (pool_impl* p : list.pools) p->lock_for_fork();
}

void unlock_every_pool() noexcept {
  pool_list& list = live_pools();
  for (pool_impl* p : list.pools) p->unlock_after_fork();
  list.mutex.unlock();
}

void unlock_every_pool_in_child() noexcept {
  pool_list& list = live_pools();
  for (pool_impl* p : list.pools) p->unlock_in_forked_child();
  list.mutex.unlock();
}

}  // namespace

void install_pool_fork_handlers() {
  static const bool installed = [] {
    (void)live_pools();  // made before any handler can run
    return ::pthread_atfork(&lock_every_pool, &unlock_every_pool, &unlock_every_pool_in_child) == 0;
  }();
  (void)installed;
}

void note_pool_made(pool_impl& made) {
  install_pool_fork_handlers();
  pool_list& list = live_pools();
  std::lock_guard guard(list.mutex);
  list.pools.push_back(&made);
}

void note_pool_gone(pool_impl& gone) noexcept {
  pool_list& list = live_pools();
  std::lock_guard guard(list.mutex);
  std::erase(list.pools, &gone);
}

}  // namespace tidepool::detail
