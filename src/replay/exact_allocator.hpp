// replay/exact_allocator.hpp: the `exact` baseline, one cudaMalloc per request and one cudaFree
// per free, as a program without any pool does; and the count of what cudaMalloc'd memory holds,
// which the `cupy` baseline shares.
//
// cudaMalloc does not hold exactly what it is asked for. On the H200 (device/sim/cuda_malloc_rule.hpp,
// measured directly: docs/RESULTS.md, section 5) allocations up to 1 MiB share 2 MiB pages,
// floor(2 MiB / size) to a page, and larger ones hold the size rounded up to 2 MiB. Each request
// asks the driver for exactly its size, as the program does: the simulated driver packs it by that
// rule, a real one by its own.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>

#include "replay/replay_allocator.hpp"

namespace tidepool::replay {

/// What live cudaMalloc allocations hold by the H200's rule: each allocation above 1 MiB its
/// size rounded up to 2 MiB, and each 2 MiB page (by address) that holds a live allocation of up
/// to 1 MiB. On sim this is the driver's own figure; on a GPU the allocator's own count.
class cuda_malloc_count {
 public:
  void add(device_address address, std::size_t bytes);
  void remove(device_address address, std::size_t bytes);
  [[nodiscard]] std::size_t held() const noexcept { return held_; }

 private:
  std::unordered_map<device_address, std::size_t> shared_pages_;  // page -> live allocations in it
  std::size_t held_ = 0;
};

/// One driver allocation per request.
class exact_allocator final : public replay_allocator {
 public:
  /// An allocator on `device` of `drv`.
  exact_allocator(std::shared_ptr<driver> drv, int device);
  ~exact_allocator() override;

  [[nodiscard]] std::string_view name() const noexcept override { return "exact"; }
  [[nodiscard]] std::optional<device_address> allocate(std::size_t bytes, stream_t stream) override;
  void deallocate(device_address address, std::size_t bytes, stream_t stream) override;
  /// Nothing is cached: returns 0.
  std::size_t release() override { return 0; }
  [[nodiscard]] std::size_t held_bytes() const noexcept override { return held_.held(); }

 private:
  std::shared_ptr<driver> driver_;
  int device_;
  std::unordered_map<device_address, std::size_t> sizes_;  // live allocation -> bytes asked
  cuda_malloc_count held_;
};

}  // namespace tidepool::replay
