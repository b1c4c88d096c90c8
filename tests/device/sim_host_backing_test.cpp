// Host backing: mapped simulated memory is real host memory, so two mappings of one handle share
// bytes and a test can see two live blocks that alias.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cstring>
#include <vector>

#include "device/sim_test_support.hpp"

namespace tidepool::test {
namespace {

sim_config backed_machine() {
  sim_config config = small_machine(1, 256 * mib);
  config.back_with_host_memory = true;
  return config;
}

TEST(SimHostBacking, TwoMappingsOfOneHandleShareBytes) {
  sim_driver sim(backed_machine());
  const device_address base = reserve(sim, 0, 8 * mib);
  const physical_handle handle = create(sim, 0, 2 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 4 * mib, 2 * mib, handle), driver_status::success);
  std::byte* first = sim.host_view(0, base, 2 * mib);
  std::byte* second = sim.host_view(0, base + 4 * mib, 2 * mib);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first, reinterpret_cast<std::byte*>(base)) << "the address is the host address";
  std::memset(first + 1000, 0x5a, 24);
  EXPECT_EQ(second[1000], std::byte{0x5a});
  EXPECT_EQ(second[1023], std::byte{0x5a});
  second[2 * mib - 1] = std::byte{7};
  EXPECT_EQ(first[2 * mib - 1], std::byte{7});
}

TEST(SimHostBacking, ContentsSurviveUnmapAndRemap) {
  sim_driver sim(backed_machine());
  const device_address base = reserve(sim, 0, 4 * mib);
  const physical_handle handle = create(sim, 0, 2 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, handle), driver_status::success);
  sim.host_view(0, base, 16)[3] = std::byte{42};
  ASSERT_EQ(sim.mem_unmap(0, base, 2 * mib), driver_status::success);
  EXPECT_EQ(sim.host_view(0, base, 16), nullptr) << "nothing mapped there now";
  ASSERT_EQ(sim.mem_map(0, base + 2 * mib, 2 * mib, handle), driver_status::success);
  EXPECT_EQ(sim.host_view(0, base + 2 * mib, 16)[3], std::byte{42});
}

TEST(SimHostBacking, HostViewNeedsTheWholeRangeMapped) {
  sim_driver sim(backed_machine());
  const device_address base = reserve(sim, 0, 8 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 2 * mib, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  EXPECT_NE(sim.host_view(0, base + 1 * mib, 2 * mib), nullptr) << "across two adjacent mappings";
  EXPECT_NE(sim.host_view(0, base, 4 * mib), nullptr);
  EXPECT_EQ(sim.host_view(0, base, 4 * mib + 1), nullptr);
  EXPECT_EQ(sim.host_view(0, base + 6 * mib, 1), nullptr);
  EXPECT_EQ(sim.host_view(0, base - 1, 2), nullptr);
  EXPECT_EQ(sim.host_view(0, base, 0), nullptr);
  // Writing across the seam of two handles touches both.
  std::memset(sim.host_view(0, base + 2 * mib - 8, 16), 1, 16);
}

TEST(SimHostBacking, PlainAllocationsAreRealMemoryToo) {
  sim_driver sim(backed_machine());
  device_address address = 0;
  ASSERT_EQ(sim.mem_alloc(0, 10'000, &address), driver_status::success);
  std::byte* view = sim.host_view(0, address, 10'000);
  ASSERT_NE(view, nullptr);
  std::memset(view, 3, 10'000);
  EXPECT_EQ(sim.host_view(0, address, 10'001), nullptr);
  ASSERT_EQ(sim.mem_free(0, address), driver_status::success);
  EXPECT_EQ(sim.host_view(0, address, 1), nullptr);
}

TEST(SimHostBacking, WithoutBackingThereIsNoHostView) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 2 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 2 * mib, create(sim, 0, 2 * mib)), driver_status::success);
  EXPECT_EQ(sim.host_view(0, base, 1), nullptr);
}

TEST(SimHostBacking, MoreHandlesThanTheSoftDescriptorLimit) {
  // Each handle is a memfd: past the soft limit the simulation raises it to the hard one.
  rlimit original{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original), 0);
  if (original.rlim_max < 1024) GTEST_SKIP() << "hard descriptor limit " << original.rlim_max << " is too low";
  rlimit lowered = original;
  lowered.rlim_cur = 128;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  {
    sim_config config = backed_machine();
    config.capacity = 2 * gib;
    sim_driver sim(config);
    const device_address base = reserve(sim, 0, 600 * granule);
    for (std::size_t i = 0; i < 300; ++i) {
      const physical_handle handle = create(sim, 0, granule);
      ASSERT_EQ(sim.mem_map(0, base + 2 * i * granule, granule, handle), driver_status::success) << i;
      ASSERT_EQ(sim.mem_release(0, handle), driver_status::success);
    }
    EXPECT_EQ(sim.mapped_bytes(0), 300 * granule);
    sim.host_view(0, base + 598 * granule, 1)[0] = std::byte{1};
    EXPECT_EQ(sim.mem_unmap(0, base + 598 * granule, granule), driver_status::success);
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
}

TEST(SimHostBacking, DestructorCleansUpLiveMappings) {
  // Left mapped, released-but-mapped, and reserved: the destructor must give all of it back
  // (AddressSanitizer's leak check and the fd count would notice otherwise).
  for (int round = 0; round < 50; ++round) {
    sim_driver sim(backed_machine());
    const device_address base = reserve(sim, 0, 8 * mib);
    const physical_handle kept = create(sim, 0, 2 * mib);
    const physical_handle released = create(sim, 0, 2 * mib);
    ASSERT_EQ(sim.mem_map(0, base, 2 * mib, kept), driver_status::success);
    ASSERT_EQ(sim.mem_map(0, base + 2 * mib, 2 * mib, released), driver_status::success);
    ASSERT_EQ(sim.mem_release(0, released), driver_status::success);
    create(sim, 0, 2 * mib);
    device_address plain = 0;
    ASSERT_EQ(sim.mem_alloc(0, 4096, &plain), driver_status::success);
  }
}

}  // namespace
}  // namespace tidepool::test
