// replay/async_allocator.hpp: the `async` baseline, a model of the CUDA stream-ordered pool
// behind cudaMallocAsync / cudaFreeAsync, with a release threshold.
//
// The driver's pool is closed source, so this models what is documented and observable: one pool
// per device shared by all streams, allocations placed best fit in one reserved address range,
// physical memory mapped in 2 MiB pages as allocations first touch them, freed memory kept mapped
// while the pool holds no more than the release threshold (cudaMemPoolAttrReleaseThreshold),
// and cudaMemPoolTrimTo(0) unmapping every page no live allocation touches. The threshold
// defaults to "never release" (UINT64_MAX), as PyTorch's cudaMallocAsync backend sets it; with
// threshold T, every free trims pages no allocation touches until the pool holds at most T
// (the driver does this at synchronisation points; a replay has none, so every free is one).
// Assumed: sizes rounded to 512 B; reuse across streams at once, also with the GPU behind
// (replay --gpu-lag-ms): by default the driver's pool may make the allocating stream wait for the
// freeing stream's work (cudaMemPoolReuseAllowInternalDependencies) rather than grow, so such a
// free costs ordering, not memory. Its driver time is the modelled cost of those 2 MiB page calls,
// an upper bound of what the real pool spends inside the driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "replay/replay_allocator.hpp"

namespace tidepool::replay {

/// A cudaMallocAsync-like pool on one device.
class async_allocator final : public replay_allocator {
 public:
  /// Never release on free: the threshold PyTorch's cudaMallocAsync backend sets.
  static constexpr std::size_t keep_everything = static_cast<std::size_t>(-1);

  /// A pool on `device` of `drv` that keeps at most `release_threshold` bytes mapped after a free.
  async_allocator(std::shared_ptr<driver> drv, int device, std::size_t release_threshold = keep_everything);
  ~async_allocator() override;

  [[nodiscard]] std::string_view name() const noexcept override { return "async"; }
  [[nodiscard]] std::optional<device_address> allocate(std::size_t bytes, stream_t stream) override;
  void deallocate(device_address address, std::size_t bytes, stream_t stream) override;
  /// cudaMemPoolTrimTo(pool, 0).
  std::size_t release() override { return trim_to(0); }
  [[nodiscard]] std::size_t held_bytes() const noexcept override { return mapped_pages_ * page_size; }

  /// The physical page size of the model.
  static constexpr std::size_t page_size = std::size_t{2} << 20;

 private:
  std::optional<std::pair<device_address, std::size_t>> take_free_range(std::size_t size);
  void give_free_range(device_address address, std::size_t size);
  bool touch_pages(device_address address, std::size_t size);
  void untouch_pages(device_address address, std::size_t size);
  std::size_t trim_to(std::size_t keep_bytes);

  std::shared_ptr<driver> driver_;
  int device_;
  std::size_t threshold_;
  device_address base_ = 0;
  std::size_t range_bytes_ = 0;
  std::map<device_address, std::size_t> free_by_address_;
  std::set<std::pair<std::size_t, device_address>> free_by_size_;
  std::unordered_map<device_address, std::size_t> live_;  // address -> rounded size
  std::vector<std::uint32_t> page_users_;                 // live allocations touching each page
  std::vector<std::optional<physical_handle>> handles_;
  std::size_t mapped_pages_ = 0;
  std::size_t pages_in_use_end_ = 0;  // one past the highest page ever mapped
};

}  // namespace tidepool::replay
