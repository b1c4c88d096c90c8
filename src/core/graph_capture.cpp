// CUDA graph captures: the memory a graph's kernels write to stays the graph's while it lives.
//
// An allocation on a stream being captured (the driver's capture_of, asked on every allocation of
// a stream other than the legacy default stream, which cannot be captured) is served through a
// stream state of the capture's own, one per (capture, stream): a slot in every arena like any
// stream's. Its blocks freed, during the capture or after it and on whatever stream the free
// names, go back to that slot, where only later allocations of the same capture on the same
// stream find them (the graph orders its own work on a stream, as a stream does), never other
// work and never release(): the graph's launches write there. Such a state records no event (an
// event recorded in a capture cannot be queried afterwards) and is left out of device-wide waits.
// When the driver says the graph is gone, its free blocks become free for every stream (its
// launches are done by then), its live blocks free as any stream's, and the state keeps its slot
// until it holds nothing. Where the driver cannot watch the graph, its memory stays kept for it
// until the pool is destroyed: nothing is ever handed out under a graph that may still launch.
// This is what PyTorch's allocator does with a graph's private pool, which PyTorch's pluggable
// allocator interface does not pass on (tidepool.torch.use()).
//
// Captures made under a graph pool (tidepool/graph_pool.hpp; the one given to the capture itself,
// else the thread's current one when a capture first allocates on a stream, else the process's
// default) share one state per stream instead, as PyTorch's captures given one `pool=` share its
// memory: one capture's frees serve the next, and the state is kept while any of their graphs
// lives.
#include "core/graph_capture.hpp"

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "core/pool_impl.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/graph_pool.hpp"

namespace tidepool {
namespace {

std::atomic<std::uint64_t> graph_pools_made{0};
std::atomic<std::uint64_t> default_graph_pool_id{0};
thread_local std::uint64_t current_graph_pool_id = 0;

// Captures given a graph pool of their own (set_capture_graph_pool): capture id -> graph pool id.
// Read at a capture's first allocation on a stream, a slow path; `capture_pools_count` spares
// programs that never call it the mutex.
std::mutex capture_pools_mutex;
std::atomic<std::size_t> capture_pools_count{0};
// Leaked: allocations may still be made while the process exits.
std::unordered_map<std::uint64_t, std::uint64_t>& capture_pools() {
  static auto* const pools = new std::unordered_map<std::uint64_t, std::uint64_t>();
  return *pools;
}

void check_made(std::uint64_t id) {
  if (id > graph_pools_made.load(std::memory_order_relaxed)) {
    throw error(error_code::invalid_argument,
                fmt::format("graph pool {} was never made (new_graph_pool)", id));
  }
}

}  // namespace

std::uint64_t new_graph_pool() noexcept {
  return graph_pools_made.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::uint64_t current_graph_pool() noexcept {
  return current_graph_pool_id;
}

std::uint64_t set_current_graph_pool(std::uint64_t id) {
  check_made(id);
  const std::uint64_t previous = current_graph_pool_id;
  current_graph_pool_id = id;
  return previous;
}

std::uint64_t default_graph_pool() noexcept {
  return default_graph_pool_id.load(std::memory_order_acquire);
}

std::uint64_t set_default_graph_pool(std::uint64_t id) {
  check_made(id);
  return default_graph_pool_id.exchange(id, std::memory_order_acq_rel);
}

void set_capture_graph_pool(std::uint64_t capture_id, std::uint64_t id) {
  check_made(id);
  if (capture_id == 0) throw error(error_code::invalid_argument, "capture id 0 names no capture");
  std::lock_guard guard(capture_pools_mutex);
  auto& pools = capture_pools();
  if (id == 0) {
    pools.erase(capture_id);
  } else {
    pools[capture_id] = id;
  }
  capture_pools_count.store(pools.size(), std::memory_order_release);
}

std::uint64_t capture_graph_pool(std::uint64_t capture_id) noexcept {
  if (capture_pools_count.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard guard(capture_pools_mutex);
  const auto& pools = capture_pools();
  const auto found = pools.find(capture_id);
  return found != pools.end() ? found->second : 0;
}

}  // namespace tidepool

namespace tidepool::detail {

std::uint64_t graph_pool_key_for(std::uint64_t capture_id) noexcept {
  std::uint64_t id = capture_graph_pool(capture_id);
  if (id == 0) id = current_graph_pool_id != 0 ? current_graph_pool_id : default_graph_pool();
  return id == 0 ? 0 : graph_pool_key(id);
}

bool pool_impl::captured_now(stream_t stream, stream_capture& capture) {
  if (driver_->capture_of(device_, stream, &capture) != driver_status::success) return false;
  return capture.active;
}

stream_state& pool_impl::capture_state(stream_t stream, const stream_capture& capture) {
  if (stream_state* s = streams_.find_capture(capture.id, stream)) return *s;
  // First allocation of this capture on this stream: its own state, or its graph pool's.
  const std::uint64_t shared = graph_pool_key_for(capture.id);
  stream_state* s = shared != 0 ? streams_.find_capture(shared, stream) : nullptr;
  if (s == nullptr) {
    // No device check here: the driver refuses to say a captured stream's device, and the
    // refusal invalidates the capture (H200, driver 580). The stream is alive: it answered
    // capture_of.
    s = &streams_.add_capture(shared != 0 ? shared : capture.id, stream);
    for (auto& a : arenas_) a->ensure_slots(streams_.slot_count());
    s->record_due = false;
    ++s->holds;  // kept while a graph of it may launch, whatever it holds
  }
  if (shared != 0) streams_.alias_capture(capture.id, stream, *s);
  watch_graph_of(*s, capture);
  return *s;
}

void pool_impl::watch_graph_of(stream_state& s, const stream_capture& capture) {
  auto* watch = new graph_watch;
  watch->owners.store(2, std::memory_order_relaxed);
  if (driver_->watch_graph(device_, capture.graph, &graph_watch::on_gone, watch) !=
      driver_status::success) {
    // No callback will come: the state is kept until the pool goes.
    watch->owners.store(1, std::memory_order_relaxed);
  }
  watch->next = s.graph;
  s.graph = watch;
  ++graphs_kept_;
}

bool pool_impl::kept_for_graph(stream_state& s) {
  if (s.capture == 0 || s.graph == nullptr) return false;
  for (graph_watch** link = &s.graph; *link != nullptr;) {
    graph_watch* watch = *link;
    if (!watch->gone.load(std::memory_order_acquire)) {
      link = &watch->next;
      continue;
    }
    *link = watch->next;
    watch->drop();
    --graphs_kept_;
  }
  if (s.graph != nullptr) return true;
  // Every graph is gone, and with it every launch: what they freed is free for every stream.
  s.completed = std::max(s.completed, s.last_free);
  give_back_parked(s);  // to slot 0, now that its free is complete
  for (auto& a : arenas_) a->make_global(s.slot, s.completed);
  streams_.retire(s);
  --s.holds;
  return false;
}

std::size_t pool_impl::graph_kept_bytes() {
  std::size_t bytes = 0;
  streams_.for_each([&](stream_state& s) {
    if (!kept_for_graph(s)) return;
    for (const auto& a : arenas_) bytes += a->free_bytes(s.slot);
    if (s.parked != nullptr) bytes += s.parked->size;
  });
  return bytes;
}

void pool_impl::let_go_of_graphs() noexcept {
  streams_.for_each([](stream_state& s) {
    while (s.graph != nullptr) {
      graph_watch* watch = s.graph;
      s.graph = watch->next;
      watch->drop();
    }
  });
}

}  // namespace tidepool::detail
