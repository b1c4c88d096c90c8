// What says when a CUDA graph that the pool keeps memory for is gone.
//
// A pool that follows graph captures (pool_options::follow_graph_captures) gives each capture, on
// each of its streams, a stream state of its own (graph_capture.cpp): what is allocated in the
// capture is the graph's, since its kernels write there at every launch. The driver says when the
// graph is gone (a CUDA user object the graph owns, whose destructor runs on a thread of the
// driver's own once the graph, every executable graph made from it and their launches are done),
// by setting `gone` here. The pool and the driver each own the watch; whichever lets go last
// frees it, since the driver may outlive the pool and the pool the driver's callback.
//
// Captures made under one graph pool (tidepool/graph_pool.hpp) share a state per stream, keyed by
// graph_pool_key(id) where a lone capture's is keyed by its capture id; the state keeps a list of
// watches, one per capture that allocated through it, and is kept while any of them lives.
#pragma once

#include <atomic>
#include <cstdint>

namespace tidepool::detail {

struct graph_watch {
  std::atomic<bool> gone{false};
  std::atomic<int> owners{1};
  /// The next watch of the same stream state: the pool's list, touched under the pool's lock only.
  graph_watch* next = nullptr;

  /// The driver's callback (driver::watch_graph): the graph is gone. Makes no driver call.
  static void on_gone(void* self) noexcept {
    auto* watch = static_cast<graph_watch*>(self);
    watch->gone.store(true, std::memory_order_release);
    watch->drop();
  }
  /// One owner lets go; the last one frees the watch.
  void drop() noexcept {
    if (owners.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

/// The key of graph pool `id`'s states. The driver numbers captures from 1 up, so a key with the
/// top bit set never names a capture.
constexpr std::uint64_t graph_pool_key(std::uint64_t id) noexcept {
  return id | (std::uint64_t{1} << 63);
}

/// The key of the graph pool capture `capture_id` joins at an allocation the calling thread makes:
/// the one given to the capture (tidepool::set_capture_graph_pool), else the thread's current one
/// (tidepool::current_graph_pool), else the default one (tidepool::default_graph_pool), or 0.
[[nodiscard]] std::uint64_t graph_pool_key_for(std::uint64_t capture_id) noexcept;

}  // namespace tidepool::detail
