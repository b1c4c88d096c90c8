// Tests of the C API's process-wide entry points: device count and contexts, stats (honouring the
// caller's struct size) and resetting their peaks, a device's byte cap, release, compact,
// release_cached_memory, available bytes, C reclaim hooks, and several devices (MultiDevice).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

namespace tidepool::testing {
namespace {

using CApiProcess = process_test;

TEST_F(CApiProcess, DevicesAndContextsWithoutOpeningAny) {
  auto& sim = use_small_sim(3);
  int count = 0;
  ASSERT_EQ(tidepool_device_count(&count), TIDEPOOL_SUCCESS);
  EXPECT_EQ(count, 3);
  int has = -1;
  ASSERT_EQ(tidepool_has_context(1, &has), TIDEPOOL_SUCCESS);
  EXPECT_EQ(has, 0);
  EXPECT_FALSE(sim.has_context(1));
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(1024, 1, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_has_context(1, &has), TIDEPOOL_SUCCESS);
  EXPECT_EQ(has, 1);
  EXPECT_EQ(tidepool_has_context(3, &has), TIDEPOOL_INVALID_DEVICE);
  EXPECT_EQ(tidepool_has_context(0, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_device_count(nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_deallocate(ptr, 1, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, StatsMirrorThePoolsFigures) {
  use_small_sim(2);
  tidepool_stats_t stats{};
  stats.struct_size = sizeof stats;
  ASSERT_EQ(tidepool_stats(1, &stats), TIDEPOOL_SUCCESS);  // no pool yet: zeros, none made
  EXPECT_EQ(stats.mapped_bytes, 0u);
  EXPECT_EQ(existing_pools().size(), 0u);
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(6 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_stats(1, &stats), TIDEPOOL_SUCCESS);
  const pool_stats expected = device_pool(1).stats();
  EXPECT_EQ(stats.struct_size, sizeof stats);
  EXPECT_EQ(stats.requested_bytes, 6 * MiB);
  EXPECT_EQ(stats.in_use_bytes, expected.in_use_bytes);
  EXPECT_EQ(stats.mapped_bytes, expected.mapped_bytes);
  EXPECT_EQ(stats.cached_bytes, expected.cached_bytes);
  EXPECT_EQ(stats.live_allocations, 1u);
  EXPECT_EQ(stats.allocations, 1u);
  EXPECT_EQ(stats.driver_calls, expected.driver.memory_calls());
  EXPECT_GT(stats.driver_calls, 0u);
  EXPECT_EQ(tidepool_stats(2, &stats), TIDEPOOL_INVALID_DEVICE);
  EXPECT_EQ(tidepool_stats(1, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_deallocate(ptr, 1, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, StatsCountTheWaitsForTheGpu) {
  auto& sim = use_small_sim(2);
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(8 * MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);  // opens the context
  ASSERT_EQ(tidepool_deallocate(ptr, 0, nullptr), TIDEPOOL_SUCCESS);
  stream_t s = nullptr;
  ASSERT_EQ(sim.stream_create(0, &s), driver_status::success);
  ASSERT_EQ(tidepool_allocate(8 * MiB, 0, s, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  tidepool_stats_t stats{};
  stats.struct_size = sizeof stats;
  ASSERT_EQ(tidepool_stats(0, &stats), TIDEPOOL_SUCCESS);
  EXPECT_EQ(stats.waits, 0u);
  // Freed behind queued work: release() waits for it before it unmaps.
  sim.launch(0, s, 500.0, reinterpret_cast<device_address>(ptr), 8 * MiB);
  ASSERT_EQ(tidepool_deallocate(ptr, 0, s), TIDEPOOL_SUCCESS);
  std::size_t bytes = 0;
  ASSERT_EQ(tidepool_release(0, &bytes), TIDEPOOL_SUCCESS);
  EXPECT_GE(bytes, 8 * MiB);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u);
  ASSERT_EQ(tidepool_stats(0, &stats), TIDEPOOL_SUCCESS);
  const pool_stats expected = device_pool(0).stats();
  EXPECT_GE(stats.waits, 1u);
  EXPECT_EQ(stats.waits, expected.driver.wait_calls());
  EXPECT_EQ(stats.wait_microseconds, expected.driver.wait_us());
  EXPECT_EQ(stats.waits, expected.driver.of(driver_call::event_synchronize) +
                             expected.driver.of(driver_call::stream_synchronize) +
                             expected.driver.of(driver_call::device_synchronize));
  // A caller built before the field existed gets no more than its struct holds.
  tidepool_stats_t older{};
  older.struct_size = offsetof(tidepool_stats_t, waits);
  older.waits = 12345;
  ASSERT_EQ(tidepool_stats(0, &older), TIDEPOOL_SUCCESS);
  EXPECT_EQ(older.waits, 12345u);
  EXPECT_EQ(older.graphs, stats.graphs);
  ASSERT_EQ(tidepool_forget_stream(0, s), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, ResetPeakStatsBringsThePeaksDownToNow) {
  use_small_sim(2);
  EXPECT_EQ(tidepool_reset_peak_stats(1), TIDEPOOL_SUCCESS);  // no pool yet: nothing to do, none made
  EXPECT_EQ(existing_pools().size(), 0u);
  void* big = nullptr;
  void* small = nullptr;
  ASSERT_EQ(tidepool_allocate(64 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &big), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_allocate(6 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &small), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_deallocate(big, 1, nullptr), TIDEPOOL_SUCCESS);
  tidepool_stats_t stats{};
  stats.struct_size = sizeof stats;
  ASSERT_EQ(tidepool_stats(1, &stats), TIDEPOOL_SUCCESS);
  EXPECT_EQ(stats.peak_requested_bytes, 70 * MiB);
  ASSERT_EQ(tidepool_reset_peak_stats(1), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_stats(1, &stats), TIDEPOOL_SUCCESS);
  EXPECT_EQ(stats.peak_requested_bytes, 6 * MiB);
  EXPECT_EQ(stats.peak_in_use_bytes, stats.in_use_bytes);
  EXPECT_EQ(stats.peak_mapped_bytes, stats.mapped_bytes);
  EXPECT_EQ(tidepool_reset_peak_stats(2), TIDEPOOL_INVALID_DEVICE);
  EXPECT_EQ(tidepool_deallocate(small, 1, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, AByteCapLimitsTheDevicesPoolAndIsLifted) {
  use_small_sim(2);
  std::uint64_t cap = 0;
  ASSERT_EQ(tidepool_byte_cap(1, &cap), TIDEPOOL_SUCCESS);
  EXPECT_EQ(cap, UINT64_MAX);
  ASSERT_EQ(tidepool_set_byte_cap(1, 32 * MiB), TIDEPOOL_SUCCESS);  // before the pool exists
  ASSERT_EQ(tidepool_byte_cap(1, &cap), TIDEPOOL_SUCCESS);
  EXPECT_EQ(cap, 32 * MiB);
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(24 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  void* more = nullptr;
  EXPECT_EQ(tidepool_allocate(16 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &more), TIDEPOOL_OUT_OF_MEMORY);
  EXPECT_NE(std::string(tidepool_last_error()).find("byte cap 32.00 MiB"), std::string::npos)
      << tidepool_last_error();
  ASSERT_EQ(tidepool_set_byte_cap(1, UINT64_MAX), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_allocate(16 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &more), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_byte_cap(1, &cap), TIDEPOOL_SUCCESS);
  EXPECT_EQ(cap, UINT64_MAX);
  EXPECT_EQ(tidepool_set_byte_cap(1, std::uint64_t{1} << 63), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("2^63"), std::string::npos) << tidepool_last_error();
  EXPECT_EQ(tidepool_set_byte_cap(2, 32 * MiB), TIDEPOOL_INVALID_DEVICE);
  EXPECT_EQ(tidepool_byte_cap(2, &cap), TIDEPOOL_INVALID_DEVICE);
  EXPECT_EQ(tidepool_byte_cap(1, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  ASSERT_EQ(tidepool_byte_cap(1, &cap), TIDEPOOL_SUCCESS);
  EXPECT_EQ(cap, UINT64_MAX) << "refused calls change nothing";
  EXPECT_EQ(tidepool_deallocate(ptr, 1, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(more, 1, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, StatsFillNoMoreThanTheCallersStruct) {
  use_small_sim();
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(6 * MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  // An older caller whose struct ends after requested_bytes.
  tidepool_stats_t stats{};
  stats.struct_size = offsetof(tidepool_stats_t, cached_bytes);
  stats.cached_bytes = 777;
  stats.driver_calls = 777;
  ASSERT_EQ(tidepool_stats(0, &stats), TIDEPOOL_SUCCESS);
  EXPECT_EQ(stats.requested_bytes, 6 * MiB);
  EXPECT_EQ(stats.cached_bytes, 777u);
  EXPECT_EQ(stats.driver_calls, 777u);
  EXPECT_EQ(stats.struct_size, offsetof(tidepool_stats_t, cached_bytes));
  stats.struct_size = 0;
  EXPECT_EQ(tidepool_stats(0, &stats), TIDEPOOL_INVALID_ARGUMENT);
  // A size inside a field: refused, nothing written.
  stats.struct_size = offsetof(tidepool_stats_t, cached_bytes) + 4;
  stats.requested_bytes = 777;
  EXPECT_EQ(tidepool_stats(0, &stats), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("ends inside a field of tidepool_stats_t"), std::string::npos);
  EXPECT_EQ(stats.requested_bytes, 777u);
  EXPECT_EQ(tidepool_deallocate(ptr, 0, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, ReleaseAndReleaseCachedMemoryReportExactBytes) {
  auto& sim = use_small_sim(2);
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(64 * MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_deallocate(ptr, 0, nullptr), TIDEPOOL_SUCCESS);
  std::size_t held = sim.physical_bytes(0);
  std::size_t bytes = 0;
  ASSERT_EQ(tidepool_release(0, &bytes), TIDEPOOL_SUCCESS);
  EXPECT_GE(bytes, 64 * MiB);
  EXPECT_EQ(held - sim.physical_bytes(0), bytes);
  ASSERT_EQ(tidepool_release(1, &bytes), TIDEPOOL_SUCCESS);  // no pool there: nothing, none made
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(existing_pools()[1], nullptr);
  EXPECT_EQ(tidepool_release(2, &bytes), TIDEPOOL_INVALID_DEVICE);

  sim.park_in_async_pool(0, 6 * MiB);
  held = sim.physical_bytes(0);
  sim.reset_call_counts();
  ASSERT_EQ(tidepool_release_cached_memory(&bytes), TIDEPOOL_SUCCESS);
  EXPECT_EQ(bytes, 6 * MiB);
  EXPECT_EQ(held - sim.physical_bytes(0), bytes);
  EXPECT_EQ(sim.call_counts().of(driver_call::async_pool_trim), 1u);  // device 1 has no context
  EXPECT_FALSE(sim.has_context(1));
  EXPECT_EQ(tidepool_release_cached_memory(nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, CompactHandsBackWhatLiveAllocationsPinAndReportsExactBytes) {
  auto& sim = use_small_sim(2);
  // Sizes that leave live blocks on parts of large handles once every other one is freed.
  std::vector<void*> blocks;
  std::size_t size = 700 * 1024;
  for (int i = 0; i < 40; ++i) {
    void* ptr = nullptr;
    ASSERT_EQ(tidepool_allocate(size, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
    blocks.push_back(ptr);
    size = size * 7 % (23 * MiB) + 300 * 1024;
  }
  for (std::size_t i = 0; i < blocks.size(); i += 2) ASSERT_EQ(tidepool_deallocate(blocks[i], 0, nullptr), TIDEPOOL_SUCCESS);
  std::size_t bytes = 0;
  ASSERT_EQ(tidepool_release(0, &bytes), TIDEPOOL_SUCCESS);
  const std::size_t held = sim.physical_bytes(0);
  ASSERT_EQ(tidepool_compact(0, &bytes), TIDEPOOL_SUCCESS);
  EXPECT_GT(bytes, 0u) << "nothing was pinned: the test proves nothing";
  EXPECT_EQ(held - sim.physical_bytes(0), bytes);
  ASSERT_EQ(tidepool_compact(0, nullptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_compact(1, &bytes), TIDEPOOL_SUCCESS);  // no pool there: nothing, none made
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(existing_pools()[1], nullptr);
  EXPECT_EQ(tidepool_compact(2, &bytes), TIDEPOOL_INVALID_DEVICE);
  for (std::size_t i = 1; i < blocks.size(); i += 2) ASSERT_EQ(tidepool_deallocate(blocks[i], 0, nullptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_release(0, &bytes), TIDEPOOL_SUCCESS);
  EXPECT_EQ(sim.physical_bytes(0), 0u);
}

TEST_F(CApiProcess, AvailableBytes) {
  auto& sim = use_small_sim(2);
  sim.set_other_processes_bytes(1, 256 * MiB);
  std::size_t bytes = 0;
  ASSERT_EQ(tidepool_available_bytes(1, &bytes), TIDEPOOL_SUCCESS);
  EXPECT_EQ(bytes, GiB - 256 * MiB);
  EXPECT_FALSE(sim.has_context(1));
  EXPECT_EQ(tidepool_available_bytes(2, &bytes), TIDEPOOL_INVALID_DEVICE);
  EXPECT_EQ(tidepool_available_bytes(0, nullptr), TIDEPOOL_INVALID_ARGUMENT);
}

// A C hook standing for a framework's cache: a second pool on the same GPU, emptied on demand.
std::size_t release_framework_cache(int device, std::size_t bytes_needed, void* user_data) {
  auto* framework = static_cast<pool*>(user_data);
  if (device != framework->device() || bytes_needed == 0) return 0;
  return framework->release();
}

TEST_F(CApiProcess, ReclaimHookEmptiesAnotherCacheSoTheAllocationSucceeds) {
  auto& sim = use_small_sim();
  pool framework(sim_, 0);  // e.g. a framework's own cache of 600 MiB, all free
  framework.deallocate(framework.allocate(600 * MiB));
  ASSERT_GE(framework.stats().cached_bytes, 600 * MiB);
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(700 * MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_OUT_OF_MEMORY);

  int id = -1;
  ASSERT_EQ(tidepool_add_reclaim_hook(&release_framework_cache, &framework, &id), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_allocate(700 * MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(framework.stats().mapped_bytes, 0u);
  EXPECT_EQ(device_pool(0).stats().out_of_memory_recoveries, 1u);
  EXPECT_EQ(tidepool_deallocate(ptr, 0, nullptr), TIDEPOOL_SUCCESS);

  EXPECT_EQ(tidepool_remove_reclaim_hook(id), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_remove_reclaim_hook(id), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_add_reclaim_hook(nullptr, nullptr, &id), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_add_reclaim_hook(&release_framework_cache, nullptr, nullptr),
            TIDEPOOL_INVALID_ARGUMENT);
  (void)sim;
}

// user_data may be freed as soon as tidepool_remove_reclaim_hook returns, even while another
// thread was inside the hook when the removal began: the removal waits for that call.
struct slow_hook_state {
  std::mutex mutex;
  std::condition_variable changed;
  bool entered = false;
  bool open = false;
  std::atomic<int> seen{0};
};
slow_hook_state slow_hook;

std::size_t read_user_data_slowly(int, std::size_t, void* user_data) {
  {
    std::unique_lock lock(slow_hook.mutex);
    slow_hook.entered = true;
    slow_hook.changed.notify_all();
    slow_hook.changed.wait(lock, [] { return slow_hook.open; });
  }
  slow_hook.seen = *static_cast<const int*>(user_data);  // after the removal began
  return 0;
}

TEST_F(CApiProcess, UserDataMayBeFreedOnceTheRemovalReturns) {
  use_small_sim();
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);  // opens device 0
  auto* data = new int(42);
  int id = -1;
  ASSERT_EQ(tidepool_add_reclaim_hook(&read_user_data_slowly, data, &id), TIDEPOOL_SUCCESS);
  std::thread releaser([] { EXPECT_EQ(tidepool_release_cached_memory(nullptr), TIDEPOOL_SUCCESS); });
  {
    std::unique_lock lock(slow_hook.mutex);
    slow_hook.changed.wait(lock, [] { return slow_hook.entered; });
  }
  std::thread remover([&] {
    EXPECT_EQ(tidepool_remove_reclaim_hook(id), TIDEPOOL_SUCCESS);
    *data = -1;  // what freeing it would leave behind
    delete data;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a broken removal returns meanwhile
  {
    std::lock_guard lock(slow_hook.mutex);
    slow_hook.open = true;
    slow_hook.changed.notify_all();
  }
  remover.join();
  releaser.join();
  EXPECT_EQ(slow_hook.seen.load(), 42) << "the hook read user_data after its removal returned";
  EXPECT_EQ(tidepool_deallocate(ptr, 0, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, MultiDeviceFreeFromAThreadOnAnotherDevice) {
  use_small_sim(2);
  void* on1 = nullptr;
  ASSERT_EQ(tidepool_allocate(16 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &on1), TIDEPOOL_SUCCESS);
  void* also_on1 = nullptr;
  ASSERT_EQ(tidepool_allocate(16 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &also_on1), TIDEPOOL_SUCCESS);
  std::thread([&] {
    // This thread's work is on device 0: its current stream and allocations are there.
    ASSERT_EQ(tidepool_set_current_stream(0, nullptr), TIDEPOOL_SUCCESS);
    void* own = tidepool_cupy_malloc(nullptr, MiB, 0);
    ASSERT_NE(own, nullptr);
    EXPECT_EQ(tidepool_deallocate(on1, 1, nullptr), TIDEPOOL_SUCCESS);
    EXPECT_EQ(tidepool_deallocate(also_on1, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_SUCCESS);
    tidepool_cupy_free(nullptr, own, 0);
  }).join();
  EXPECT_EQ(device_pool(1).stats().live_allocations, 0u);
  EXPECT_EQ(device_pool(0).stats().live_allocations, 0u);
  EXPECT_EQ(device_pool(1).stats().deallocations, 2u);
}

TEST_F(CApiProcess, MultiDeviceReleaseOnlyWhereAContextIs) {
  sim_config config;
  config.device_count = 3;
  config.capacity = GiB;
  config.devices_with_context = {0};  // e.g. a framework opened device 0
  auto& sim = use_sim(config);
  sim.park_in_async_pool(0, 2 * MiB);
  void* on2 = nullptr;
  ASSERT_EQ(tidepool_allocate(MiB, 2, nullptr, TIDEPOOL_SCRATCH, &on2), TIDEPOOL_SUCCESS);
  sim.park_in_async_pool(2, 2 * MiB);
  sim.reset_call_counts();
  std::size_t bytes = 0;
  ASSERT_EQ(tidepool_release_cached_memory(&bytes), TIDEPOOL_SUCCESS);
  EXPECT_EQ(sim.async_pool_bytes(2), 0u);
  EXPECT_EQ(sim.async_pool_bytes(0), 0u);  // a context without a pool is still released
  EXPECT_EQ(sim.call_counts().of(driver_call::async_pool_trim), 2u);
  EXPECT_FALSE(sim.has_context(1));
  EXPECT_GE(bytes, 4 * MiB);
  EXPECT_EQ(tidepool_deallocate(on2, 2, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiProcess, MultiDeviceThreadsAllocateWhileReleaseRuns) {
  auto& sim = use_small_sim(2);
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      std::vector<void*> held;
      std::uint32_t state = 12345u + static_cast<std::uint32_t>(t);
      for (int i = 0; i < 2000; ++i) {
        state = state * 1664525u + 1013904223u;
        const int device = static_cast<int>(state >> 31);
        if (held.size() > 16 || (!held.empty() && (state & 4u) != 0)) {
          if (tidepool_deallocate(held.back(), TIDEPOOL_ANY_DEVICE, nullptr) != TIDEPOOL_SUCCESS) ++failures;
          held.pop_back();
          continue;
        }
        void* ptr = nullptr;
        const std::size_t size = 256 + (state >> 8) % (4 * MiB);
        if (tidepool_allocate(size, device, nullptr, TIDEPOOL_SCRATCH, &ptr) != TIDEPOOL_SUCCESS) {
          ++failures;
        } else {
          held.push_back(ptr);
        }
      }
      for (void* ptr : held) {
        if (tidepool_deallocate(ptr, TIDEPOOL_ANY_DEVICE, nullptr) != TIDEPOOL_SUCCESS) ++failures;
      }
    });
  }
  std::thread releaser([&] {
    while (!done.load()) {
      if (tidepool_release_cached_memory(nullptr) != TIDEPOOL_SUCCESS) ++failures;
    }
  });
  for (auto& w : workers) w.join();
  done = true;
  releaser.join();
  EXPECT_EQ(failures.load(), 0) << tidepool_last_error();
  EXPECT_EQ(device_pool(0).stats().live_allocations, 0u);
  EXPECT_EQ(device_pool(1).stats().live_allocations, 0u);
  std::size_t bytes = 0;
  ASSERT_EQ(tidepool_release_cached_memory(&bytes), TIDEPOOL_SUCCESS);
  EXPECT_EQ(sim.mapped_bytes(0), 0u);
  EXPECT_EQ(sim.mapped_bytes(1), 0u);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u);
}

}  // namespace
}  // namespace tidepool::testing
