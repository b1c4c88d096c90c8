// The cost model of the simulated GPU: tables of the H200 measurements and their interpolation.
#include "device/sim/cost_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace tidepool::detail {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

// Handle sizes of the DESIGN 2a table, and the cost of each virtual memory call at those sizes.
constexpr std::array<std::size_t, 5> measured_sizes = {2 * mib, 20 * mib, 64 * mib, 512 * mib, 2048 * mib};
using cost_row = std::array<double, 5>;
constexpr cost_row mem_create_us = {12.5, 12.7, 15.8, 25.8, 55.7};
constexpr cost_row mem_map_us = {1.6, 1.0, 1.0, 1.3, 1.2};
constexpr cost_row mem_set_access_us = {36.5, 31.6, 34.5, 58.8, 108.0};
constexpr cost_row mem_unmap_us = {21.1, 20.6, 22.1, 29.9, 43.5};
constexpr cost_row mem_release_us = {15.6, 26.0, 54.8, 366.0, 1387.0};

// cudaMalloc / cudaFree: a pair was measured at 64 us (2 MiB) to 143 us (2 GiB) (shared/DESIGN.md
// 1.4); how a pair divides between the two calls was not measured and is assumed.
constexpr double log2_of_2mib = 21.0;
constexpr double log2_of_2gib = 31.0;
constexpr double mem_alloc_low_us = 35.0, mem_alloc_high_us = 80.0;
constexpr double mem_free_low_us = 29.0, mem_free_high_us = 63.0;

// Host copies and pinned host memory: not measured; assumed rates (GiB/s), so that sleep and wake
// cost what moving their bytes would. 50 GiB/s is about a PCIe 5 x16 link's pinned copy rate;
// pinning host memory (cuMemHostAlloc) runs at a few GiB/s, freeing it faster.
constexpr double copy_gib_per_s = 50.0;
constexpr double host_alloc_gib_per_s = 4.0;
constexpr double host_free_gib_per_s = 16.0;

// Microseconds to move `bytes` at `gib_per_s`.
double per_byte_cost(double gib_per_s, std::size_t bytes) noexcept {
  return static_cast<double>(bytes) * 1e6 / (gib_per_s * static_cast<double>(std::size_t{1} << 30));
}

double log2_of(std::size_t bytes) noexcept { return std::log2(static_cast<double>(bytes)); }

// Linear in log2(size) between the measured sizes, flat below, linear in size above.
double per_handle_cost(const cost_row& row, std::size_t bytes) noexcept {
  if (bytes <= measured_sizes.front()) return row.front();
  const std::size_t last = measured_sizes.size() - 1;
  if (bytes >= measured_sizes[last]) {
    const double slope_per_byte = (row[last] - row[last - 1]) /
                                  static_cast<double>(measured_sizes[last] - measured_sizes[last - 1]);
    const double extrapolated = row[last] + slope_per_byte * static_cast<double>(bytes - measured_sizes[last]);
    // A falling last segment (cuMemMap) must not extrapolate to a cost below anything measured.
    return std::max(extrapolated, *std::min_element(row.begin(), row.end()));
  }
  std::size_t upper = 1;
  while (measured_sizes[upper] < bytes) ++upper;
  const double x0 = log2_of(measured_sizes[upper - 1]);
  const double x1 = log2_of(measured_sizes[upper]);
  const double t = (log2_of(bytes) - x0) / (x1 - x0);
  return row[upper - 1] + t * (row[upper] - row[upper - 1]);
}

// Linear in log2(size) from the 2 MiB figure to the 2 GiB one, flat below 2 MiB.
double log_linear_cost(double low_us, double high_us, std::size_t bytes) noexcept {
  const double x = std::max(log2_of(std::max<std::size_t>(bytes, 1)), log2_of_2mib);
  return low_us + (x - log2_of_2mib) * (high_us - low_us) / (log2_of_2gib - log2_of_2mib);
}

}  // namespace

double sim_call_cost_us(driver_call call, std::size_t bytes) noexcept {
  switch (call) {
    case driver_call::mem_create: return per_handle_cost(mem_create_us, bytes);
    case driver_call::mem_map: return per_handle_cost(mem_map_us, bytes);
    case driver_call::mem_set_access: return per_handle_cost(mem_set_access_us, bytes);
    case driver_call::mem_unmap: return per_handle_cost(mem_unmap_us, bytes);
    case driver_call::mem_release: return per_handle_cost(mem_release_us, bytes);
    case driver_call::mem_alloc: return log_linear_cost(mem_alloc_low_us, mem_alloc_high_us, bytes);
    case driver_call::mem_free: return log_linear_cost(mem_free_low_us, mem_free_high_us, bytes);
    // Not measured; assumed small beside the memory calls (docs/DESIGN.md marks them so).
    case driver_call::address_reserve: return 5.0;
    case driver_call::address_free: return 5.0;
    case driver_call::mem_get_info: return 1.0;
    case driver_call::event_create: return 2.0;
    case driver_call::event_destroy: return 2.0;
    case driver_call::event_record: return 1.5;
    case driver_call::event_query: return 0.3;
    case driver_call::event_synchronize: return 1.0;
    case driver_call::stream_create: return 5.0;
    case driver_call::stream_destroy: return 5.0;
    case driver_call::stream_wait_event: return 1.5;
    case driver_call::stream_synchronize: return 1.0;
    case driver_call::device_synchronize: return 1.0;
    case driver_call::async_pool_trim: return 10.0;
    case driver_call::host_alloc: return per_byte_cost(host_alloc_gib_per_s, bytes);
    case driver_call::host_free: return per_byte_cost(host_free_gib_per_s, bytes);
    case driver_call::copy_to_host: return per_byte_cost(copy_gib_per_s, bytes);
    case driver_call::copy_to_device: return per_byte_cost(copy_gib_per_s, bytes);
    // Measured on the H200 for a 24 MiB handle (docs/RESULTS.md, "Memory shared between processes").
    case driver_call::mem_export: return 617.0;
    case driver_call::mem_import: return 27.0;
    case driver_call::ipc_open: return 100.0;
    case driver_call::ipc_close: return 50.0;
    case driver_call::count_: break;
  }
  return 0.0;
}

}  // namespace tidepool::detail
