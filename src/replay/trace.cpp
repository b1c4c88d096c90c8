// Names of trace actions and the allocator-independent summary of a trace.
#include "replay/trace.hpp"

#include <algorithm>
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
  std::unordered_map<std::uintptr_t, std::size_t> live;
  std::unordered_set<std::uintptr_t> streams;
  std::size_t live_bytes = 0;
  for (const trace_event& e : t.events) {
    streams.insert(e.stream);
    switch (e.action) {
      case trace_action::allocate:
        ++s.allocations;
        live[e.pointer] = e.size;
        live_bytes += e.size;
        s.peak_live_bytes = std::max(s.peak_live_bytes, live_bytes);
        break;
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
  return s;
}

}  // namespace tidepool::replay
