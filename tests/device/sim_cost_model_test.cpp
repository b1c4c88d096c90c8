// The modelled cost of driver calls: the table docs/DESIGN.md quotes is the model's (the figures
// live only in src/device/sim/cost_model.cpp), interpolation in log2(size) between the measured
// sizes, clamping below 2 MiB and linear growth above 2 GiB, and how calls accumulate it (per
// handle for unmap and set access, two calls for a map).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "device/sim_test_support.hpp"

namespace tidepool::test {
namespace {

constexpr std::array<std::size_t, 5> measured_sizes = {2 * mib, 20 * mib, 64 * mib, 512 * mib, 2 * gib};
constexpr std::array<driver_call, 5> per_handle_calls = {driver_call::mem_create, driver_call::mem_map,
                                                         driver_call::mem_set_access, driver_call::mem_unmap,
                                                         driver_call::mem_release};

double cost(const sim_driver& sim, driver_call call, std::size_t bytes) { return sim.modelled_cost_us(call, bytes); }

// One row of a table in docs/DESIGN.md: the call named in its first cell and its number cells
// (nullopt where a cell is empty).
struct doc_row {
  driver_call call;
  std::vector<std::optional<double>> figures;
};

std::optional<driver_call> call_named(const std::string& name) {
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    if (to_string(static_cast<driver_call>(k)) == name) return static_cast<driver_call>(k);
  }
  return std::nullopt;
}

std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line.substr(1));  // past the leading '|'
  std::string cell;
  while (std::getline(in, cell, '|')) {
    const auto first = cell.find_first_not_of(' ');
    const auto last = cell.find_last_not_of(' ');
    cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
  }
  return cells;
}

// The table after `marker` in docs/DESIGN.md: `columns` number cells after the call's name.
std::vector<doc_row> design_table(const std::string& marker, std::size_t columns) {
  const auto path = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "docs" / "DESIGN.md";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::string line;
  while (std::getline(in, line) && line != marker) {
  }
  EXPECT_EQ(line, marker) << "no " << marker << " in " << path;
  std::vector<doc_row> rows;
  int header_lines = 2;  // the header and the |---| line
  while (std::getline(in, line) && !line.empty() && line[0] == '|') {
    if (header_lines > 0) {
      --header_lines;
      continue;
    }
    const std::vector<std::string> cells = cells_of(line);
    EXPECT_GE(cells.size(), columns + 1) << line;
    if (cells.size() < columns + 1) continue;
    const std::string& name = cells[0];
    const auto call = name.size() > 2 ? call_named(name.substr(1, name.size() - 2)) : std::nullopt;
    EXPECT_TRUE(call.has_value()) << "not a call: " << name;
    if (!call) continue;
    doc_row row{*call, {}};
    for (std::size_t c = 1; c <= columns; ++c) {
      row.figures.push_back(cells[c].empty() ? std::nullopt : std::optional<double>(std::stod(cells[c])));
    }
    rows.push_back(row);
  }
  return rows;
}

TEST(SimCostModel, DesignTableIsTheModel) {
  const sim_driver sim(small_machine());
  std::map<driver_call, int> seen;
  for (const doc_row& row : design_table("<!-- sim-cost-table: per handle -->", measured_sizes.size())) {
    SCOPED_TRACE(std::string(to_string(row.call)));
    ++seen[row.call];
    for (std::size_t i = 0; i < measured_sizes.size(); ++i) {
      if (row.figures[i]) {
        EXPECT_DOUBLE_EQ(cost(sim, row.call, measured_sizes[i]), *row.figures[i]) << "at " << measured_sizes[i];
      }
    }
  }
  for (const doc_row& row : design_table("<!-- sim-cost-table: constant -->", 1)) {
    SCOPED_TRACE(std::string(to_string(row.call)));
    ++seen[row.call];
    ASSERT_TRUE(row.figures[0].has_value());
    EXPECT_DOUBLE_EQ(cost(sim, row.call, 0), *row.figures[0]);
    EXPECT_DOUBLE_EQ(cost(sim, row.call, 1 * gib), *row.figures[0]) << "constant";
  }
  for (std::size_t k = 0; k < driver_call_kinds; ++k) {
    EXPECT_EQ(seen[static_cast<driver_call>(k)], 1) << to_string(static_cast<driver_call>(k)) << " is quoted once";
  }
}

TEST(SimCostModel, ClampedToThe2MiBFigureBelow2MiB) {
  const sim_driver sim(small_machine());
  for (driver_call c : per_handle_calls) {
    EXPECT_DOUBLE_EQ(cost(sim, c, 4096), cost(sim, c, 2 * mib)) << to_string(c);
  }
  EXPECT_DOUBLE_EQ(cost(sim, driver_call::mem_alloc, 512), cost(sim, driver_call::mem_alloc, 2 * mib));
  EXPECT_DOUBLE_EQ(cost(sim, driver_call::mem_free, 1), cost(sim, driver_call::mem_free, 2 * mib));
}

TEST(SimCostModel, InterpolatesInLog2OfTheSize) {
  const sim_driver sim(small_machine());
  for (driver_call c : per_handle_calls) {
    SCOPED_TRACE(std::string(to_string(c)));
    const double at_64m = cost(sim, c, 64 * mib);
    const double at_512m = cost(sim, c, 512 * mib);
    // 128 MiB and 256 MiB are a third and two thirds of the way from 64 MiB to 512 MiB in log2.
    EXPECT_NEAR(cost(sim, c, 128 * mib), at_64m + (at_512m - at_64m) / 3, 1e-9);
    EXPECT_NEAR(cost(sim, c, 256 * mib), at_64m + 2 * (at_512m - at_64m) / 3, 1e-9);
    // 1 GiB is half way from 512 MiB to 2 GiB.
    EXPECT_NEAR(cost(sim, c, 1 * gib), (at_512m + cost(sim, c, 2 * gib)) / 2, 1e-9);
    // 4 MiB: log2 ratio of 1 over log2(10) between 2 and 20 MiB.
    const double t = 1.0 / std::log2(10.0);
    EXPECT_NEAR(cost(sim, c, 4 * mib), cost(sim, c, 2 * mib) + t * (cost(sim, c, 20 * mib) - cost(sim, c, 2 * mib)),
                1e-9);
  }
}

TEST(SimCostModel, GrowsLinearlyInSizeAbove2GiB) {
  const sim_driver sim(small_machine());
  for (driver_call c : {driver_call::mem_release, driver_call::mem_create, driver_call::mem_set_access}) {
    SCOPED_TRACE(std::string(to_string(c)));
    const double slope_per_gib = (cost(sim, c, 2 * gib) - cost(sim, c, 512 * mib)) / 1.5;
    ASSERT_GT(slope_per_gib, 0.0);
    EXPECT_NEAR(cost(sim, c, 4 * gib), cost(sim, c, 2 * gib) + 2 * slope_per_gib, 1e-6);
    EXPECT_NEAR(cost(sim, c, 8 * gib), cost(sim, c, 2 * gib) + 6 * slope_per_gib, 1e-6);
  }
  // cuMemMap's last segment falls; extrapolated, it never drops below its smallest measured figure.
  ASSERT_LT(cost(sim, driver_call::mem_map, 2 * gib), cost(sim, driver_call::mem_map, 512 * mib));
  double smallest = cost(sim, driver_call::mem_map, measured_sizes[0]);
  for (std::size_t s : measured_sizes) smallest = std::min(smallest, cost(sim, driver_call::mem_map, s));
  EXPECT_DOUBLE_EQ(cost(sim, driver_call::mem_map, std::size_t{64} * gib), smallest);
}

TEST(SimCostModel, PlainAllocationCostRisesInLog2FromTwoMiBToTwoGiB) {
  const sim_driver sim(small_machine());
  for (driver_call c : {driver_call::mem_alloc, driver_call::mem_free}) {
    SCOPED_TRACE(std::string(to_string(c)));
    const double low = cost(sim, c, 2 * mib);
    const double high = cost(sim, c, 2 * gib);
    ASSERT_GT(high, low);
    EXPECT_DOUBLE_EQ(cost(sim, c, 64 * mib), low + 5 * (high - low) / 10) << "5 of the 10 doublings";
    EXPECT_DOUBLE_EQ(cost(sim, c, 8 * gib), low + 12 * (high - low) / 10) << "and on beyond 2 GiB";
  }
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
  auto at = [&sim](driver_call c, std::size_t bytes) { return cost(sim, c, bytes); };
  EXPECT_EQ(counts.of(driver_call::mem_create), 3u);
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_create),
                   at(driver_call::mem_create, 64 * mib) + 2 * at(driver_call::mem_create, 2 * mib));
  EXPECT_EQ(counts.of(driver_call::mem_map), 3u);
  EXPECT_EQ(counts.of(driver_call::mem_set_access), 3u) << "a map is cuMemMap + cuMemSetAccess";
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_set_access),
                   at(driver_call::mem_set_access, 64 * mib) + 2 * at(driver_call::mem_set_access, 2 * mib));
  EXPECT_EQ(counts.of(driver_call::mem_unmap), 1u) << "one call over three handles";
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_unmap),
                   at(driver_call::mem_unmap, 64 * mib) + 2 * at(driver_call::mem_unmap, 2 * mib))
      << "costed per handle";
  EXPECT_NE(at(driver_call::mem_unmap, 68 * mib), counts.us_of(driver_call::mem_unmap)) << "not as one handle";
  EXPECT_EQ(counts.of(driver_call::mem_get_info), 1u);
  EXPECT_EQ(counts.of(driver_call::address_reserve), 1u);
  EXPECT_EQ(counts.memory_calls(), 1u + 3 + 3 + 3 + 1);

  ASSERT_EQ(sim.mem_release(0, big), driver_status::success);
  EXPECT_DOUBLE_EQ(sim.call_counts().us_of(driver_call::mem_release), at(driver_call::mem_release, 64 * mib));
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
  EXPECT_NEAR(sim.call_counts().us_of(driver_call::mem_set_access), 200 * cost(sim, driver_call::mem_set_access, granule),
              1e-6);
}

TEST(SimCostModel, RefusedCallsAreCountedAtTheirModelledCost) {
  sim_driver sim(small_machine());
  physical_handle handle = 0;
  EXPECT_EQ(sim.mem_create(0, 3 * mib, &handle), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_unmap(0, 0x1000, 2 * mib), driver_status::invalid_value);
  EXPECT_EQ(sim.mem_release(0, 12345), driver_status::invalid_value);
  const driver_call_counts counts = sim.call_counts();
  EXPECT_EQ(counts.of(driver_call::mem_create), 1u);
  EXPECT_NEAR(counts.us_of(driver_call::mem_create), cost(sim, driver_call::mem_create, 3 * mib), 1e-9);
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_unmap), cost(sim, driver_call::mem_unmap, 2 * mib));
  EXPECT_GT(counts.us_of(driver_call::mem_release), 0.0);
  EXPECT_DOUBLE_EQ(counts.us_of(driver_call::mem_release), cost(sim, driver_call::mem_release, 2 * mib))
      << "an unknown handle is costed at the smallest size";
}

}  // namespace
}  // namespace tidepool::test
