// The modelled cost of driver calls: the H200 figures at the measured sizes, interpolation in
// log2(size) between them, clamping below 2 MiB and linear growth above 2 GiB, and how calls
// accumulate it (per handle for unmap and set access, two calls for a map).
#include <gtest/gtest.h>

#include <cmath>

#include "device/sim_test_support.hpp"

namespace tidepool::test {
namespace {

TEST(SimCostModel, MeasuredFiguresAtTheMeasuredSizes) {
  const sim_driver sim(small_machine());
  struct row {
    driver_call call;
    double at_2m, at_20m, at_64m, at_512m, at_2g;
  };
  const row rows[] = {
      {driver_call::mem_create, 12.5, 12.7, 15.8, 25.8, 55.7},
      {driver_call::mem_map, 1.6, 1.0, 1.0, 1.3, 1.2},
      {driver_call::mem_set_access, 36.5, 31.6, 34.5, 58.8, 108},
      {driver_call::mem_unmap, 21.1, 20.6, 22.1, 29.9, 43.5},
      {driver_call::mem_release, 15.6, 26.0, 54.8, 366, 1387},
  };
  for (const row& r : rows) {
    SCOPED_TRACE(std::string(to_string(r.call)));
    EXPECT_DOUBLE_EQ(sim.modelled_cost_us(r.call, 2 * mib), r.at_2m);
    EXPECT_DOUBLE_EQ(sim.modelled_cost_us(r.call, 20 * mib), r.at_20m);
    EXPECT_DOUBLE_EQ(sim.modelled_cost_us(r.call, 64 * mib), r.at_64m);
    EXPECT_DOUBLE_EQ(sim.modelled_cost_us(r.call, 512 * mib), r.at_512m);
    EXPECT_DOUBLE_EQ(sim.modelled_cost_us(r.call, 2 * gib), r.at_2g);
    EXPECT_DOUBLE_EQ(sim.modelled_cost_us(r.call, 4096), r.at_2m) << "clamped below 2 MiB";
  }
}

TEST(SimCostModel, InterpolatesInLog2OfTheSize) {
  const sim_driver sim(small_machine());
  // 128 MiB and 256 MiB are a third and two thirds of the way from 64 MiB to 512 MiB in log2.
  EXPECT_NEAR(sim.modelled_cost_us(driver_call::mem_release, 128 * mib), 54.8 + (366 - 54.8) / 3, 1e-9);
  EXPECT_NEAR(sim.modelled_cost_us(driver_call::mem_release, 256 * mib), 54.8 + 2 * (366 - 54.8) / 3, 1e-9);
  // 1 GiB is half way from 512 MiB to 2 GiB.
  EXPECT_NEAR(sim.modelled_cost_us(driver_call::mem_set_access, 1 * gib), (58.8 + 108) / 2, 1e-9);
  // 4 MiB: log2 ratio of 1 over log2(10) between 2 and 20 MiB.
  const double t = 1.0 / std::log2(10.0);
  EXPECT_NEAR(sim.modelled_cost_us(driver_call::mem_create, 4 * mib), 12.5 + t * (12.7 - 12.5), 1e-9);
}

TEST(SimCostModel, GrowsLinearlyInSizeAbove2GiB) {
  const sim_driver sim(small_machine());
  const double slope_per_gib = (1387.0 - 366.0) / 1.5;
  EXPECT_NEAR(sim.modelled_cost_us(driver_call::mem_release, 4 * gib), 1387 + 2 * slope_per_gib, 1e-6);
  EXPECT_NEAR(sim.modelled_cost_us(driver_call::mem_create, 8 * gib), 55.7 + 6 * (55.7 - 25.8) / 1.5, 1e-6);
  // cuMemMap's last segment falls; extrapolated, it never drops below its smallest measured figure.
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_map, std::size_t{64} * gib), 1.0);
}

TEST(SimCostModel, PlainAllocationCostRisesInLog2FromTwoMiBToTwoGiB) {
  const sim_driver sim(small_machine());
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_alloc, 512), 35.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_alloc, 2 * mib), 35.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_alloc, 64 * mib), 35.0 + 5 * 4.5);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_alloc, 2 * gib), 80.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_free, 2 * mib), 29.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_free, 2 * gib), 63.0);
  // A pair costs 64-143 us (DESIGN 1.4).
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_alloc, 2 * mib) + sim.modelled_cost_us(driver_call::mem_free, 2 * mib), 64.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_alloc, 2 * gib) + sim.modelled_cost_us(driver_call::mem_free, 2 * gib), 143.0);
}

TEST(SimCostModel, ConstantCostCalls) {
  const sim_driver sim(small_machine());
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::address_reserve, 1 * gib), 5.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::address_free, 0), 5.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::mem_get_info, 0), 1.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::event_create, 0), 2.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::event_destroy, 0), 2.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::event_record, 0), 1.5);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::event_query, 0), 0.3);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::event_synchronize, 0), 1.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::stream_create, 0), 5.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::stream_destroy, 0), 5.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::stream_wait_event, 0), 1.5);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::stream_synchronize, 0), 1.0);
  EXPECT_DOUBLE_EQ(sim.modelled_cost_us(driver_call::async_pool_trim, 0), 10.0);
}

TEST(SimCostModel, CallsAccumulateTheirModelledCost) {
  sim_driver sim(small_machine());
  const device_address base = reserve(sim, 0, 128 * mib);
  const physical_handle big = create(sim, 0, 64 * mib);
  const physical_handle small_a = create(sim, 0, 2 * mib);
  const physical_handle small_b = create(sim, 0, 2 * mib);
  ASSERT_EQ(sim.mem_map(0, base, 64 * mib, big), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 64 * mib, 2 * mib, small_a), driver_status::success);
  ASSERT_EQ(sim.mem_map(0, base + 66 * mib, 2 * mib, small_b), driver_status::success);
  ASSERT_EQ(sim.mem_unmap(0, base, 68 * mib), driver_status::success);
  (void)sim.memory_info(0);
  const driver_call_counts counts = sim.call_counts();
  EXPECT_EQ(counts.of(driver_call::mem_create), 3u);
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_create), 15.8 + 2 * 12.5);
  EXPECT_EQ(counts.of(driver_call::mem_map), 3u);
  EXPECT_EQ(counts.of(driver_call::mem_set_access), 3u) << "a map is cuMemMap + cuMemSetAccess";
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_set_access), 34.5 + 2 * 36.5);
  EXPECT_EQ(counts.of(driver_call::mem_unmap), 1u) << "one call over three handles";
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_unmap), 22.1 + 2 * 21.1) << "costed per handle";
  EXPECT_EQ(counts.of(driver_call::mem_get_info), 1u);
  EXPECT_EQ(counts.of(driver_call::address_reserve), 1u);
  EXPECT_EQ(counts.memory_calls(), 1u + 3 + 3 + 3 + 1);

  ASSERT_EQ(sim.mem_release(0, big), driver_status::success);
  EXPECT_DOUBLE_EQ(sim.call_counts().us_of(driver_call::mem_release), 54.8);
  sim.reset_call_counts();
  EXPECT_EQ(sim.call_counts().total_calls(), 0u);
  EXPECT_DOUBLE_EQ(sim.call_counts().total_us(), 0.0);
}

TEST(SimCostModel, PeerAccessOverSeveralHandlesCostsPerHandleInOneCall) {
  // DESIGN 2a: one cuMemSetAccess over 200 mapped 2 MiB handles took as long as 200 calls.
  sim_driver sim(small_machine(2));
  const device_address base = reserve(sim, 0, 400 * mib);
  for (std::size_t i = 0; i < 200; ++i) {
    ASSERT_EQ(sim.mem_map(0, base + i * granule, granule, create(sim, 0, granule)), driver_status::success);
  }
  sim.reset_call_counts();
  ASSERT_EQ(sim.mem_set_access(0, base, 400 * mib, 1), driver_status::success);
  EXPECT_EQ(sim.call_counts().of(driver_call::mem_set_access), 1u);
  EXPECT_NEAR(sim.call_counts().us_of(driver_call::mem_set_access), 200 * 36.5, 1e-6);
}

TEST(SimCostModel, RefusedCallsAreCountedAtTheirModelledCost) {
  sim_driver sim(small_machine());
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(0, 3 * mib, &handle), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_unmap(0, 0x1000, 2 * mib), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_release(0, 12345), driver_status::invalid_value);
  const driver_call_counts counts = sim.call_counts();
  EXPECT_EQ(counts.of(driver_call::mem_create), 1u);
  EXPECT_NEAR(counts.us_of(driver_call::mem_create), sim.modelled_cost_us(driver_call::mem_create, 3 * mib), 1e-9);
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_unmap), 21.1);
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_release), 15.6);
}

}  // namespace
}  // namespace tidepool::test
