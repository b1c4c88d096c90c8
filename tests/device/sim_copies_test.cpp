// Pinned host memory and host copies on the simulated GPU (issue 13's sleep and wake): real bytes
// when host-backed, queued on the stream as work on the device range (so an unmap before it ends
// is unsafe), refused and counted over memory that is not mapped, as a launch over it is.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/sim_test_support.hpp"

namespace tidepool::test {
namespace {

sim_config host_backed() {
  sim_config config = small_machine(1, 256 * mib);
  config.back_with_host_memory = true;
  return config;
}

TEST(SimCopies, CopiesMoveRealBytesBothWays) {
  sim_driver sim(host_backed());
  const device_address base = reserve(sim, 0, 4 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 4 * mib, create(sim, 0, 4 * mib)), driver_status::success);
  void* host = nullptr;
  ASSERT_EQ(sim.host_alloc(0, 3 * mib, &host), driver_status::success);
  auto* bytes = static_cast<unsigned char*>(host);
  for (std::size_t i = 0; i < 3 * mib; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 1);
  ASSERT_EQ(sim.copy_to_device(0, base + 4096, host, 3 * mib, nullptr), driver_status::success);
  EXPECT_EQ(std::memcmp(sim.host_view(0, base + 4096, 3 * mib), host, 3 * mib), 0);
  std::vector<unsigned char> expected(bytes, bytes + 3 * mib);
  std::memset(host, 0, 3 * mib);
  ASSERT_EQ(sim.copy_to_host(0, host, base + 4096, 3 * mib, nullptr), driver_status::success);
  EXPECT_EQ(std::memcmp(host, expected.data(), 3 * mib), 0);
  EXPECT_EQ(sim.call_counts().of(driver_call::copy_to_host), 1u);
  EXPECT_DOUBLE_EQ(sim.call_counts().us_of(driver_call::copy_to_host),
                   sim.modelled_cost_us(driver_call::copy_to_host, 3 * mib));
  EXPECT_EQ(sim.host_free(0, host), driver_status::success);
  EXPECT_EQ(sim.host_free(0, host), driver_status::invalid_value) << "freed already";
}

TEST(SimCopies, ACopyIsQueuedWorkOnItsRange) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 2 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  void* host = nullptr;
  ASSERT_EQ(sim.host_alloc(0, 2 * mib, &host), driver_status::success);
  ASSERT_EQ(sim.copy_to_host(0, host, base, 2 * mib, nullptr), driver_status::success);
  EXPECT_EQ(sim.mem_unmap(0, base, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.unsafe_unmap_count(), 1u) << "unmapped before the copy completed";
  EXPECT_EQ(sim.host_free(0, host), driver_status::success);
}

TEST(SimCopies, UnmappedMemoryIsRefusedAndCounted) {
  sim_driver sim(host_backed());
  const device_address base = reserve(sim, 0, 4 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  void* host = nullptr;
  ASSERT_EQ(sim.host_alloc(0, 4 * mib, &host), driver_status::success);
  EXPECT_EQ(sim.copy_to_host(0, host, base, 4 * mib, nullptr), driver_status::invalid_value) << "half unmapped";
  EXPECT_EQ(sim.copy_to_device(0, base + 2 * mib, host, 4096, nullptr), driver_status::invalid_value);
  EXPECT_EQ(sim.unmapped_access_count(), 2u);
  int local = 0;
  EXPECT_EQ(sim.copy_to_host(0, &local, base, sizeof(local), nullptr), driver_status::invalid_value)
      << "host memory host_alloc did not give";
  EXPECT_EQ(sim.copy_to_host(0, host, base, 0, nullptr), driver_status::invalid_value);
  // Work launched over unmapped memory (a sleeping tag's) is counted too; over mapped memory it is not.
  sim.launch(0, nullptr, 1.0, base, 2 * mib);
  EXPECT_EQ(sim.unmapped_access_count(), 2u);
  sim.launch(0, nullptr, 1.0, base + 2 * mib, 4096);
  EXPECT_EQ(sim.unmapped_access_count(), 3u);
  EXPECT_EQ(sim.host_free(0, host), driver_status::success);
}

}  // namespace
}  // namespace tidepool::test
