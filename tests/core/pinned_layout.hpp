// Layouts whose live blocks pin parts of large handles, and the 2 MiB granules live blocks touch:
// what compaction (pool::compact) and a wake after sleep (pool::sleep) leave held.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "pool_checker.hpp"

namespace tidepool::testing {

/// A live block as the test allocated it.
struct live_block {
  void* ptr = nullptr;
  std::size_t bytes = 0;
};

// Blocks from 1 KiB to 24 MiB (log-uniform, some persistent), about half of them freed in random
// order, the GPU idle: the live ones then pin parts of large handles, as a training loop's
// optimizer state does beside freed gradients.
inline std::vector<live_block> pinned_layout(pool_checker& checker, std::uint64_t seed, int count = 160) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(std::log(1024.0), std::log(24.0 * MiB));
  std::vector<live_block> blocks;
  for (int i = 0; i < count; ++i) {
    const auto bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
    const lifetime hint = rng() % 8 == 0 ? lifetime::persistent : lifetime::scratch;
    blocks.push_back({checker.allocate(bytes, nullptr, hint), bytes});
  }
  std::shuffle(blocks.begin(), blocks.end(), rng);
  const std::size_t freed = blocks.size() / 2;
  for (std::size_t i = 0; i < freed; ++i) checker.free(blocks[i].ptr);
  blocks.erase(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(freed));
  return blocks;
}

// The bytes of the granules live blocks touch (each block as placed: its size rounded to 512).
inline std::size_t touched_granule_bytes(const std::vector<live_block>& blocks) {
  constexpr std::size_t granule = 2 * MiB;
  std::set<std::uintptr_t> granules;
  for (const live_block& b : blocks) {
    const auto from = reinterpret_cast<std::uintptr_t>(b.ptr);
    const std::uintptr_t to = from + (b.bytes + 511) / 512 * 512;
    for (std::uintptr_t g = from / granule; g <= (to - 1) / granule; ++g) granules.insert(g);
  }
  return granules.size() * granule;
}

}  // namespace tidepool::testing
