// Stream ordering: what the pool knows of each stream, the events that prove a stream's frees are
// done, and frees that wait on record_stream() streams.
//
// A block freed on stream S is reusable at once on S (work queued later on S runs after the work
// that used it) and sits in S's free index. Other streams may reuse it once an event recorded on S
// after the free has completed; then it moves to slot 0, "any stream". Only slot-0 memory is
// unmapped or released, so nothing is unmapped while queued work may still use it.
//
// The pool names a stream to the driver only inside a call that names it too (allocate,
// deallocate, record_stream on S, and a block freed with S among its record_stream streams), never
// from a slow path on another stream: a program may destroy a stream at any time (CuPy does when a
// stream is collected), and recording on a destroyed stream is a use after free in CUDA. An event
// recorded before the destruction stays valid and completes with the stream's work
// (cuStreamDestroy lets queued work finish), so slow paths only query events. So that recording
// stays rare (an event record costs about 1.5 us on the GPU), a stream has at most two events in
// flight, and records: at its first free after its events settled (so a free followed by no
// other call on the stream still reaches other streams), at an allocation while frees no event
// covers remain and there is room, and at a miss on it (recording its newest event again if two
// are in flight: its own frees must be within reach of growth). Frees that no event covers (a
// stream destroyed right after a burst of frees) reach every stream at the next device-wide wait:
// release(), the out-of-memory path, the destructor.
//
// Identity: a handle names one stream, except CU_STREAM_LEGACY (0x1: the default stream, as nullptr)
// and CU_STREAM_PER_THREAD (0x2: each thread's own stream, so its state is kept per thread). A
// handle the program destroyed may come back for a new stream; the pool cannot see that, so a
// program (or front end) that destroys streams tells it with pool::forget_stream(): the state is
// retired (never named to the driver again, its frees settle by their events or the next
// device-wide wait) and the handle starts afresh. A stream's slot (its index in every arena) is
// recycled once it holds nothing: no live block allocated on it, no free block, no event, no
// pending free or record_stream() use.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/block.hpp"
#include "core/driver_calls.hpp"
#include "tidepool/driver.hpp"

namespace tidepool::detail {

/// CUDA's special stream handles.
inline constexpr std::uintptr_t legacy_stream_handle = 0x1;      // CU_STREAM_LEGACY: the default stream
inline constexpr std::uintptr_t per_thread_stream_handle = 0x2;  // CU_STREAM_PER_THREAD: the caller's own

/// A number for the calling thread, never reused by another thread (0 is never handed out).
[[nodiscard]] std::uint64_t this_thread_key() noexcept;

/// An event recorded on a stream: once it completes, every free on the stream numbered up to
/// `watermark` is done.
struct stream_event {
  event_t event = nullptr;
  std::uint64_t watermark = 0;
};

struct graph_watch;  // graph_capture.hpp

/// One stream the pool has seen. The fields the fast paths touch come first. A stream captured into
/// a CUDA graph has a second state per capture (graph_capture.hpp): `capture` names it.
struct stream_state {
  static constexpr std::uint32_t max_events = 2;

  stream_t stream = nullptr;     ///< the handle events are recorded on (0x2: the thread's own stream)
  std::uint64_t thread = 0;      ///< CU_STREAM_PER_THREAD: this_thread_key() of its thread; else 0
  std::uint32_t slot = 0;        ///< index of its free lists in every arena (>= 1)
  bool record_due = true;        ///< its events settled: its next free (or allocation, with frees uncovered) records one
  bool retired = false;          ///< forgotten: never named to the driver again, found by no handle
  /// The last block freed on this stream, not yet coalesced: the next request of exactly its size
  /// on this stream takes it back without touching a free index (the same-size pair in a loop).
  block* parked = nullptr;
  std::uint64_t last_free = 0;   ///< number of the last free on this stream
  std::uint64_t live = 0;        ///< live blocks allocated on this stream
  std::uint64_t covered = 0;     ///< frees up to here are covered by a recorded event
  std::uint64_t completed = 0;   ///< frees up to here are known done (an event completed, or a device wait)
  std::array<stream_event, max_events> events{};  ///< in flight, oldest first
  std::uint32_t in_flight = 0;
  /// Pending frees and record_stream() lists that refer to it, and slow paths that use it with the
  /// pool's lock dropped: it keeps its slot while any remain.
  std::uint32_t holds = 0;
  /// A capture's state: the capture's id, or graph_pool_key() of the graph pool its captures
  /// share (else 0), and what says when its graphs are gone: a list of watches, one per capture
  /// that allocated through it (nullptr once all are gone: graph_capture.cpp). A watch the driver
  /// could not place never says so.
  std::uint64_t capture = 0;
  graph_watch* graph = nullptr;
};

/// Keeps a stream's state (and its slot) for a slow path that may drop the pool's lock or settle
/// frees, which recycles the slots of streams that hold nothing. Made and dropped under the lock.
class stream_hold {
 public:
  explicit stream_hold(stream_state& s) noexcept : s_(s) { ++s_.holds; }
  ~stream_hold() { --s_.holds; }
  stream_hold(const stream_hold&) = delete;
  stream_hold& operator=(const stream_hold&) = delete;

 private:
  stream_state& s_;
};

/// The streams of a pool, found by handle (per thread for CU_STREAM_PER_THREAD) and by slot.
class stream_registry {
 public:
  /// The state the handle `stream` names for the calling thread, or nullptr if none.
  [[nodiscard]] stream_state* find(stream_t stream) {
    if (last_ != nullptr && last_->stream == stream && last_->thread == 0) return last_;
    return find_slow(stream);
  }
  /// Adds a state for `stream` (as the calling thread names it) in a free slot.
  stream_state& add(stream_t stream);
  /// The state of capture `capture` on `stream`, or nullptr if none.
  [[nodiscard]] stream_state* find_capture(std::uint64_t capture, stream_t stream);
  /// Adds a state for capture `capture` on `stream` in a free slot; no handle finds it.
  stream_state& add_capture(std::uint64_t capture, stream_t stream);
  /// find_capture(capture, stream) finds `state` from now on, until `state` is retired (a capture
  /// that joined a graph pool's state: graph_capture.hpp).
  void alias_capture(std::uint64_t capture, stream_t stream, stream_state& state);
  /// Whether `stream`, named by the calling thread, is the handle `state` was found by.
  [[nodiscard]] static bool names(const stream_state& state, stream_t stream) noexcept;
  /// The state in `slot` (which must hold one).
  [[nodiscard]] stream_state& at(std::uint32_t slot) noexcept { return *by_slot_[slot]; }
  /// No handle finds `state` from now on; it keeps its slot until recycled.
  void retire(stream_state& state);
  /// Frees the slot of `state`, which must hold nothing (see the file comment).
  void recycle(stream_state& state);
  /// Whether `slot` holds a state (a recycled slot held nothing when it was recycled).
  [[nodiscard]] bool holds(std::uint32_t slot) const noexcept { return slot < by_slot_.size() && by_slot_[slot] != nullptr; }
  /// One past the highest slot (slot 0 is "any stream" and has no state).
  [[nodiscard]] std::uint32_t slot_count() const noexcept { return static_cast<std::uint32_t>(by_slot_.size()); }
  /// States held now.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Calls f(stream_state&) for every state; f may recycle the state it is given.
  template <class F>
  void for_each(F&& f) {
    for (std::size_t slot = 1; slot < by_slot_.size(); ++slot) {
      if (by_slot_[slot] != nullptr) f(*by_slot_[slot]);
    }
  }

 private:
  struct key {
    stream_t stream = nullptr;
    std::uint64_t thread = 0;
    bool operator==(const key&) const = default;
  };
  struct key_hash {
    std::size_t operator()(const key& k) const noexcept {
      return std::hash<stream_t>()(k.stream) ^ (k.thread * 0x9E3779B97F4A7C15ull);
    }
  };
  // The state's identity: nullptr for the legacy stream, the calling thread for the per-thread one.
  static key key_of(stream_t stream) noexcept;
  stream_state* find_slow(stream_t stream);
  // A new state for key `k` in a free slot, in no map yet.
  stream_state& add_in_free_slot(key k);
  // Takes `state` out of the map that finds it.
  void unkey(const stream_state& state);

  std::vector<std::unique_ptr<stream_state>> by_slot_ = std::vector<std::unique_ptr<stream_state>>(1);
  std::vector<std::uint32_t> free_slots_;
  std::unordered_map<key, stream_state*, key_hash> by_key_;
  // Captures' states, by (capture id or graph pool key, stream): keyed apart, so a handle never
  // finds one. A capture that joined a graph pool's state has a key of its own here too.
  std::unordered_map<key, stream_state*, key_hash> by_capture_;
  stream_state* last_ = nullptr;
  std::size_t size_ = 0;
};

/// Events the pool owns, kept on a free list so recording one rarely creates one.
class event_pool {
 public:
  explicit event_pool(driver_calls& calls) : calls_(calls) {}
  /// An event ready to record; throws tidepool::error if the driver cannot create one.
  [[nodiscard]] event_t acquire();
  /// Returns an event the pool no longer waits on.
  void give_back(event_t event) { free_.push_back(event); }
  /// Destroys every event on the free list.
  void destroy_all() noexcept;

 private:
  driver_calls& calls_;
  std::vector<event_t> free_;
};

/// A block freed while record_stream() streams, or the stream it was freed on when that is not
/// the one it was allocated on, may still use it: it joins a free index once every event here has
/// completed (and, when one of those streams could not be named, after the next device-wide wait).
struct pending_free {
  block* freed = nullptr;
  /// The stream it was freed on; or, freed_elsewhere, the one it was allocated on.
  std::uint32_t slot = 0;
  std::uint64_t sequence = 0;
  std::vector<event_t> events;
  bool needs_device_wait = false;
  /// Freed on another stream than `slot`: the events include the freeing stream's; once they
  /// complete the block joins `slot`'s frees as one made then (pool_impl::complete_pending).
  bool freed_elsewhere = false;
};

}  // namespace tidepool::detail
