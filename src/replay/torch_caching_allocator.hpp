// replay/torch_caching_allocator.hpp: the `caching` and `expandable` baselines, a model of
// PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator)
// with its default settings, without and with expandable segments.
//
// Followed from the source: sizes rounded up to 512 B; requests up to 1 MiB served from the
// small pool, larger ones from the large pool; free blocks kept per pool in a set ordered by
// (stream, size, address) and chosen best fit on the same stream; a new segment of 2 MiB (small),
// 20 MiB (1 to 10 MiB requests) or the size rounded up to 2 MiB (larger) from cudaMalloc when
// nothing fits; a block split when at least 512 B remain (small pool) or more than 1 MiB remains
// (large pool); neighbours merged on free; on out-of-memory all unsplit free segments freed and
// the allocation retried; empty_cache() frees unsplit free segments only.
// With expandable segments: one segment per pool and stream, a reserved range grown by mapping
// 2 MiB (small) or 20 MiB (large) pages at the lowest address where the request fits, blocks
// split whenever at least 512 B remain, and empty_cache() unmapping every free whole page.
// A free on another stream than the allocation's is what PyTorch sees as Tensor.record_stream() on
// that stream and then the free: the block waits for an event recorded on the freeing stream
// (insert_events), each allocation first takes back the blocks whose events completed, in each
// stream's order (process_events), and empty_cache() and the out-of-memory retry first wait for
// every event (synchronize_and_free_events). With the GPU behind (replay --gpu-lag-ms) such a block
// is the program's again only once the freeing stream's work is done, as on a GPU.
// Left out: CUDA graph pools, max_split_size, roundup_power2_divisions and garbage collection (all
// off by default), memory fraction limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "replay/expandable_segment.hpp"
#include "replay/node_pool.hpp"
#include "replay/replay_allocator.hpp"

namespace tidepool::replay {

namespace detail {
struct torch_block_pool;

/// One block of a segment, free or allocated (PyTorch's Block).
struct torch_block {
  stream_t stream = nullptr;
  std::size_t size = 0;
  device_address address = 0;
  torch_block_pool* pool = nullptr;
  torch_block* prev = nullptr;  // neighbours in the same segment
  torch_block* next = nullptr;
  expandable_segment* segment = nullptr;  // set in expandable mode
  bool allocated = false;
  bool mapped = true;  // false: address range of an expandable segment with no pages behind it

  [[nodiscard]] bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
};

/// Orders free blocks by (stream, size, address): lower_bound is PyTorch's best fit.
struct torch_by_size {
  bool operator()(const torch_block* a, const torch_block* b) const noexcept;
};
/// Orders unmapped ranges by (stream, address).
struct torch_by_address {
  bool operator()(const torch_block* a, const torch_block* b) const noexcept;
};

/// A pool of free blocks (PyTorch's BlockPool): the small one or the large one.
struct torch_block_pool {
  explicit torch_block_pool(bool small) : is_small(small) {}
  std::set<torch_block*, torch_by_size> blocks;
  std::set<torch_block*, torch_by_address> unmapped;
  bool is_small;
};
}  // namespace detail

/// PyTorch's caching allocator, default policy (expandable = false) or expandable segments.
class torch_caching_allocator final : public replay_allocator {
 public:
  /// An allocator on `device` of `drv`; `expandable` selects expandable segments.
  torch_caching_allocator(std::shared_ptr<driver> drv, int device, bool expandable);
  ~torch_caching_allocator() override;

  [[nodiscard]] std::string_view name() const noexcept override { return expandable_ ? "expandable" : "caching"; }
  [[nodiscard]] std::optional<device_address> allocate(std::size_t bytes, stream_t stream) override;
  void deallocate(device_address address, std::size_t bytes, stream_t stream) override;
  /// torch.cuda.empty_cache().
  std::size_t release() override;
  [[nodiscard]] std::size_t held_bytes() const noexcept override { return reserved_; }

  /// PyTorch's round_size(): at least 512 B, a multiple of 512 B.
  [[nodiscard]] static std::size_t round_size(std::size_t bytes) noexcept;
  /// PyTorch's get_allocation_size(): the cudaMalloc segment for a rounded request.
  [[nodiscard]] static std::size_t segment_size(std::size_t rounded) noexcept;

 private:
  using block = detail::torch_block;
  using block_pool = detail::torch_block_pool;

  block* get_free_block(block_pool& pool, stream_t stream, std::size_t size);
  block* alloc_segment(block_pool& pool, stream_t stream, std::size_t size);
  block* alloc_expandable(block_pool& pool, stream_t stream, std::size_t size);
  block* find_expandable_block(block_pool& pool, stream_t stream, std::size_t size);
  bool map_block(block* to_map, std::size_t size);
  void unmap_block(block* b);
  bool should_split(const block* b, std::size_t size) const noexcept;
  block* split_and_take(block* b, std::size_t size);
  // A new block of [address, address + size) right before / after `b` in its segment (same
  // stream, pool and segment), linked in address order; mapped unless the caller says otherwise.
  block* make_neighbour_before(block* b, device_address address, std::size_t size);
  block* make_neighbour_after(block* b, device_address address, std::size_t size);
  void free_block(block* b);
  std::size_t try_merge(block* dst, block* src);
  void release_pool(block_pool& pool);
  void release_segment(block* b);
  void release_expandable_segment(block* b);
  // record_stream: insert_events() holds `b` for an event on `stream`; process_events() frees the
  // blocks whose events completed; synchronize_and_free_events() waits for all of them.
  struct pending_free {
    event_t event = nullptr;
    block* freed = nullptr;
  };
  void insert_events(block* b, stream_t stream);
  void process_events();
  void synchronize_and_free_events();
  // A waiting block whose event completed: the event back to the spares, the block to its pool.
  void complete(const pending_free& p);
  event_t take_event();

  std::shared_ptr<driver> driver_;
  int device_;
  bool expandable_;
  block_pool small_{true};
  block_pool large_{false};
  std::unordered_map<device_address, block*> active_;
  std::vector<std::unique_ptr<detail::expandable_segment>> segments_;
  detail::node_pool<block> nodes_;
  std::size_t reserved_ = 0;  // PyTorch's reserved_bytes: cudaMalloc'd or mapped
  // Blocks freed on another stream, waiting for their event, by freeing stream (PyTorch's
  // cuda_events), each stream's in the order freed; and the events free for reuse (its EventPool).
  std::map<std::uintptr_t, std::deque<pending_free>> pending_;
  std::vector<event_t> spare_events_;
};

}  // namespace tidepool::replay
