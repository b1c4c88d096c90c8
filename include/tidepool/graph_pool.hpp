// tidepool/graph_pool.hpp: CUDA graph captures that share one memory, as PyTorch's
// torch.cuda.graph(pool=...) does.
//
// A pool that follows graph captures (pool_options::follow_graph_captures) keeps what a capture
// allocates for that graph alone while it lives, so a program that captures one graph per batch
// size (an inference server) holds the sum of their intermediates. Captures made under one graph
// pool share instead: what one capture freed (its intermediates, or an output the program let go)
// serves the next capture on the same stream, and the memory stays kept for them until every
// graph of the pool is gone. Like PyTorch's shared pools, this is safe when the graphs of one pool
// run one after another (replayed in one stream's order), never two at once.
//
//   const std::uint64_t shared = tidepool::new_graph_pool();
//   for (int batch : sizes) {
//     tidepool::graph_pool_scope scope(shared);   // this thread's captures join `shared`
//     cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
//     ... allocate from the pool on `stream`, launch, free ...
//     cudaStreamEndCapture(stream, &graphs[batch]);
//   }
//
// A capture joins the graph pool given to it (set_capture_graph_pool), else the one current on the
// thread that makes its first allocation on a stream, else the process's default graph pool
// (set_default_graph_pool: for threads the program does not run, such as PyTorch's autograd
// threads, which run a captured backward pass); the choice holds for the rest of that capture on
// that stream. Giving the capture its pool is exact where captures on several threads overlap: a
// default serves one of them only. Ids are process-wide: one id serves
// the pools of every device (each keeps its own memory for it).
#pragma once

#include <cstdint>

#include "tidepool/export.h"

namespace tidepool {

/// A new graph pool's id, never 0 and never given out before. Holds no memory until a capture
/// made under it allocates.
TIDEPOOL_API std::uint64_t new_graph_pool() noexcept;

/// The graph pool that captures made on the calling thread join now (0: none, each capture keeps
/// memory of its own).
TIDEPOOL_API std::uint64_t current_graph_pool() noexcept;

/// Makes `id` (from new_graph_pool, or 0 for none) the calling thread's current graph pool and
/// returns the one it replaces. Throws tidepool::error (invalid_argument) for an id that
/// new_graph_pool never gave out, leaving the current one as it was.
TIDEPOOL_API std::uint64_t set_current_graph_pool(std::uint64_t id);

/// The graph pool that captures join on threads with none current (0: none).
TIDEPOOL_API std::uint64_t default_graph_pool() noexcept;

/// Makes `id` (from new_graph_pool, or 0 for none) the default graph pool, for every thread with
/// none current, and returns the one it replaces. Throws tidepool::error (invalid_argument) for
/// an id that new_graph_pool never gave out, leaving the default as it was.
TIDEPOOL_API std::uint64_t set_default_graph_pool(std::uint64_t id);

/// Makes every allocation of capture `capture_id` (the driver's number of a stream capture, the
/// same on every stream joined to it: C's tidepool_set_capture_graph_pool finds it from a stream)
/// join graph pool `id`, whatever thread makes it, ahead of the thread's current and the default
/// graph pool; 0 forgets the capture (do so once it ended: ids are not reused, entries are kept
/// until then). Throws tidepool::error (invalid_argument) for capture id 0 or an id that
/// new_graph_pool never gave out, changing nothing.
TIDEPOOL_API void set_capture_graph_pool(std::uint64_t capture_id, std::uint64_t id);

/// The graph pool given to capture `capture_id` (0: none).
[[nodiscard]] TIDEPOOL_API std::uint64_t capture_graph_pool(std::uint64_t capture_id) noexcept;

/// Makes a graph pool current on the calling thread for the scope's life, then restores the one
/// it replaced. Scopes nest.
class graph_pool_scope {
 public:
  /// Throws tidepool::error (invalid_argument) as set_current_graph_pool does.
  explicit graph_pool_scope(std::uint64_t id) : previous_(set_current_graph_pool(id)) {}
  ~graph_pool_scope() { (void)set_current_graph_pool(previous_); }
  graph_pool_scope(const graph_pool_scope&) = delete;
  graph_pool_scope& operator=(const graph_pool_scope&) = delete;

 private:
  std::uint64_t previous_;
};

}  // namespace tidepool
