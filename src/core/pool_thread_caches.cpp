// The pool's side of the per-thread caches (thread_cache.hpp): making a thread's cache, lending it
// blocks at their free, taking them back (slow paths, release, describe, sleep, recording, a
// stream forgotten, a thread ending, a pointer named by another thread), and their figures.
// Everything here runs under the pool's lock; a cache's lock is taken inside it.
#include <mutex>
#include <new>

#include "core/pool_impl.hpp"

namespace tidepool::detail {

void pool_impl::end_contention_window() noexcept {
  if (window_contended_ >= contention_window::contended_to_cache &&
      options_.thread_caches == thread_cache_policy::when_contended) {
    caching_threads_ = true;
  }
  window_calls_ = 0;
  window_contended_ = 0;
}

void pool_impl::give_this_thread_a_cache() {
  if (!caches_allowed() || thread_cache_for(id_) != nullptr) return;
  // A cache is optional: a thread that cannot have one (no heap left, caches for four other pools
  // already, or ending) goes on through the lock, and the call that asked fails for nothing.
  try {
    caches_.reserve(caches_.size() + 1);  // so that the push below cannot fail once the thread has it
    std::shared_ptr<thread_cache> cache = add_thread_cache(id_, link_);
    if (!cache) return;
    caches_.push_back(std::move(cache));
  } catch (const std::bad_alloc&) {
    return;
  }
  has_thread_caches_.store(true, std::memory_order_relaxed);
}

bool pool_impl::lend(block* b, stream_t stream, stream_state& s) {
  if (b->size > thread_cache::max_block || s.retired || !caches_allowed()) return false;
  thread_cache* c = thread_cache_for(id_);
  if (c == nullptr) return false;
  std::lock_guard cache_guard(c->lock());
  // Full: blocks waiting there make room, in the order they sit (handed-out ones stay).
  for (std::size_t i = 0; i < c->count() && !c->has_room(b->size);) {
    if (c->at(i).handed_out) {
      ++i;
    } else {
      take_back_entry(*c, i);
    }
  }
  if (!c->has_room(b->size)) return false;
  lent_block e;
  e.lent = b;
  e.address = b->address;
  e.size = b->size;
  e.where = b->owner_arena;
  e.stream = cache_stream_key(stream);
  c->add(e);
  // The program freed it: it leaves in use; it stays live on its stream (which keeps its slot).
  in_use_ -= b->size;
  requested_ -= b->requested;
  ++deallocations_;
  lent_bytes_ += b->size;
  ++lent_count_;
  b->state = block_state::lent;
  b->lent_to = c;
  return true;
}

void pool_impl::take_back_entry(thread_cache& c, std::size_t i) {
  const lent_block e = c.at(i);
  block* b = e.lent;
  c.remove(i);
  lent_bytes_ -= e.size;
  --lent_count_;
  b->lent_to = nullptr;
  if (e.handed_out) {
    b->state = block_state::live;
    b->requested = e.requested;
    in_use_ += e.size;
    requested_ += e.requested;
    return;
  }
  // Waiting in the cache: freed on its stream now, as a deallocate there would have (no event is
  // recorded: this may run on another thread, and the stream may be gone; its next call records
  // one, and release() waits for the device).
  stream_state& s = streams_.at(b->owner);
  --s.live;
  live_.erase(b->address);
  const std::uint64_t sequence = ++free_sequence_;
  s.last_free = sequence;
  b->owner_arena->give_back(b, free_slot(s, sequence), sequence, tick_);
}

void pool_impl::take_back_lent(bool handed_out_too, std::uint32_t only) {
  if (lent_count_ == 0) return;
  for (const auto& c : caches_) {
    std::lock_guard cache_guard(c->lock());
    for (std::size_t i = 0; i < c->count();) {
      const lent_block& e = c->at(i);
      if ((e.handed_out && !handed_out_too) || (only != 0 && e.lent->owner != only)) {
        ++i;
      } else {
        take_back_entry(*c, i);
      }
    }
  }
}

void pool_impl::take_back_handed_out(block* b, const char* operation, const void* ptr) {
  thread_cache& c = *b->lent_to;
  {
    std::lock_guard cache_guard(c.lock());
    for (std::size_t i = 0; i < c.count(); ++i) {
      if (c.at(i).lent != b || !c.at(i).handed_out) continue;
      take_back_entry(c, i);
      return;
    }
  }
  throw_bad_pointer(operation, ptr);  // waiting in the cache: freed already (it names it so)
}

bool pool_impl::handed_out(const block& b, std::size_t* requested) {
  thread_cache& c = *b.lent_to;
  std::lock_guard cache_guard(c.lock());
  for (std::size_t i = 0; i < c.count(); ++i) {
    if (c.at(i).lent != &b) continue;
    if (requested != nullptr) *requested = c.at(i).requested;
    return c.at(i).handed_out;
  }
  return false;
}

void pool_impl::take_back_cache(thread_cache& cache) {
  std::lock_guard guard(lock_);
  {
    std::lock_guard cache_guard(cache.lock());
    while (cache.count() != 0) take_back_entry(cache, cache.count() - 1);
    const thread_cache::figures f = cache.counts();
    allocations_ += f.allocations;
    deallocations_ += f.deallocations;
  }
  std::erase_if(caches_, [&](const std::shared_ptr<thread_cache>& c) { return c.get() == &cache; });
  has_thread_caches_.store(!caches_.empty(), std::memory_order_relaxed);
}

void pool_impl::add_cache_figures(pool_stats& s) {
  s.thread_caches = caches_.size();
  for (const auto& c : caches_) {
    std::lock_guard cache_guard(c->lock());
    const thread_cache::figures f = c->counts();
    s.in_use_bytes += f.out_bytes;
    s.requested_bytes += f.out_requested;
    s.live_allocations += f.out_count;
    s.allocations += f.allocations;
    s.deallocations += f.deallocations;
  }
}

}  // namespace tidepool::detail
