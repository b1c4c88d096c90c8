// compare_allocator.hpp: the allocators the side-by-side benchmark runs (compare_bench.cpp).
// Each one lives in its own source and registers itself, so an allocator whose library is
// absent (PyTorch) is simply not built in, and the benchmark runs the rest.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tidepool::bench {

/// One allocator under test: allocate and free device memory on the default stream.
class compare_allocator {
 public:
  virtual ~compare_allocator() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
  /// Hands cached memory back, so the next allocator in the run finds the device empty.
  virtual void release_cache() = 0;
};

using allocator_factory = std::function<std::unique_ptr<compare_allocator>()>;

/// Allocators registered so far, in the order they are run (tidepool first).
std::vector<std::pair<int, allocator_factory>>& allocator_registry();

/// Registers a factory at static initialisation; `order` sorts the columns.
struct register_allocator {
  register_allocator(int order, allocator_factory factory) {
    allocator_registry().emplace_back(order, std::move(factory));
  }
};

/// `tidepool_compare_bench threads [SECONDS]`: every allocator from 1-16 threads, and a cached
/// pair's latency beside a slow allocation (compare_threads.cpp); SECONDS per point.
int run_thread_comparison(double seconds);

}  // namespace tidepool::bench
