// compare_allocator.hpp: the allocators the side-by-side benchmark runs (compare_bench.cpp).
// Each one lives in its own source and registers itself, so an allocator whose library is
// absent (PyTorch) is simply not built in, and the benchmark runs the rest.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tidepool::bench {

/// One allocator under test: allocate and free device memory of one device on the default stream.
class compare_allocator {
 public:
  virtual ~compare_allocator() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  /// Called once by each thread before its first call, with the device's primary context already
  /// current on it (gpu_test::make_current): an allocator that keeps a current device of its own
  /// (PyTorch's, which allocates on the runtime's current device) sets it here.
  virtual void enter_thread() {}
  [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
  /// Hands cached memory back, so the next allocator in the run finds the device empty.
  virtual void release_cache() = 0;
  /// tidepool's pool_stats::thread_caches (threads that have a cache of their own now); nothing
  /// for allocators without per-thread caches.
  [[nodiscard]] virtual std::optional<std::size_t> thread_caches() { return std::nullopt; }
};

/// Makes the allocator of device `device` (an ordinal); called with that device's primary context
/// current on the calling thread, which is also current when it is released and destroyed.
using allocator_factory = std::function<std::unique_ptr<compare_allocator>(int device)>;

/// Allocators registered so far, in the order they are run (tidepool first).
std::vector<std::pair<int, allocator_factory>>& allocator_registry();

/// Registers a factory at static initialisation; `order` sorts the columns.
struct register_allocator {
  register_allocator(int order, allocator_factory factory) {
    allocator_registry().emplace_back(order, std::move(factory));
  }
};

/// `tidepool_compare_bench threads [SECONDS]`: every allocator from 1-16 threads on one GPU and
/// (2+ GPUs) spread over two, and a cached pair's latency beside a slow allocation
/// (compare_threads.cpp); SECONDS per point.
int run_thread_comparison(double seconds);

}  // namespace tidepool::bench
