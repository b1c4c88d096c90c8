// A test's model of a pool on the simulated GPU: every live allocation with a pattern written into
// its memory (through sim_driver::host_view), and the checks run after every step:
//  - no two live blocks overlap, and each is aligned to 256 bytes;
//  - every live byte is mapped (host_view of the whole block is not null) and keeps its pattern;
//  - in use + cached = mapped (+ asleep, pool::sleep), and the pool's figures equal a recount of the live set;
//  - the pool holds exactly what the driver says it holds;
//  - nothing was unmapped while queued work could still touch it (unsafe_unmap_count() == 0);
//  - a block freed on one stream reaches another stream only after the first one's work is done.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "tidepool/errors.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::testing {

inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t KiB = std::size_t{1} << 10;

class pool_checker {
 public:
  pool_checker(sim_driver& sim, pool& p, int device = 0) : sim_(sim), pool_(p), device_(device) {}

  /// Allocates through the pool and checks the new block against the live set.
  void* allocate(std::size_t bytes, stream_t stream = nullptr, lifetime hint = lifetime::scratch) {
    void* ptr = pool_.allocate(bytes, stream, hint);
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    EXPECT_EQ(address % 256, 0u) << "allocation of " << bytes << " not aligned";
    auto next = live_.lower_bound(address);
    if (next != live_.end()) {
      EXPECT_LE(address + bytes, next->first) << "allocation overlaps the next live block";
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      EXPECT_LE(prev->first + prev->second.bytes, address) << "allocation overlaps the previous live block";
    }
    // Stream order: bytes freed on another stream whose work is still queued must not come back.
    const double now = sim_.now();
    for (const freed_range& f : freed_) {
      if (f.stream == stream || f.done_at <= now) continue;
      const bool overlaps = address < f.address + f.bytes && f.address < address + bytes;
      EXPECT_FALSE(overlaps) << "a block freed on another stream came back before its work completed";
    }
    live l{bytes, stream, next_pattern_++};
    write_pattern(address, l);
    live_.emplace(address, l);
    return ptr;
  }

  /// Launches `work_us` of work on the block's stream touching it, then frees it on that stream.
  void free_after_work(void* ptr, double work_us) {
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
    ASSERT_NE(it, live_.end());
    free_on_after_work(ptr, it->second.stream, work_us);
  }

  /// The same on `stream`, which may be another than the block's (a communication stream's free):
  /// the work goes on `stream`, and the block must reach no other stream before it completes.
  void free_on_after_work(void* ptr, stream_t stream, double work_us) {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = live_.find(address);
    ASSERT_NE(it, live_.end());
    const live l = it->second;
    check_pattern(address, l);
    if (work_us > 0) {
      sim_.launch(device_, stream, work_us, address, l.bytes);
      double& tail = tails_[stream];
      tail = std::max(tail, sim_.now()) + work_us;
      freed_.push_back(freed_range{address, l.bytes, stream, tail});
    }
    live_.erase(it);
    pool_.deallocate(ptr, stream);
  }

  /// Frees a block with no work queued on it.
  void free(void* ptr) { free_after_work(ptr, 0.0); }

  /// Frees a block where the driver may fail (fault injection): when deallocate throws, the block
  /// stays in the live set if the pool still holds it, and the error is rethrown.
  void free_or_keep(void* ptr) {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = live_.find(address);
    ASSERT_NE(it, live_.end());
    check_pattern(address, it->second);
    const stream_t stream = it->second.stream;
    try {
      pool_.deallocate(ptr, stream);
    } catch (...) {
      if (!pool_.owns(ptr)) live_.erase(it);
      throw;
    }
    live_.erase(it);
  }

  /// The test writes its own bytes into live block `ptr`: its pattern is no longer checked.
  void own_contents(void* ptr) {
    auto it = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
    ASSERT_NE(it, live_.end());
    it->second.test_owned = true;
  }

  /// Runs every check on the pool as it is now.
  void check() {
    const pool_stats s = pool_.stats();
    std::size_t in_use = 0;
    std::size_t requested = 0;
    for (const auto& [address, l] : live_) {
      in_use += round512(l.bytes);
      requested += l.bytes;
    }
    EXPECT_EQ(s.in_use_bytes, in_use);
    EXPECT_EQ(s.requested_bytes, requested);
    EXPECT_EQ(s.live_allocations, live_.size());
    EXPECT_EQ(s.in_use_bytes + s.cached_bytes, s.mapped_bytes + s.asleep_bytes);  // asleep: 0 while awake
    EXPECT_GE(s.peak_mapped_bytes, s.mapped_bytes);
    EXPECT_GE(s.peak_in_use_bytes, s.in_use_bytes);
    EXPECT_EQ(s.mapped_bytes, sim_.physical_bytes(device_) - baseline_physical_);
    EXPECT_EQ(sim_.unsafe_unmap_count(), 0u);
    // Drop freed ranges whose work is done.
    const double now = sim_.now();
    freed_.erase(std::remove_if(freed_.begin(), freed_.end(), [&](const freed_range& f) { return f.done_at <= now; }),
                 freed_.end());
  }

  /// Physical bytes held outside the pool (other allocations the test made), excluded from check().
  void set_baseline_physical(std::size_t bytes) { baseline_physical_ = bytes; }

  /// Checks every live block's pattern.
  void check_patterns() {
    for (const auto& [address, l] : live_) check_pattern(address, l);
  }

  /// Live blocks' bytes rounded up to whole granules (a granule touched by two blocks counts once).
  [[nodiscard]] std::size_t live_granule_bytes(std::size_t granule = 2 * MiB) const {
    std::size_t bytes = 0;
    std::uintptr_t covered_to = 0;
    for (const auto& [address, l] : live_) {
      std::uintptr_t first = address / granule * granule;
      const std::uintptr_t last = (address + l.bytes + granule - 1) / granule * granule;
      first = std::max(first, covered_to);
      if (last > first) bytes += last - first;
      covered_to = std::max(covered_to, last);
    }
    return bytes;
  }

  /// Bytes of the handles (mappings) that live blocks touch: what release() must keep, no more,
  /// since a handle goes back whole or not at all.
  [[nodiscard]] std::size_t live_handle_bytes() const {
    const auto maps = sim_.mappings(device_);  // address order, disjoint
    std::size_t bytes = 0;
    std::size_t next = 0;  // first mapping not yet counted
    for (const auto& [address, l] : live_) {  // address order
      std::size_t i = next;
      while (i < maps.size() && maps[i].first + maps[i].second <= address) ++i;
      for (; i < maps.size() && maps[i].first < address + l.bytes; ++i) {
        bytes += maps[i].second;
        next = i + 1;
      }
    }
    return bytes;
  }

  [[nodiscard]] std::vector<void*> live_pointers() const {
    std::vector<void*> out;
    for (const auto& [address, l] : live_) out.push_back(reinterpret_cast<void*>(address));
    return out;
  }
  [[nodiscard]] std::size_t live_count() const { return live_.size(); }

 private:
  struct live {
    std::size_t bytes;
    stream_t stream;
    std::uint64_t pattern;
    bool test_owned = false;  // own_contents(): the test checks these bytes itself
  };
  struct freed_range {
    std::uintptr_t address;
    std::size_t bytes;
    stream_t stream;
    double done_at;
  };
  static std::size_t round512(std::size_t b) { return (b + 511) / 512 * 512; }

  // The pattern: one 8-byte word every 64 KiB, and the last whole word, each word naming the block
  // and its offset (a full fill of 64 MiB blocks would make the test slow under sanitizers).
  template <class F>
  static void for_each_word(std::size_t bytes, F&& f) {
    if (bytes < 8) {
      f(0, bytes);
      return;
    }
    std::size_t last = 0;
    for (std::size_t offset = 0; offset + 8 <= bytes; offset += 65536) {
      f(offset, 8);
      last = offset;
    }
    if (bytes - 8 >= last + 8) f(bytes - 8, 8);  // the end, unless it overlaps the last word
  }
  static std::uint64_t word_for(const live& l, std::size_t offset) {
    return (l.pattern * 0x9E3779B97F4A7C15ull) ^ (offset * 0xC2B2AE3D27D4EB4Full);
  }
  void write_pattern(std::uintptr_t address, const live& l) {
    std::byte* host = sim_.host_view(device_, address, l.bytes);
    ASSERT_NE(host, nullptr) << "a live block of " << l.bytes << " bytes is not wholly mapped";
    for_each_word(l.bytes, [&](std::size_t offset, std::size_t n) {
      const std::uint64_t w = word_for(l, offset);
      std::memcpy(host + offset, &w, n);
    });
  }
  void check_pattern(std::uintptr_t address, const live& l) {
    std::byte* host = sim_.host_view(device_, address, l.bytes);
    ASSERT_NE(host, nullptr) << "a live block of " << l.bytes << " bytes is no longer wholly mapped";
    if (l.test_owned) return;
    bool intact = true;
    for_each_word(l.bytes, [&](std::size_t offset, std::size_t n) {
      const std::uint64_t w = word_for(l, offset);
      intact = intact && std::memcmp(host + offset, &w, n) == 0;
    });
    EXPECT_TRUE(intact) << "the memory of a live block of " << l.bytes << " bytes was overwritten";
  }

  sim_driver& sim_;
  pool& pool_;
  int device_;
  std::map<std::uintptr_t, live> live_;
  std::vector<freed_range> freed_;
  std::map<stream_t, double> tails_;
  std::uint64_t next_pattern_ = 1;
  std::size_t baseline_physical_ = 0;
};

/// A simulated device with host memory behind it (small, so tests stay light).
/// The code of the tidepool::error that `f` throws (a test failure when it throws none).
inline error_code code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no tidepool::error";
  return error_code::invalid_argument;
}

inline sim_config small_device(std::size_t capacity = 1024 * MiB, bool virtual_memory = true) {
  sim_config config;
  config.capacity = capacity;
  config.back_with_host_memory = true;
  config.virtual_memory = virtual_memory;
  config.devices_with_context = {0};
  return config;
}

// The smallest device whose 256th is growth's largest handle (64 MiB: page_table.cpp); on a
// smaller one every handle is smaller.
constexpr std::size_t full_handles_device_bytes = std::size_t{16384} * MiB;

// A device of full_handles_device_bytes of which other processes hold all but `room`: the device's
// limit within a small room, with the handles of a device of the usual size.
inline sim_config device_with_room(std::size_t room) {
  sim_config config = small_device(full_handles_device_bytes);
  config.other_processes_bytes = config.capacity - room;
  return config;
}

// Makes the room of a device_with_room `bytes`: the device's limit met as a byte cap would meet
// it, without the cap's smaller handles (a byte cap bounds them as a small device does).
inline void set_room(sim_driver& sim, std::size_t bytes) {
  sim.set_other_processes_bytes(0, full_handles_device_bytes - bytes);
}

// The sizes of the physical handles `p` holds.
inline std::multiset<std::size_t> handle_sizes(pool& p) {
  std::multiset<std::size_t> sizes;
  for (const handle_description& h : p.describe().handles) sizes.insert(h.size);
  return sizes;
}

}  // namespace tidepool::testing
