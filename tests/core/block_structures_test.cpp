// The core's two hot data structures on their own: the free index (size classes, best fit)
// and the address map (open addressing with backward-shift deletion), against simple references.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/address_map.hpp"
#include "core/block.hpp"
#include "core/free_index.hpp"

namespace tidepool::detail {
namespace {

TEST(FreeIndex, FindsAFitNeverSmallAndNearlyBest) {
  block_slab slab;
  free_index index;
  std::mt19937_64 rng(3);
  std::multiset<std::size_t> reference;
  std::vector<block*> blocks;
  for (int i = 0; i < 2000; ++i) {
    block* b = slab.make();
    b->size = (1 + rng() % (1u << 20)) * 512;
    index.insert(b);
    reference.insert(b->size);
    blocks.push_back(b);
  }
  for (int i = 0; i < 2000; ++i) {
    const std::size_t want = (1 + rng() % (1u << 20)) * 512;
    const block* found = index.find(want);
    auto best = reference.lower_bound(want);
    if (best == reference.end()) {
      EXPECT_EQ(found, nullptr);
      continue;
    }
    ASSERT_NE(found, nullptr);
    EXPECT_GE(found->size, want);
    // Within the best fit's size class: at most 1/64 larger, plus one class step.
    EXPECT_LE(found->size, *best + *best / 64 + 512);
  }
  for (block* b : blocks) index.remove(b);
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.bytes(), 0u);
}

TEST(FreeIndex, ExactFitsComeFirst) {
  block_slab slab;
  free_index index;
  block* big = slab.make();
  big->size = 64 << 20;
  block* exact = slab.make();
  exact->size = 3 << 20;
  index.insert(big);
  index.insert(exact);
  EXPECT_EQ(index.find(3 << 20), exact);
  EXPECT_EQ(index.find((3 << 20) + 512), big);
  EXPECT_EQ(index.highest_nonempty(), free_index::bin_of(64 << 20));
}

// Which block serves a request must not depend on the order blocks were freed in: the smallest
// that fits, in the request's class or the next non-empty one, the lowest address among equals
// (exact fits included).
// (Taking the head of the next class, the block freed last, made a trace replayed pass after pass
// lay out differently each pass.)
TEST(FreeIndex, TheSmallestOfTheNextClassAndTheLowestAddressAmongEquals) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  const std::size_t want = 400 * MiB;  // its class holds 400-404 MiB; the next, 404-408
  const std::size_t sizes[] = {446 * MiB, 407 * MiB, 405 * MiB, 407 * MiB, 405 * MiB};
  const device_address addresses[] = {0x5000, 0x4000, 0x3000, 0x2000, 0x1000};
  for (bool reversed : {false, true}) {
    block_slab slab;
    free_index index;
    std::vector<block*> blocks;
    for (int i = 0; i < 5; ++i) {
      block* b = slab.make();
      b->size = sizes[i];
      b->address = addresses[i];
      blocks.push_back(b);
    }
    if (reversed) std::reverse(blocks.begin(), blocks.end());
    for (block* b : blocks) index.insert(b);
    ASSERT_EQ(free_index::bin_of(want) + 1, free_index::bin_of(405 * MiB));
    ASSERT_EQ(free_index::bin_of(404 * MiB), free_index::bin_of(407 * MiB));
    const block* found = index.find(want);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found->size, 405 * MiB);
    EXPECT_EQ(found->address, device_address{0x1000});
    // Within the request's own class too: smallest, then lowest address; exact fits the same.
    EXPECT_EQ(index.find(404 * MiB)->address, device_address{0x1000});
    EXPECT_EQ(index.find(405 * MiB)->address, device_address{0x1000});
    EXPECT_EQ(index.find(407 * MiB)->address, device_address{0x2000});
  }
}

TEST(AddressMap, MatchesAStdMapUnderChurn) {
  address_map map;
  std::map<device_address, block*> reference;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const device_address key = ((rng() % 50000) + 1) * 512;
    auto it = reference.find(key);
    if (it == reference.end()) {
      block* value = reinterpret_cast<block*>(key * 3);
      map.insert(key, value);
      reference.emplace(key, value);
    } else {
      EXPECT_EQ(map.find(key), it->second);
      map.erase(key);
      reference.erase(it);
    }
    if (i % 1000 == 0) {
      EXPECT_EQ(map.size(), reference.size());
      for (const auto& [k, v] : reference) ASSERT_EQ(map.find(k), v);
    }
  }
  EXPECT_EQ(map.find(512 * 1000003), nullptr);
}

}  // namespace
}  // namespace tidepool::detail
