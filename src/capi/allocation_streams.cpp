// The stream of each CuPy allocation on a non-default stream: a hash map under a mutex. Most
// programs allocate on the default stream, which is not stored, so the map is usually empty and
// the free path then takes no lock.
#include "capi/allocation_streams.hpp"

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace tidepool::detail {
namespace {

struct stream_map {
  std::mutex mutex;
  std::unordered_map<void*, stream_t> streams;
  std::atomic<std::size_t> size{0};
};

stream_map& map() {
  // Leaked on purpose, like the pools: CuPy may free during static destruction. Its mutex is held
  // across fork(), so a child never inherits it locked by a thread that was freeing at the time.
  static auto* const instance = [] {
    auto* made = new stream_map();
    (void)::pthread_atfork([] { map().mutex.lock(); }, [] { map().mutex.unlock(); }, [] { map().mutex.unlock(); });
    return made;
  }();
  return *instance;
}

}  // namespace

void remember_allocation_stream(void* ptr, stream_t stream) {
  auto& m = map();
  // A default-stream allocation is not stored, but an entry left by a block that was freed some
  // other way (tidepool_deallocate) at the same address must not outlive it.
  if (stream == nullptr && m.size.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(m.mutex);
  if (stream == nullptr) {
    m.streams.erase(ptr);
  } else {
    m.streams[ptr] = stream;
  }
  m.size.store(m.streams.size(), std::memory_order_release);
}

stream_t take_allocation_stream(void* ptr) {
  auto& m = map();
  if (m.size.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard lock(m.mutex);
  auto it = m.streams.find(ptr);
  if (it == m.streams.end()) return nullptr;
  const stream_t stream = it->second;
  m.streams.erase(it);
  m.size.store(m.streams.size(), std::memory_order_release);
  return stream;
}

void restore_allocation_stream(void* ptr, stream_t stream) { remember_allocation_stream(ptr, stream); }

}  // namespace tidepool::detail
