// Tags, sleep and wake through the C API (issue 13): a tag's memory comes from pools of its own
// and is never another tag's, frees find the owning pool by address, sleep and wake act on one tag
// only, bad use gets a clear status, the PyTorch entry points honour the tag, and a tag's pools
// can be listed and described, and tidepool_compact reaches the tags' pools but a sleeping one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

namespace tidepool::testing {
namespace {

std::string last_error() { return tidepool_last_error(); }

void* allocate_in(const char* tag, std::size_t size, int device = 0) {
  if (tag != nullptr) {
    EXPECT_EQ(tidepool_push_tag(tag), TIDEPOOL_SUCCESS);
  }
  void* p = nullptr;
  EXPECT_EQ(tidepool_allocate(size, device, nullptr, TIDEPOOL_SCRATCH, &p), TIDEPOOL_SUCCESS) << last_error();
  if (tag != nullptr) {
    EXPECT_EQ(tidepool_pop_tag(), TIDEPOOL_SUCCESS);
  }
  return p;
}

tidepool_stats_t tag_stats(const char* tag, int device = 0) {
  tidepool_stats_t s{};
  s.struct_size = sizeof(s);
  EXPECT_EQ(tidepool_tag_stats(tag, device, &s), TIDEPOOL_SUCCESS) << last_error();
  return s;
}

class CApiTagsSim : public process_test {
 protected:
  sim_driver& host_backed(int devices = 1) {
    sim_config config;
    config.device_count = devices;
    config.capacity = 512 * MiB;
    config.back_with_host_memory = true;
    return use_sim(std::move(config));
  }
};

// tidepool_compact(device) compacts the tags' pools on the device too, but a sleeping one.
TEST_F(CApiTagsSim, CompactReachesTheTagsPoolsButASleepingOne) {
  sim_driver& sim = host_backed();
  auto pinned_in = [](const char* tag) {
    std::vector<void*> blocks;
    std::size_t size = 700 * 1024;
    for (int i = 0; i < 20; ++i) {
      blocks.push_back(allocate_in(tag, size));
      size = size * 7 % (13 * MiB) + 300 * 1024;
    }
    for (std::size_t i = 0; i < blocks.size(); i += 2) {
      EXPECT_EQ(tidepool_deallocate(blocks[i], 0, nullptr), TIDEPOOL_SUCCESS);
    }
  };
  pinned_in("weights");
  pinned_in("kv-cache");
  std::size_t bytes = 0;
  ASSERT_EQ(tidepool_sleep("kv-cache", TIDEPOOL_KEEP_CONTENTS, &bytes), TIDEPOOL_SUCCESS) << last_error();
  ASSERT_EQ(tidepool_release(0, &bytes), TIDEPOOL_SUCCESS);
  const tidepool_stats_t weights_before = tag_stats("weights");
  const tidepool_stats_t asleep_before = tag_stats("kv-cache");
  const std::size_t held = sim.physical_bytes(0);
  ASSERT_EQ(tidepool_compact(0, &bytes), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_GT(bytes, 0u) << "the awake tag's pool pinned nothing: the test proves nothing";
  EXPECT_EQ(held - sim.physical_bytes(0), bytes);
  EXPECT_EQ(weights_before.mapped_bytes - tag_stats("weights").mapped_bytes, bytes);
  EXPECT_EQ(tag_stats("kv-cache").asleep_bytes, asleep_before.asleep_bytes) << "the sleeping tag was left alone";
  ASSERT_EQ(tidepool_wake("kv-cache"), TIDEPOOL_SUCCESS) << last_error();
}

TEST_F(CApiTagsSim, TagsNeverShareMemory) {
  host_backed();
  // A freed block of one tag is never handed to another tag, nor to untagged allocations.
  for (std::size_t size : {std::size_t{4096}, 3 * MiB}) {
    void* a = allocate_in("weights", size);
    const std::uintptr_t freed = reinterpret_cast<std::uintptr_t>(a);
    ASSERT_EQ(tidepool_deallocate(a, 0, nullptr), TIDEPOOL_SUCCESS);
    void* b = allocate_in("kv-cache", size);
    void* c = allocate_in(nullptr, size);
    EXPECT_NE(reinterpret_cast<std::uintptr_t>(b), freed);
    EXPECT_NE(reinterpret_cast<std::uintptr_t>(c), freed);
    void* again = allocate_in("weights", size);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(again), freed) << "the tag's own cache serves it";
    for (void* p : {b, c, again}) EXPECT_EQ(tidepool_deallocate(p, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_SUCCESS);
  }
  // Each tag's handles are its own: no mapping of one tag's pool lies in another's.
  auto handles = [](pool& p) { return p.describe().handles; };
  void* w = allocate_in("weights", 5 * MiB);
  void* k = allocate_in("kv-cache", 5 * MiB);
  for (const auto& hw : handles(tag_pool("weights", 0))) {
    for (const auto& hk : handles(tag_pool("kv-cache", 0))) {
      EXPECT_TRUE(hw.address + hw.size <= hk.address || hk.address + hk.size <= hw.address);
    }
  }
  EXPECT_EQ(tag_stats("weights").live_allocations, 1u);
  EXPECT_EQ(tag_stats("kv-cache").live_allocations, 1u);
  EXPECT_EQ(tidepool_deallocate(w, 0, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(k, 0, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiTagsSim, SleepAndWakeOneTagKeepsItsBytesAndLeavesTheOthers) {
  sim_driver& sim = host_backed();
  void* w = allocate_in("weights", 6 * MiB + 100);
  void* other = allocate_in("kv-cache", 8 * MiB);
  void* plain = allocate_in(nullptr, MiB);
  std::vector<unsigned char> bytes(6 * MiB + 100);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  std::memcpy(sim.host_view(0, reinterpret_cast<device_address>(w), bytes.size()), bytes.data(), bytes.size());

  const std::size_t held = sim.physical_bytes(0);
  const std::size_t weights_held = tag_stats("weights").mapped_bytes;
  size_t back = 0;
  ASSERT_EQ(tidepool_sleep("weights", TIDEPOOL_KEEP_CONTENTS, &back), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(back, weights_held);
  EXPECT_EQ(held - sim.physical_bytes(0), back) << "exactly what the driver saw go";
  int asleep = 0;
  ASSERT_EQ(tidepool_tag_asleep("weights", &asleep), TIDEPOOL_SUCCESS);
  EXPECT_EQ(asleep, 1);
  ASSERT_EQ(tidepool_tag_asleep("kv-cache", &asleep), TIDEPOOL_SUCCESS);
  EXPECT_EQ(asleep, 0);
  EXPECT_EQ(tag_stats("weights").asleep_bytes, weights_held);
  EXPECT_NE(sim.host_view(0, reinterpret_cast<device_address>(other), 8 * MiB), nullptr) << "another tag stays";
  EXPECT_NE(sim.host_view(0, reinterpret_cast<device_address>(plain), MiB), nullptr);

  // Allocating in a sleeping tag is refused; elsewhere it works.
  EXPECT_EQ(tidepool_push_tag("weights"), TIDEPOOL_SUCCESS);
  void* refused = nullptr;
  EXPECT_EQ(tidepool_allocate(4096, 0, nullptr, TIDEPOOL_SCRATCH, &refused), TIDEPOOL_ASLEEP);
  EXPECT_NE(last_error().find("asleep"), std::string::npos) << last_error();
  EXPECT_EQ(tidepool_pop_tag(), TIDEPOOL_SUCCESS);
  void* fine = allocate_in("kv-cache", 4096);

  ASSERT_EQ(tidepool_wake("weights"), TIDEPOOL_SUCCESS) << last_error();
  const auto* host = sim.host_view(0, reinterpret_cast<device_address>(w), bytes.size());
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(std::memcmp(host, bytes.data(), bytes.size()), 0);
  for (void* p : {w, other, plain, fine}) EXPECT_EQ(tidepool_deallocate(p, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiTagsSim, BadUseGetsAClearStatus) {
  host_backed();
  size_t back = 0;
  EXPECT_EQ(tidepool_sleep("never-used", TIDEPOOL_KEEP_CONTENTS, &back), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("never-used"), std::string::npos) << last_error();
  EXPECT_EQ(tidepool_wake("never-used"), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_sleep(nullptr, TIDEPOOL_KEEP_CONTENTS, &back), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_push_tag(""), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_push_tag(std::string(65, 'x').c_str()), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_pop_tag(), TIDEPOOL_INVALID_ARGUMENT) << "nothing pushed";
  void* w = allocate_in("weights", MiB);
  EXPECT_EQ(tidepool_sleep("weights", static_cast<tidepool_sleep_keep>(7), &back), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_wake("weights"), TIDEPOOL_ASLEEP) << "not asleep";
  EXPECT_NE(last_error().find("not asleep"), std::string::npos) << last_error();
  ASSERT_EQ(tidepool_sleep("weights", TIDEPOOL_KEEP_NOTHING, &back), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_sleep("weights", TIDEPOOL_KEEP_NOTHING, &back), TIDEPOOL_ASLEEP) << "asleep already";
  ASSERT_EQ(tidepool_wake("weights"), TIDEPOOL_SUCCESS);
  // A tagged pointer freed twice is a double free, whichever device is named.
  EXPECT_EQ(tidepool_deallocate(w, 0, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(w, 0, nullptr), TIDEPOOL_DOUBLE_FREE) << last_error();
  EXPECT_EQ(tidepool_deallocate(w, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_DOUBLE_FREE) << last_error();
}

TEST_F(CApiTagsSim, TagsNestPerThread) {
  host_backed();
  size_t length = 0;
  char buffer[80];
  ASSERT_EQ(tidepool_current_tag(buffer, sizeof(buffer), &length), TIDEPOOL_SUCCESS);
  EXPECT_EQ(length, 0u);
  ASSERT_EQ(tidepool_push_tag("outer"), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_push_tag("inner"), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_current_tag(buffer, sizeof(buffer), &length), TIDEPOOL_SUCCESS);
  EXPECT_STREQ(buffer, "inner");
  std::thread([] {
    size_t n = 1;
    char b[8];
    EXPECT_EQ(tidepool_current_tag(b, sizeof(b), &n), TIDEPOOL_SUCCESS);
    EXPECT_EQ(n, 0u) << "another thread has no tag";
  }).join();
  ASSERT_EQ(tidepool_pop_tag(), TIDEPOOL_SUCCESS);
  {
    scoped_tag scoped("scoped");
    EXPECT_EQ(current_tag(), "scoped");
  }
  EXPECT_EQ(current_tag(), "outer");
  ASSERT_EQ(tidepool_pop_tag(), TIDEPOOL_SUCCESS);
  EXPECT_EQ(current_tag(), "");
}

TEST_F(CApiTagsSim, TheDefaultTagIsTheTagOfThreadsWithoutOne) {
  host_backed();
  ASSERT_EQ(tidepool_set_default_tag("train"), TIDEPOOL_SUCCESS);
  char buffer[16];
  size_t length = 0;
  ASSERT_EQ(tidepool_default_tag(buffer, sizeof(buffer), &length), TIDEPOOL_SUCCESS);
  EXPECT_STREQ(buffer, "train");
  void* from_thread = nullptr;
  // A thread the program does not run (PyTorch's autograd thread, say) allocates in the default tag.
  std::thread([&] { from_thread = allocate_in(nullptr, 2 * MiB); }).join();
  EXPECT_TRUE(tag_pool("train", 0).owns(from_thread));
  // A thread's own tag wins over it.
  void* own = allocate_in("other", MiB);
  EXPECT_TRUE(tag_pool("other", 0).owns(own));
  ASSERT_EQ(tidepool_set_default_tag(nullptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_default_tag(buffer, sizeof(buffer), &length), TIDEPOOL_SUCCESS);
  EXPECT_EQ(length, 0u);
  void* plain = allocate_in(nullptr, MiB);
  EXPECT_TRUE(device_pool(0).owns(plain));
  EXPECT_EQ(tidepool_set_default_tag(std::string(70, 'y').c_str()), TIDEPOOL_INVALID_ARGUMENT);
  for (void* p : {from_thread, own, plain}) EXPECT_EQ(tidepool_deallocate(p, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiTagsSim, TorchEntryPointsCarryTheTag) {
  host_backed();
  // The plain entry point follows the thread's tag.
  ASSERT_EQ(tidepool_push_tag("weights"), TIDEPOOL_SUCCESS);
  void* t = tidepool_torch_alloc(2 * MiB, 0, nullptr);
  ASSERT_EQ(tidepool_pop_tag(), TIDEPOOL_SUCCESS);
  EXPECT_TRUE(tag_pool("weights", 0).owns(t));
  tidepool_torch_free(t, 2 * MiB, 0, nullptr);
  EXPECT_FALSE(tag_pool("weights", 0).owns(t));
  // A slot's entry point allocates in its tag on any thread, with no tag pushed.
  int id = -1;
  ASSERT_EQ(tidepool_tag_id("kv-cache", &id), TIDEPOOL_SUCCESS);
  EXPECT_EQ(id, 1) << "tags are numbered in order of first use";
  void* s = tidepool_torch_alloc_tag1(3 * MiB, 0, nullptr);
  EXPECT_TRUE(tag_pool("kv-cache", 0).owns(s));
  tidepool_torch_free(s, 3 * MiB, 0, nullptr);
  EXPECT_EQ(tag_stats("kv-cache").live_allocations, 0u);
  // A slot no tag has is an error PyTorch sees as an exception.
  EXPECT_THROW((void)tidepool_torch_alloc_tag9(MiB, 0, nullptr), std::exception);
  // A sleeping tag refuses PyTorch's allocations too.
  size_t back = 0;
  void* kept = tidepool_torch_alloc_tag1(MiB, 0, nullptr);
  ASSERT_EQ(tidepool_sleep("kv-cache", TIDEPOOL_KEEP_CONTENTS, &back), TIDEPOOL_SUCCESS);
  EXPECT_THROW((void)tidepool_torch_alloc_tag1(MiB, 0, nullptr), std::exception);
  EXPECT_EQ(tidepool_last_status(), TIDEPOOL_ASLEEP);
  ASSERT_EQ(tidepool_wake("kv-cache"), TIDEPOOL_SUCCESS);
  tidepool_torch_free(kept, MiB, 0, nullptr);
}

TEST_F(CApiTagsSim, WakeAsksTheOtherCachesBeforeFailing) {
  sim_driver& sim = host_backed();
  void* w = allocate_in("weights", 200 * MiB);
  size_t back = 0;
  ASSERT_EQ(tidepool_sleep("weights", TIDEPOOL_KEEP_NOTHING, &back), TIDEPOOL_SUCCESS);
  // The untagged pool fills the device, then frees: its cache is in the way of the wake.
  void* big = allocate_in(nullptr, 400 * MiB);
  ASSERT_EQ(tidepool_deallocate(big, 0, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_GE(device_pool(0).stats().cached_bytes, 400 * MiB);
  ASSERT_EQ(tidepool_wake("weights"), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_LT(device_pool(0).stats().cached_bytes, 400 * MiB) << "the untagged cache went back for the wake";
  // With live memory in the way, the wake fails and the tag stays asleep.
  ASSERT_EQ(tidepool_sleep("weights", TIDEPOOL_KEEP_NOTHING, &back), TIDEPOOL_SUCCESS);
  void* live = allocate_in(nullptr, 400 * MiB);
  EXPECT_EQ(tidepool_wake("weights"), TIDEPOOL_OUT_OF_MEMORY);
  EXPECT_NE(last_error().find("stays asleep"), std::string::npos) << last_error();
  int asleep = 0;
  ASSERT_EQ(tidepool_tag_asleep("weights", &asleep), TIDEPOOL_SUCCESS);
  EXPECT_EQ(asleep, 1);
  EXPECT_EQ(sim.physical_bytes(0), device_pool(0).stats().mapped_bytes) << "the tag holds nothing";
  ASSERT_EQ(tidepool_deallocate(live, 0, nullptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_wake("weights"), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(tidepool_deallocate(w, 0, nullptr), TIDEPOOL_SUCCESS);
}

// Every block a describe callback saw: (address, size, state).
struct seen_blocks {
  std::vector<tidepool_block_info_t> blocks;
  static void on_block(const tidepool_block_info_t* b, void* user) {
    static_cast<seen_blocks*>(user)->blocks.push_back(*b);
  }
  [[nodiscard]] bool has_live(const void* p) const {
    for (const auto& b : blocks) {
      if (b.address == reinterpret_cast<std::uintptr_t>(p) && b.state == 0) return true;
    }
    return false;
  }
};

TEST_F(CApiTagsSim, TagsAreListedAndEachTagsPoolIsDescribed) {
  host_backed();
  int count = -1;
  ASSERT_EQ(tidepool_tag_count(&count), TIDEPOOL_SUCCESS);
  EXPECT_EQ(count, 0);
  void* weights = allocate_in("weights", 3 * MiB);
  void* cache = allocate_in("kv-cache", 5 * MiB);
  void* plain = allocate_in(nullptr, 2 * MiB);
  ASSERT_EQ(tidepool_tag_count(&count), TIDEPOOL_SUCCESS);
  ASSERT_EQ(count, 2);
  char name[80];
  size_t length = 0;
  ASSERT_EQ(tidepool_tag_name(0, name, sizeof name, &length), TIDEPOOL_SUCCESS);
  EXPECT_EQ(std::string(name), "weights");
  EXPECT_EQ(length, 7u);
  ASSERT_EQ(tidepool_tag_name(1, name, sizeof name, &length), TIDEPOOL_SUCCESS);
  EXPECT_EQ(std::string(name), "kv-cache");

  // Each pool describes its own blocks: the tag's, not the untagged pool's, and the other way.
  seen_blocks tagged;
  tidepool_memory_summary_t summary{};
  summary.struct_size = sizeof(summary);
  ASSERT_EQ(tidepool_describe_tag("kv-cache", 0, &summary, &seen_blocks::on_block, nullptr, &tagged),
            TIDEPOOL_SUCCESS) << last_error();
  EXPECT_TRUE(tagged.has_live(cache));
  EXPECT_FALSE(tagged.has_live(weights));
  EXPECT_FALSE(tagged.has_live(plain));
  EXPECT_EQ(summary.in_use_bytes, tag_stats("kv-cache").in_use_bytes);
  EXPECT_EQ(summary.held_bytes, tag_stats("kv-cache").mapped_bytes);
  seen_blocks untagged;
  ASSERT_EQ(tidepool_describe(0, nullptr, &seen_blocks::on_block, nullptr, &untagged), TIDEPOOL_SUCCESS);
  EXPECT_TRUE(untagged.has_live(plain));
  EXPECT_FALSE(untagged.has_live(cache));

  // A tag never named, or with no pool on the device, holds nothing there; asking makes no tag.
  summary.held_bytes = 99;
  seen_blocks none;
  ASSERT_EQ(tidepool_describe_tag("never-used", 0, &summary, &seen_blocks::on_block, nullptr, &none),
            TIDEPOOL_SUCCESS);
  EXPECT_EQ(summary.held_bytes, 0u);
  EXPECT_TRUE(none.blocks.empty());
  ASSERT_EQ(tidepool_tag_count(&count), TIDEPOOL_SUCCESS);
  EXPECT_EQ(count, 2);

  // Bad use gets a clear status.
  EXPECT_EQ(tidepool_tag_name(2, name, sizeof name, &length), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no tag has index 2"), std::string::npos) << last_error();
  EXPECT_EQ(tidepool_tag_name(-1, name, sizeof name, &length), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_tag_name(0, name, sizeof name, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_tag_count(nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_describe_tag(nullptr, 0, nullptr, nullptr, nullptr, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_describe_tag("weights", 7, nullptr, nullptr, nullptr, nullptr), TIDEPOOL_INVALID_DEVICE);
  tidepool_memory_summary_t unsized{};
  EXPECT_EQ(tidepool_describe_tag("weights", 0, &unsized, nullptr, nullptr, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tidepool_describe_tag"), std::string::npos) << last_error();

  for (void* p : {weights, cache, plain}) EXPECT_EQ(tidepool_deallocate(p, 0, nullptr), TIDEPOOL_SUCCESS);
}

}  // namespace
}  // namespace tidepool::testing
