// Names of trace actions and the allocator-independent summary of a trace.
#include "replay/trace.hpp"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace tidepool::replay {

std::string_view to_string(trace_action action) noexcept {
  switch (action) {
    case trace_action::allocate: return "allocate";
    case trace_action::free: return "free";
    case trace_action::allocate_failure: return "allocate failure";
  }
  return "unknown";
}

trace_summary summarize(const trace& t) {
  trace_summary s;
  for (std::size_t c = 0; c + 1 < s.sizes.size(); ++c) s.sizes[c].upper_bytes = std::size_t{4096} << (4 * c);
  s.sizes.back().upper_bytes = std::numeric_limits<std::size_t>::max();
  std::unordered_map<std::uintptr_t, std::size_t> live;
  std::unordered_set<std::uintptr_t> streams;
  std::unordered_set<std::uint32_t> threads;
  std::size_t live_bytes = 0;
  s.rows = t.events.size();
  for (const trace_event& e : t.events) {
    streams.insert(e.stream);
    threads.insert(e.thread);
    switch (e.action) {
      case trace_action::allocate: {
        ++s.allocations;
        live[e.pointer] = e.size;
        live_bytes += e.size;
        if (live_bytes > s.peak_live_bytes) {
          s.peak_live_bytes = live_bytes;
          s.peak_live_allocations = live.size();
        }
        s.allocated_bytes += e.size;
        s.smallest_allocation = s.allocations == 1 ? e.size : std::min(s.smallest_allocation, e.size);
        s.largest_allocation = std::max(s.largest_allocation, e.size);
        auto cls = std::find_if(s.sizes.begin(), s.sizes.end(),
                                [&](const size_class& c) { return e.size <= c.upper_bytes; });
        ++cls->allocations;
        cls->bytes += e.size;
        break;
      }
      case trace_action::free:
        if (auto it = live.find(e.pointer); it != live.end()) {
          ++s.frees;
          live_bytes -= it->second;
          live.erase(it);
        }
        break;
      case trace_action::allocate_failure:
        ++s.failures;
        break;
    }
  }
  s.live_bytes_at_end = live_bytes;
  s.live_allocations_at_end = live.size();
  s.streams = streams.size();
  s.threads = threads.size();
  return s;
}

}  // namespace tidepool::replay
