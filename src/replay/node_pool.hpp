// replay/node_pool.hpp: a free list of fixed-size nodes for the baselines' block records, so
// splitting and merging blocks costs no heap call (as PyTorch's and CuPy's own block objects are
// cheap to them) and every node goes away with its allocator.
#pragma once

#include <deque>
#include <utility>
#include <vector>

namespace tidepool::replay::detail {

/// Hands out T nodes and takes them back; nodes live as long as the pool.
template <typename T>
class node_pool {
 public:
  /// A node constructed from `args` (a recycled one when there is one).
  template <typename... Args>
  T* make(Args&&... args) {
    if (!free_.empty()) {
      T* node = free_.back();
      free_.pop_back();
      *node = T{std::forward<Args>(args)...};
      return node;
    }
    return &nodes_.emplace_back(T{std::forward<Args>(args)...});
  }
  /// Gives `node` back for reuse.
  void recycle(T* node) { free_.push_back(node); }

 private:
  std::deque<T> nodes_;  // a deque never moves its elements
  std::vector<T*> free_;
};

}  // namespace tidepool::replay::detail
