// pool::describe() and a pool's recording buffer (pool::start_recording): blocks tile the ranges,
// live blocks are the program's allocations, the largest free block, what release() could return
// (and then returns), and the events in the pool's order with the buffer-full call.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

class PoolDescribe : public ::testing::Test {
 protected:
  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>(small_device(512 * MiB));
  pool p{sim, 0};
};

// The small regions take requests up to small_size_threshold, the threshold included, as PyTorch's
// small pool takes requests of at most 1 MiB (RESULTS section 0, "The 1 MiB boundary and equal fits").
TEST_F(PoolDescribe, ARequestOfExactlyTheSmallSizeThresholdIsSmall) {
  void* at = p.allocate(MiB);
  void* above = p.allocate(MiB + 512);
  std::map<std::uintptr_t, bool> small;
  for (const auto& b : p.describe().blocks) {
    if (b.state == block_description::status::live) small[b.address] = b.small;
  }
  EXPECT_TRUE(small.at(reinterpret_cast<std::uintptr_t>(at)));
  EXPECT_FALSE(small.at(reinterpret_cast<std::uintptr_t>(above)));
  p.deallocate(at);
  p.deallocate(above);
}

TEST_F(PoolDescribe, BlocksTileTheRangesAndLiveBlocksAreTheAllocations) {
  stream_t s = nullptr;
  ASSERT_EQ(sim->stream_create(0, &s), driver_status::success);
  std::vector<void*> big;
  for (int i = 0; i < 6; ++i) big.push_back(p.allocate(8 * MiB + 1000 * i, i % 2 == 0 ? nullptr : s));
  void* small = p.allocate(3000);
  void* kept = p.allocate(5 * MiB, nullptr, lifetime::persistent);
  for (int i = 0; i < 6; i += 2) p.deallocate(big[i]);
  const pool_description d = p.describe();
  std::map<std::uintptr_t, std::vector<block_description>> by_range;
  std::map<std::uintptr_t, const block_description*> live;
  std::size_t largest_free = 0;
  for (const auto& b : d.blocks) {
    by_range[b.range].push_back(b);
    if (b.state == block_description::status::live) live[b.address] = &b;
    if (b.state == block_description::status::free) largest_free = std::max(largest_free, b.size);
  }
  for (const auto& [range, blocks] : by_range) {  // no gap, no overlap
    for (std::size_t i = 1; i < blocks.size(); ++i) EXPECT_EQ(blocks[i - 1].address + blocks[i - 1].size, blocks[i].address);
    EXPECT_EQ(blocks.front().address, range);
  }
  ASSERT_EQ(live.size(), 5u);
  for (int i = 1; i < 6; i += 2) {
    const auto* b = live.at(reinterpret_cast<std::uintptr_t>(big[i]));
    EXPECT_EQ(b->requested, 8 * MiB + 1000u * i);
    EXPECT_EQ(b->stream, reinterpret_cast<std::uintptr_t>(s));
    EXPECT_FALSE(b->small);
  }
  EXPECT_TRUE(live.at(reinterpret_cast<std::uintptr_t>(small))->small);
  EXPECT_TRUE(live.at(reinterpret_cast<std::uintptr_t>(kept))->persistent);
  EXPECT_EQ(d.largest_free_block, largest_free);
  std::size_t handles = 0;
  for (const auto& h : d.handles) handles += h.size;
  EXPECT_EQ(handles, d.stats.mapped_bytes);
  EXPECT_EQ(d.stats.mapped_bytes, sim->physical_bytes(0));
  // Each freed 8 MiB block shares handles with its live neighbours (an end granule's own handle,
  // or a growth's last handle when it was small: growth.cpp): whole handles only, the first block's
  // 8 MiB handle at least.
  EXPECT_GE(d.releasable_bytes, 8 * MiB);
  EXPECT_LE(d.releasable_bytes, d.stats.cached_bytes);
  EXPECT_EQ(p.release(), d.releasable_bytes);  // what it said release() could return
  EXPECT_EQ(p.describe().releasable_bytes, 0u);
  for (int i = 1; i < 6; i += 2) p.deallocate(big[i], s);
  p.deallocate(small);
  p.deallocate(kept);
  (void)sim->stream_destroy(0, s);
}

struct full_calls {
  int calls = 0;
  std::size_t pending = 0;
  static void on_full(void* context, int, std::size_t pending) {
    auto* self = static_cast<full_calls*>(context);
    ++self->calls;
    self->pending = pending;
  }
};

TEST_F(PoolDescribe, RecordingKeepsEventsInThePoolsOrder) {
  void* before = p.allocate(2 * MiB);  // a large block: the 4 KiB ones below need a small page mapped
  void* hog = p.allocate(300 * MiB);
  full_calls full;
  p.start_recording(10, &full_calls::on_full, &full);
  EXPECT_THROW(p.start_recording(10, &full_calls::on_full, &full), error);
  p.deallocate(before);
  for (int i = 0; i < 4; ++i) p.deallocate(p.allocate(4096 * (i + 1)));
  EXPECT_THROW((void)p.allocate(300 * MiB), out_of_memory);
  EXPECT_EQ(full.calls, 1);  // once the buffer held 10 events
  EXPECT_GE(full.pending, 10u);
  std::vector<recorded_event> events;
  p.take_recorded(events);
  ASSERT_GE(events.size(), 12u);
  // The allocations live at the start come first, by no thread.
  EXPECT_EQ(events[0].what, recorded_event::kind::allocate);
  EXPECT_EQ(events[1].what, recorded_event::kind::allocate);
  EXPECT_EQ(events[0].thread + events[1].thread, 0u);
  EXPECT_EQ(std::min(events[0].address, events[1].address) + std::max(events[0].address, events[1].address),
            reinterpret_cast<std::uintptr_t>(before) + reinterpret_cast<std::uintptr_t>(hog));
  EXPECT_EQ(events[2].what, recorded_event::kind::free);
  EXPECT_EQ(events[2].address, reinterpret_cast<std::uintptr_t>(before));
  EXPECT_EQ(events[2].size, 2 * MiB);
  std::size_t maps = 0;
  for (std::size_t i = 1; i < events.size(); ++i) {
    EXPECT_GE(events[i].time_ns, events[i - 1].time_ns);
    maps += events[i].what == recorded_event::kind::map ? 1 : 0;
  }
  EXPECT_GE(maps, 1u);  // the small page the 4 KiB blocks went to
  EXPECT_EQ(events.back().what, recorded_event::kind::allocate_failure);
  p.deallocate(p.allocate(4096));
  std::vector<recorded_event> rest;
  p.stop_recording(rest);
  EXPECT_EQ(rest.size(), 2u);
  p.deallocate(p.allocate(4096));  // not recorded
  p.take_recorded(rest);
  EXPECT_EQ(rest.size(), 2u);
  p.deallocate(hog);
}

}  // namespace
}  // namespace tidepool::testing
