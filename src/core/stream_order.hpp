// Stream ordering: what the pool knows of each stream, the events that prove a stream's frees
// are done, and frees that wait on record_stream() streams.
//
// A block freed on stream S is reusable at once on S (work queued later on S runs after the
// work that used it) and sits in S's free index. Other streams may reuse it only once an event
// recorded on S after the free has completed; the pool records such an event only on a slow path
// (no driver call on the fast path), covering every free on S up to then (the watermark), and
// on completion hands those blocks to slot 0, "any stream". Only slot-0 memory is unmapped or
// released, so nothing is unmapped while queued work may still use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/block.hpp"
#include "core/driver_calls.hpp"
#include "tidepool/driver.hpp"

namespace tidepool::detail {

/// One stream the pool has seen.
struct stream_state {
  stream_t stream = nullptr;
  std::uint32_t slot = 0;          ///< index of its free lists in every arena (>= 1)
  std::uint64_t last_free = 0;     ///< sequence number of the last free on this stream
  event_t event = nullptr;         ///< recorded on the stream, covers frees up to `watermark`
  std::uint64_t watermark = 0;
  /// The last block freed on this stream, not yet coalesced: the next request of exactly its size
  /// on this stream takes it back without touching a free index (the same-size pair in a loop).
  block* parked = nullptr;
};

/// The streams of a pool, found by stream_t; the last one used is cached for the fast path.
class stream_registry {
 public:
  /// The state of `stream`, or nullptr if the pool has not seen it.
  [[nodiscard]] stream_state* find(stream_t stream) noexcept {
    if (last_ != nullptr && last_->stream == stream) return last_;
    auto it = by_stream_.find(stream);
    if (it == by_stream_.end()) return nullptr;
    last_ = it->second;
    return last_;
  }
  /// Adds `stream` with the next free slot.
  stream_state& add(stream_t stream);
  /// Slots in use, plus slot 0.
  [[nodiscard]] std::uint32_t slot_count() const noexcept { return static_cast<std::uint32_t>(states_.size()) + 1; }
  template <class F>
  void for_each(F&& f) {
    for (auto& s : states_) f(*s);
  }

 private:
  std::vector<std::unique_ptr<stream_state>> states_;
  std::unordered_map<stream_t, stream_state*> by_stream_;
  stream_state* last_ = nullptr;
};

/// Events the pool owns, kept on a free list so recording one rarely creates one.
class event_pool {
 public:
  explicit event_pool(driver_calls& calls) : calls_(calls) {}
  /// An event ready to record; throws tidepool::error if the driver cannot create one.
  [[nodiscard]] event_t acquire();
  /// Returns an event whose work has completed.
  void give_back(event_t event) { free_.push_back(event); }
  /// Destroys every event on the free list.
  void destroy_all() noexcept;

 private:
  driver_calls& calls_;
  std::vector<event_t> free_;
};

/// A block freed while record_stream() streams may still use it: it joins its free stream's index
/// once every event here has completed.
struct pending_free {
  block* freed = nullptr;
  std::uint32_t slot = 0;
  std::uint64_t sequence = 0;
  std::vector<event_t> events;
};

}  // namespace tidepool::detail
