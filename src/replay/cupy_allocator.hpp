// replay/cupy_allocator.hpp: the `cupy` baseline, a model of CuPy's default memory pool
// (cupy/cuda/memory.pyx, SingleDeviceMemoryPool).
//
// Followed from the source: sizes rounded up to 512 B; one arena of free chunks per stream,
// binned by size; a request takes a chunk from the smallest non-empty bin that fits (_get_chunk)
// and splits off any remainder at all (_Chunk.split); when nothing fits, one cudaMalloc of
// exactly the rounded size (_try_malloc), retried after free_all_blocks() on out-of-memory; on
// free, a chunk merges with free neighbours of the same allocation (_Chunk.merge);
// free_all_blocks() frees only chunks that are a whole allocation (no prev, no next).
// Modelled choice: within a bin CuPy pops an arbitrary element of a Python set; here the lowest
// address. What the cudaMalloc'd allocations hold is counted by the H200's rule
// (cuda_malloc_count, exact_allocator.hpp). Left out: memory limits, hooks, the gc.collect() retry.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "replay/exact_allocator.hpp"
#include "replay/node_pool.hpp"
#include "replay/replay_allocator.hpp"

namespace tidepool::replay {

namespace detail {
/// A piece of one cudaMalloc'd allocation (CuPy's _Chunk).
struct cupy_chunk {
  device_address address = 0;
  std::size_t size = 0;
  device_address base = 0;  // the cudaMalloc allocation it belongs to
  stream_t stream = nullptr;
  cupy_chunk* prev = nullptr;
  cupy_chunk* next = nullptr;
  bool in_use = false;
};
/// Orders free chunks by (size, address): the first one not smaller than a request is the
/// chunk of the smallest bin that fits.
struct cupy_by_size {
  bool operator()(const cupy_chunk* a, const cupy_chunk* b) const noexcept {
    return a->size != b->size ? a->size < b->size : a->address < b->address;
  }
};
}  // namespace detail

/// CuPy's MemoryPool on one device.
class cupy_allocator final : public replay_allocator {
 public:
  /// A pool on `device` of `drv`.
  cupy_allocator(std::shared_ptr<driver> drv, int device);
  ~cupy_allocator() override;

  [[nodiscard]] std::string_view name() const noexcept override { return "cupy"; }
  [[nodiscard]] std::optional<device_address> allocate(std::size_t bytes, stream_t stream) override;
  void deallocate(device_address address, std::size_t bytes, stream_t stream) override;
  /// free_all_blocks().
  std::size_t release() override;
  [[nodiscard]] std::size_t held_bytes() const noexcept override { return held_.held(); }

 private:
  using chunk = detail::cupy_chunk;
  using arena = std::set<chunk*, detail::cupy_by_size>;

  chunk* get_chunk(std::size_t size, stream_t stream);
  chunk* try_malloc(std::size_t size, stream_t stream);

  std::shared_ptr<driver> driver_;
  int device_;
  std::map<stream_t, arena> arenas_;
  std::unordered_map<device_address, chunk*> in_use_;
  std::unordered_map<device_address, std::size_t> allocations_;  // base -> bytes asked of the driver
  detail::node_pool<chunk> nodes_;
  cuda_malloc_count held_;
};

}  // namespace tidepool::replay
