// Several threads creating, mapping, unmapping and releasing on one simulated GPU at once: the
// totals must come out exact.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "device/sim_test_support.hpp"

namespace tidepool::test {
namespace {

TEST(SimThreads, ConcurrentMapUnmapKeepsExactTotals) {
  constexpr int threads = 8;
  constexpr int rounds = 1000;
  sim_driver sim(small_machine(2, 8 * gib));
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&sim, &failures, t] {
      const int device = t % 2;
      device_address base = 0;
      if (sim.address_reserve(device, 16 * mib, 0, &base) != driver_status::success) {
        ++failures;
        return;
      }
      std::vector<physical_handle> kept;
      for (int round = 0; round < rounds; ++round) {
        const std::size_t size = granule * static_cast<std::size_t>(1 + round % 4);
        physical_handle handle = 0;
        bool ok = sim.mem_create(device, size, &handle) == driver_status::success &&
                  sim.mem_map(device, base, size, handle) == driver_status::success &&
                  sim.mem_unmap(device, base, size) == driver_status::success;
        // Keep every tenth handle (unmapped) so the totals have something to check.
        if (round % 10 == 0) {
          kept.push_back(handle);
        } else {
          ok = ok && sim.mem_release(device, handle) == driver_status::success;
        }
        if (!ok) ++failures;
      }
      // Leave one mapping of 2 MiB per thread.
      physical_handle last = 0;
      if (sim.mem_create(device, granule, &last) != driver_status::success ||
          sim.mem_map(device, base, granule, last) != driver_status::success) {
        ++failures;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(failures.load(), 0);
  // Kept per thread: rounds 0, 10, ..., 190 with sizes (1 + round % 4) granules = 1 or 3 granules.
  std::size_t kept_per_thread = 0;
  for (int round = 0; round < rounds; round += 10) kept_per_thread += granule * static_cast<std::size_t>(1 + round % 4);
  const std::size_t per_device = (threads / 2) * (kept_per_thread + granule);
  for (int device = 0; device < 2; ++device) {
    EXPECT_EQ(sim.physical_bytes(device), per_device);
    EXPECT_EQ(sim.mapped_bytes(device), (threads / 2) * granule);
    EXPECT_EQ(sim.memory_info(device).process_used, per_device);
  }
  const driver_call_counts counts = sim.call_counts();
  EXPECT_EQ(counts.of(driver_call::mem_create), static_cast<std::uint64_t>(threads * (rounds + 1)));
  EXPECT_EQ(counts.of(driver_call::mem_map), static_cast<std::uint64_t>(threads * (rounds + 1)));
  EXPECT_EQ(counts.of(driver_call::mem_unmap), static_cast<std::uint64_t>(threads * rounds));
  EXPECT_EQ(counts.of(driver_call::mem_release), static_cast<std::uint64_t>(threads * rounds * 9 / 10));
}

TEST(SimThreads, ConcurrentStreamsEventsAndClock) {
  constexpr int threads = 6;
  sim_driver sim(small_machine(1));
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      stream_t stream = nullptr;
      event_t event = nullptr;
      if (sim.stream_create(0, &stream) != driver_status::success ||
          sim.event_create(0, &event) != driver_status::success) {
        ++failures;
        return;
      }
      for (int i = 0; i < 100; ++i) {
        sim.launch(0, stream, 1.0);
        if (sim.event_record(0, event, stream) != driver_status::success) ++failures;
        if (sim.event_synchronize(0, event) != driver_status::success) ++failures;
        if (sim.event_query(0, event) != driver_status::success) ++failures;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(sim.call_counts().of(driver_call::stream_create), static_cast<std::uint64_t>(threads));
  EXPECT_EQ(sim.call_counts().of(driver_call::event_record), static_cast<std::uint64_t>(threads * 100));
}

}  // namespace
}  // namespace tidepool::test
