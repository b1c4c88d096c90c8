// tidepool::out_of_memory: the report's message, built once when the exception is made.
#include <fmt/format.h>

#include <limits>
#include <string>

#include "tidepool/errors.hpp"

namespace tidepool {

namespace {
// "1.50 GiB (1610612736 bytes)": readable and exact.
std::string bytes_text(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  unsigned unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.2f} {} ({} bytes)", value, units[unit], bytes);
}
}  // namespace

out_of_memory::out_of_memory(const out_of_memory_report& report) : report_(report) {
  message_ = fmt::format(
      "tidepool: out of memory on device {}: requested {}; in use {}; cached {}; driver free {}; largest possible {}",
      report.device, bytes_text(report.requested_bytes), bytes_text(report.in_use_bytes),
      bytes_text(report.cached_bytes), bytes_text(report.driver_free_bytes),
      bytes_text(report.largest_possible_bytes));
  if (report.byte_cap != std::numeric_limits<std::size_t>::max()) {
    message_ += fmt::format("; byte cap {}", bytes_text(report.byte_cap));
  }
  if (report.compactable_bytes != 0) {
    // Why a request can fail with more than it asks for cached: free memory the pool cannot hand
    // back without moving live bytes, and what would.
    message_ += fmt::format(
        "; {} of the cached memory lies free in handles that live allocations also touch, which only "
        "moving their bytes hands back (compact(), or the pool option compact_on_out_of_memory here)",
        bytes_text(report.compactable_bytes));
  }
}

}  // namespace tidepool
