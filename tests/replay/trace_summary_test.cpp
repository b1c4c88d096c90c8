// The summary of a trace, what `tidepool info TRACE` prints: rows, peak live and the allocations
// live at that moment, live at the end, streams, threads, and allocations by size class.
#include <gtest/gtest.h>

#include <cstddef>
#include <limits>

#include "replay/trace.hpp"

namespace tidepool::replay::testing {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * 1024;

trace_event row(trace_action action, std::uintptr_t pointer, std::size_t size, std::uint32_t thread = 0,
                std::uintptr_t stream = 0) {
  trace_event e;
  e.action = action;
  e.pointer = pointer;
  e.size = size;
  e.thread = thread;
  e.stream = stream;
  return e;
}

TEST(TraceSummary, CountsRowsThreadsStreamsPeaksAndSizes) {
  trace t;
  t.events = {
      row(trace_action::allocate, 0x1, 4 * KiB),              // up to 4 KiB (bounds are inclusive)
      row(trace_action::allocate, 0x2, 4 * KiB + 1, 1),       // up to 64 KiB
      row(trace_action::allocate, 0x3, 20 * MiB, 0, 0x7f),    // up to 256 MiB
      row(trace_action::free, 0x3, 20 * MiB),
      row(trace_action::allocate_failure, 0x0, 8 * MiB, 2),
      row(trace_action::allocate, 0x4, std::size_t{5} << 30),  // over 4 GiB
      row(trace_action::free, 0x1, 4 * KiB),
  };
  const trace_summary s = summarize(t);
  EXPECT_EQ(s.rows, 7u);
  EXPECT_EQ(s.allocations, 4u);
  EXPECT_EQ(s.frees, 2u);
  EXPECT_EQ(s.failures, 1u);
  EXPECT_EQ(s.threads, 3u);
  EXPECT_EQ(s.streams, 2u);
  EXPECT_EQ(s.peak_live_bytes, 4 * KiB + 4 * KiB + 1 + (std::size_t{5} << 30));
  EXPECT_EQ(s.peak_live_allocations, 3u);
  EXPECT_EQ(s.live_bytes_at_end, 4 * KiB + 1 + (std::size_t{5} << 30));
  EXPECT_EQ(s.live_allocations_at_end, 2u);
  EXPECT_EQ(s.smallest_allocation, 4 * KiB);
  EXPECT_EQ(s.largest_allocation, std::size_t{5} << 30);
  EXPECT_EQ(s.allocated_bytes, 8 * KiB + 1 + 20 * MiB + (std::size_t{5} << 30));
  const std::size_t uppers[] = {4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB, std::size_t{4} << 30,
                                std::numeric_limits<std::size_t>::max()};
  const std::size_t counts[] = {1, 1, 0, 0, 1, 0, 1};
  for (std::size_t c = 0; c < s.sizes.size(); ++c) {
    EXPECT_EQ(s.sizes[c].upper_bytes, uppers[c]) << c;
    EXPECT_EQ(s.sizes[c].allocations, counts[c]) << c;
  }
  EXPECT_EQ(s.sizes[4].bytes, 20 * MiB);
}

TEST(TraceSummary, OfAnEmptyTraceIsAllZero) {
  const trace_summary s = summarize(trace{});
  EXPECT_EQ(s.rows, 0u);
  EXPECT_EQ(s.threads, 0u);
  EXPECT_EQ(s.smallest_allocation, 0u);
  EXPECT_EQ(s.peak_live_bytes, 0u);
}

}  // namespace
}  // namespace tidepool::replay::testing
