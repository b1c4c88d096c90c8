// pool_impl: the pool of one device. It owns the four arenas (small and large, each for scratch
// and for persistent requests), the page table, the map of live allocations, the streams and the
// figures, all under one lock; the blocks it lends to threads' caches (thread_cache.hpp) are
// handed out and taken back under each cache's own lock.
//
// Fast paths (allocate/deallocate of cached memory) are inline here: validate, take the lock,
// find the stream (cached), take or give back a block in its arena, update the map and the
// figures. No heap allocation in the steady state, and no driver call in the common case: an event
// may be recorded on the call's stream when its events have settled (stream_order.hpp), a take()
// from a large arena may split a large handle that the new block would pin only a small part of
// (placement.cpp), and with an automatic release policy (pool_options::release) an operation may
// hand free handles back (after_operation). Everything else lives in:
//   pool_impl.cpp        construction, tear-down, record_stream, queries, stats, bad input
//   growth.cpp           mapping stolen or new handles under a request that the cache cannot serve
//   release_policy.cpp   events that make frees safe for every stream, release, automatic release
//   out_of_memory_path.cpp  reclaiming everywhere before giving up, and the report
//   sleep_wake.cpp       handing every handle back while keeping addresses, and taking them again
//   compaction.cpp       handles live blocks cover in part made again under just what they touch
//   pool_thread_caches.cpp  blocks lent to threads' caches (thread_cache.hpp), which serve
//                        same-size pairs of a contended thread before the lock
//   graph_capture.cpp    blocks allocated in a CUDA graph capture, kept for the graph's life
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/address_map.hpp"
#include "core/arena.hpp"
#include "core/block.hpp"
#include "core/driver_calls.hpp"
#include "core/page_table.hpp"
#include "core/spin_lock.hpp"
#include "core/stream_order.hpp"
#include "core/thread_cache.hpp"
#include "core/units.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::detail {

class pool_impl {
 public:
  pool_impl(std::shared_ptr<driver> drv, int device, pool_options options);
  ~pool_impl();
  pool_impl(const pool_impl&) = delete;
  pool_impl& operator=(const pool_impl&) = delete;

  /// See tidepool::pool::allocate.
  void* allocate(std::size_t bytes, stream_t stream, lifetime hint) {
    if (bytes == 0 || bytes > device_total_) throw_invalid_size(bytes);
    const std::size_t size = round_up(bytes, block_alignment);
    arena& where = arena_for(size, hint);
    // A stream being captured into a CUDA graph allocates through its capture's state
    // (graph_capture.cpp); the legacy default stream cannot be captured and is never asked about.
    stream_capture capture;
    const bool captured = stream_captured(stream, capture);
    if (has_thread_caches_.load(std::memory_order_relaxed) && !captured) [[unlikely]] {
      if (thread_cache* c = thread_cache_for(id_)) {
        if (void* p = c->take(size, &where, cache_stream_key(stream), bytes)) return p;
      }
    }
    const bool contended = lock_.lock_and_tell();
    std::lock_guard guard(lock_, std::adopt_lock);
    note_locked_call(contended);
    if (asleep_) [[unlikely]] wait_out_compaction(bytes);
    stream_state* s = captured ? &capture_state(stream, capture) : streams_.find(stream);
    if (s == nullptr) s = &add_stream(stream);
    if (held_back_frees_waiting_) [[unlikely]] held_back_frees_waiting_ = settle_held_back_frees(true);
    // The stream is alive while the program allocates on it: the moment to cover its frees.
    if (s->record_due && s->last_free > s->covered) record_or_throw(*s);
    block* b = s->parked;
    if (b != nullptr && b->size == size && b->owner_arena == &where &&
        where.parked_is_best_fit(b, s->slot, free_slot(*s, b->free_sequence))) {
      s->parked = nullptr;
      b->state = block_state::live;
    } else {
      // Not the same size, or not where best fit would place the request: the parked block joins
      // its neighbours now, so placement is exactly what it would have been without parking.
      give_back_parked(*s);
      b = where.take(size, s->slot, true);
      if (b == nullptr) {
        const stream_hold hold(*s);  // the slow path recycles idle streams' slots, and may drop the lock
        cover_frees(*s);
        held_before_miss_ = pages_.held_bytes();
        // A request that could not fit even with the whole cache handed back goes straight to the
        // out-of-memory path: growth would only move cached handles around for it.
        b = could_ever_fit(size) ? allocate_slow(where, size, bytes, *s) : out_of_memory_path(where, size, bytes, *s);
      }
    }
    ++s->live;
    b->requested = bytes;
    live_.insert(b->address, b);
    in_use_ += size;
    requested_ += bytes;
    // Blocks lent to threads' caches count as in use here: they may be handed out with no lock.
    peak_in_use_ = std::max(peak_in_use_, in_use_ + lent_bytes_ + held_back_bytes_);
    reported_peak_in_use_ = std::max(reported_peak_in_use_, in_use_ + lent_bytes_);
    peak_requested_ = std::max(peak_requested_, requested_ + lent_bytes_);
    ++allocations_;
    if (recording_) [[unlikely]] note(recorded_event::kind::allocate, b->address, bytes, stream);
    if (automatic_release_) after_operation(false, *s);
    return reinterpret_cast<void*>(b->address);
  }

  /// See tidepool::pool::export_allocation (pool_export.cpp).
  exported_allocation export_allocation(const void* ptr);
  /// See tidepool::pool::end_export (pool_export.cpp).
  void end_export(const void* ptr);

  /// See tidepool::pool::deallocate.
  void deallocate(void* ptr, stream_t stream) {
    const auto address = reinterpret_cast<device_address>(ptr);
    if (has_thread_caches_.load(std::memory_order_relaxed)) [[unlikely]] {
      if (thread_cache* c = thread_cache_for(id_); c != nullptr && c->give(address, cache_stream_key(stream))) return;
    }
    const bool contended = lock_.lock_and_tell();
    std::lock_guard guard(lock_, std::adopt_lock);
    note_locked_call(contended);
    block* b = live_.find(address);
    if (b == nullptr) throw_bad_pointer("deallocate", ptr);
    if (b->state == block_state::lent) [[unlikely]] take_back_handed_out(b, "deallocate", ptr);
    stream_state* s = streams_.find(stream);
    if (s == nullptr || b->owner != s->slot) s = &stream_for_free(*b, stream, s);
    // Freed by a thread with a cache, on the stream it was allocated on: lent to that cache.
    if (has_thread_caches_.load(std::memory_order_relaxed) && b->owner == s->slot && !b->has_extra_streams &&
        s->capture == 0) [[unlikely]] {
      if (lend(b, stream, *s)) return;
    }
    const std::size_t requested = b->requested;
    // An event recorded now covers this free too (it gets the next number).
    if (s->record_due) (void)record_event(*s, free_sequence_ + 1);
    --(b->owner == s->slot ? *s : streams_.at(b->owner)).live;
    live_.erase(address);
    in_use_ -= b->size;
    requested_ -= requested;
    ++deallocations_;
    const std::uint64_t sequence = ++free_sequence_;
    s->last_free = sequence;
    if (const bool elsewhere = held_back_for_its_stream(*b, *s); b->has_extra_streams || elsewhere) {
      free_held_back(b, *s, sequence, elsewhere);
    } else {
      // Park it as the stream's last free; the one parked before goes to its free index.
      if (block* older = s->parked) {
        older->owner_arena->give_back(older, free_slot(*s, older->free_sequence), older->free_sequence,
                                      older->freed_tick);
      }
      b->state = block_state::parked;
      b->owner = s->slot;
      b->free_sequence = sequence;
      b->freed_tick = tick_;
      s->parked = b;
    }
    if (recording_) [[unlikely]] note(recorded_event::kind::free, address, requested, stream);
    if (automatic_release_) after_operation(true, *s);
  }

  void record_stream(void* ptr, stream_t stream);
  void forget_stream(stream_t stream);
  std::size_t release();
  [[nodiscard]] std::size_t allocation_size(const void* ptr);
  [[nodiscard]] bool owns(const void* ptr);
  [[nodiscard]] std::size_t available_bytes();
  [[nodiscard]] pool_stats stats();
  /// See tidepool::pool::reset_peak_stats.
  void reset_peak_stats();
  /// See tidepool::pool::set_byte_cap and byte_cap.
  void set_byte_cap(std::size_t bytes);
  [[nodiscard]] std::size_t byte_cap();
  void enable_peer_access(int peer_device);

  // pool_thread_caches.cpp
  /// Takes back every block of `cache`, whose thread is ending (thread_cache.cpp).
  void take_back_cache(thread_cache& cache);

  // pool_describe.cpp
  [[nodiscard]] pool_description describe();

  // compaction.cpp (see tidepool::pool::compact)
  std::size_t compact();
  // sleep_wake.cpp (see tidepool::pool::sleep)
  std::size_t sleep(sleep_keep keep);
  void wake();
  [[nodiscard]] bool asleep();

  // pool_recording.cpp (see tidepool::pool::start_recording)
  void start_recording(std::size_t notify_at, recording_full_fn on_full, void* context);
  void take_recorded(std::vector<recorded_event>& out);
  void stop_recording(std::vector<recorded_event>& out);
  /// fork(): the pool's lock and every thread cache's held across it (pool, then caches, the order
  /// the pool takes them in), so neither process's copy is caught mid-operation: a thread in its
  /// cache's fast path at fork() would leave the child a cache whose lock no thread can drop.
  void lock_for_fork() noexcept {
    lock_.lock();
    for (const auto& c : caches_) c->lock().lock();
  }
  void unlock_after_fork() noexcept {
    for (const auto& c : caches_) c->lock().unlock();
    lock_.unlock();
  }
  /// In a forked child: the kept exports are closed first (page_table::close_exports), since an
  /// open one would keep its handle's memory alive after the parent released it.
  void unlock_in_forked_child() noexcept {
    pages_.close_exports();
    unlock_after_fork();
  }
  /// Whether an operation filled the buffer: the public pool then calls call_on_full() once the
  /// pool's lock is dropped. A relaxed load, so the fast path pays one read for it.
  [[nodiscard]] bool recording_full() const noexcept { return recording_full_.load(std::memory_order_relaxed); }
  void call_on_full();

  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] const pool_options& options() const noexcept { return options_; }
  [[nodiscard]] const std::shared_ptr<driver>& get_driver() const noexcept { return driver_; }

 private:
  enum class growth { grown, no_memory };

  // Whether stream `slot`'s frees up to `sequence` are known complete: already settled, or the
  // oldest event covering them has completed (queried, nothing settled: placement calls this with
  // blocks out of their indices). arena::frees_done_fn.
  static bool frees_done(void* self, std::uint32_t slot, std::uint64_t sequence);
  // Whether growing by `bytes` would pass the growth budget (beyond_growth_budget).
  // arena::growth_would_steal_fn.
  static bool growth_would_steal(void* self, std::size_t bytes);
  [[nodiscard]] arena& arena_for(std::size_t size, lifetime hint) noexcept {
    const unsigned tier = size <= options_.small_size_threshold ? 0u : 2u;
    return *arenas_[tier + (hint == lifetime::persistent ? 1u : 0u)];
  }

  // pool_impl.cpp
  stream_state& add_stream(stream_t stream);
  // The stream a free of live block `b` on `stream` is booked on (`found`: what the handle names
  // now, or nullptr): the retired stream `b` was allocated on when the handle named that one.
  stream_state& stream_for_free(const block& b, stream_t stream, stream_state* found);
  [[noreturn]] void throw_invalid_size(std::size_t bytes) const;
  [[noreturn]] void throw_bad_pointer(const char* operation, const void* ptr);
  /// Whether block `b`, freed on `freeing`, another stream than the one it was allocated on (a
  /// communication stream's free, as RMM's and cudaFreeAsync's callers make), is held back until
  /// `freeing`'s work is done and then joins the frees of the stream it was allocated on, as one
  /// made there then (free_held_back, complete_pending): unless it was allocated in a graph
  /// capture (graph_capture.cpp keeps those). That stream reuses it at once, the others after its
  /// next event, or a device-wide wait if it was forgotten: it may have had work queued on the
  /// memory before the block was handed out. Where `freeing` cannot be recorded on (being
  /// captured), the block waits for a device-wide wait. Kept in `freeing`'s list, which a
  /// communication stream never allocates from, it reached the allocating stream only at a miss,
  /// after best fit had placed requests elsewhere, and took free neighbours with it (RESULTS
  /// section 0, "Frees on another stream"); and `freeing` or any stream reused it under that
  /// queued work.
  [[nodiscard]] bool held_back_for_its_stream(const block& b, const stream_state& freeing);
  /// Calls `visit(id, start)` for each handle under the first `requested` bytes of live block `b`
  /// (at least one), in address order, with where that mapping of it starts: what
  /// export_allocation exports (pool_export.cpp).
  template <typename Visit>
  void for_each_handle_of(const block& b, std::size_t requested, Visit visit) {
    const address_range& range = *b.range;
    const device_address end = b.address + std::max<std::size_t>(requested, 1);
    for (device_address at = b.address; at < end;) {
      const std::uint32_t id = range.page_handle[(at - range.base) / pages_.granularity()];
      const device_address start = pages_.mapping_start(id, at);
      visit(id, start);
      at = start + pages_.record(id).size;
    }
  }
  /// The live block at `ptr` as the program holds it (handed out by a thread's cache, if lent),
  /// its requested bytes in `requested`; throws invalid_pointer for `operation` otherwise.
  const block& handed_out_block(const void* ptr, const char* operation, std::size_t& requested);
  /// Frees `b` on `s` once the work it waits for is done: that of the streams record_stream()
  /// named, and of `s` itself when `b` was allocated on another stream (`elsewhere`:
  /// held_back_for_its_stream). Until then it is pending, and allocations look for its events
  /// (settle_held_back_frees).
  void free_held_back(block* b, stream_state& s, std::uint64_t sequence, bool elsewhere);
  /// The figures, under the lock.
  [[nodiscard]] pool_stats stats_locked();

  // graph_capture.cpp
  /// Whether `stream` is the legacy default stream (nullptr or CU_STREAM_LEGACY), never captured.
  [[nodiscard]] static bool is_legacy_stream(stream_t stream) noexcept {
    return stream == nullptr || reinterpret_cast<std::uintptr_t>(stream) == legacy_stream_handle;
  }
  /// Whether `stream` is being captured into a graph now (the driver's answer in `capture`):
  /// always false with follow_graph_captures off, and for the legacy stream without asking.
  bool stream_captured(stream_t stream, stream_capture& capture) {
    return options_.follow_graph_captures && !is_legacy_stream(stream) && captured_now(stream, capture);
  }
  /// stream_captured where only the answer matters (an event about to be recorded on `stream`:
  /// one recorded in a capture cannot be queried afterwards).
  bool stream_captured(stream_t stream) {
    stream_capture capture;
    return stream_captured(stream, capture);
  }
  /// The driver's answer for `stream` (capture_of); false where it gives none.
  bool captured_now(stream_t stream, stream_capture& capture);
  /// The state of `capture` on `stream`, made (or, under a graph pool, joined) and the graph
  /// watched on the capture's first allocation there.
  stream_state& capture_state(stream_t stream, const stream_capture& capture);
  /// Adds a watch of `capture`'s graph to `s`'s list.
  void watch_graph_of(stream_state& s, const stream_capture& capture);
  /// Whether `s` is a capture's state one of whose graphs may still launch. Once the driver said
  /// all are gone, hands its free blocks to every stream and retires it (and says false).
  bool kept_for_graph(stream_state& s);
  /// Free bytes kept for graphs still alive (stats).
  [[nodiscard]] std::size_t graph_kept_bytes();
  /// The pool's part of every graph watch goes (the destructor).
  void let_go_of_graphs() noexcept;

  // pool_thread_caches.cpp (thread_cache.hpp)
  /// Whether blocks may be lent now: not while recording, asleep, or releasing automatically.
  [[nodiscard]] bool caches_allowed() const noexcept {
    return options_.thread_caches != thread_cache_policy::never && !recording_ && !automatic_release_ && !asleep_;
  }
  /// Counts a locked allocate or free (`contended`: the lock was held when asked) in the
  /// contention window; once the pool is contended (or with thread_cache_policy::always), gives
  /// the calling thread a cache if it has none.
  void note_locked_call(bool contended) {
    window_contended_ += contended ? 1u : 0u;
    if (++window_calls_ == contention_window::calls) [[unlikely]] end_contention_window();
    if (caching_threads_) [[unlikely]] give_this_thread_a_cache();
  }
  void end_contention_window() noexcept;
  /// Makes a cache for the calling thread if it has none and caches are allowed.
  void give_this_thread_a_cache();
  /// Lends live block `b`, freed by the calling thread on `stream` (state `s`, the stream it was
  /// allocated on), to the thread's cache; false if the thread has none or it has no room.
  bool lend(block* b, stream_t stream, stream_state& s);
  /// Lent block `b`, named by the program in `operation` of `ptr`: handed out, it becomes an
  /// ordinary live block again; waiting in its cache (a double free), throws as throw_bad_pointer.
  void take_back_handed_out(block* b, const char* operation, const void* ptr);
  /// Whether lent block `b` is handed out now, and for how many bytes.
  [[nodiscard]] bool handed_out(const block& b, std::size_t* requested);
  /// Takes blocks back from every cache: those waiting become free blocks of their stream (as if
  /// freed now); with handed_out_too, the handed-out ones become ordinary live blocks. `only`:
  /// just the blocks of that stream slot (0: all).
  void take_back_lent(bool handed_out_too, std::uint32_t only = 0);
  /// Entry `i` of `c` (whose lock the caller holds) back to the pool: see take_back_lent.
  void take_back_entry(thread_cache& c, std::size_t i);
  /// Adds what every cache handed out to `s` (stats).
  void add_cache_figures(pool_stats& s);

  // sleep_wake.cpp
  [[noreturn]] void throw_asleep(std::size_t bytes) const;

  // compaction.cpp
  /// While it lives the pool is compacting: allocate() waits, thread caches are taken back,
  /// automatic release is off.
  struct compaction_scope {
    explicit compaction_scope(pool_impl& pool);
    ~compaction_scope();
    compaction_scope(const compaction_scope&) = delete;
    compaction_scope& operator=(const compaction_scope&) = delete;
    pool_impl& p;
  };
  /// allocate() found asleep_: waits (the lock dropped) while a compaction runs, then throws if
  /// the pool is asleep.
  void wait_out_compaction(std::size_t bytes);
  /// What re-making every partly live handle would hand back (frees not yet free for every stream
  /// count as touched; handles that stay awake, handles_staying_awake(), are not re-made).
  [[nodiscard]] std::size_t compactable_bytes();
  /// Re-makes partly live handles, most handed back first, until `enough` more bytes went back
  /// (added to `released`) or none is left that can move. Lock held, in a compaction_scope, the
  /// streams waited for.
  void remake_partly_live(std::size_t enough, std::size_t& released);
  /// One handle's move (compaction.cpp's header says how); false where there was no room for its
  /// new handles, which leaves it as it was. Throws on a driver failure.
  bool remake_one(arena& a, arena::partly_live_handle& h, std::size_t& released);
  /// The out-of-memory path's last step: compaction of the partly live handles, when what they
  /// would hand back covers what `need` lacks (out_of_memory_path.cpp).
  bool compact_for(std::size_t need, const stream_state& s);
  /// Waits for the work queued on every stream that may use the pool's memory (sleep).
  void wait_for_streams_in_use();
  /// Trims each slept handle that live blocks touched only in part to the runs of granules they
  /// touch (as compact() does awake handles; no copy: the contents were copied block by block), so
  /// that wake() maps no granule only free blocks lay on; those become unmapped room.
  void trim_slept_handles(const std::unordered_set<std::uint32_t>& shared);
  /// Joins the slept handles lying wholly inside one live block, so that wake() makes one handle
  /// where growth had made several; drops the joined ids from sleep_ids_.
  void join_slept_handles();
  /// The mapped handles sleep() leaves awake: those with an export in use, and every handle under
  /// a live block on one of them, and so on (sleep_wake.cpp).
  std::unordered_set<std::uint32_t> handles_staying_awake();
  /// Sleeps the first `count` of sleep_ids_ again after a failed wake (their contents are still in
  /// the host copy); false if one could not be.
  bool undo_wake(std::size_t count);
  /// Copies every kept block between the device and the host copy, on a stream of the pool's
  /// own, and waits for the copies.
  driver_status copy_kept(bool to_host);
  /// Drops the sleep state with no driver call but freeing the host copy (the destructor).
  void forget_sleep() noexcept;

  // pool_recording.cpp: appends one event to the buffer (under the lock, while recording_).
  void note(recorded_event::kind what, device_address address, std::size_t size, stream_t stream);

  // growth.cpp
  block* allocate_slow(arena& where, std::size_t size, std::size_t requested, stream_state& s);
  /// Maps memory for a request of `size` on stream `slot` in `where` (see the top of growth.cpp);
  /// with `round_streak` false, never more than the request lacks.
  growth grow(arena& where, std::size_t size, std::uint32_t slot, bool round_streak = true);
  /// max(peak in use, in use + lent + held back + size): peak in use once a request of `size` is
  /// served, what the budgets below and growth streaks scale with.
  [[nodiscard]] std::size_t peak_with(std::size_t size) const noexcept;
  /// (1 + slack) * peak_with(size): what the budgets below share.
  [[nodiscard]] double budget_with(double slack, std::size_t size) const noexcept;
  /// The alias budget for a request of `size`: (1 + min(alias_slack, growth_slack)) *
  /// peak_with(size).
  [[nodiscard]] double alias_budget(std::size_t size) const noexcept;
  /// The growth budget for a request of `size`: (1 + growth_slack) * peak_with(size).
  [[nodiscard]] double growth_budget(std::size_t size) const noexcept;
  /// Whether mapping `size` more bytes would take held memory past the growth budget, so that
  /// growth must steal.
  [[nodiscard]] bool beyond_growth_budget(std::size_t size) const noexcept;
  /// Whether `bytes` more may be mapped under the byte cap and pool_options::headroom (the driver's
  /// free figure read once into `headroom_budget`, which is reduced by what is counted);
  /// `from_recycled` of them are handles the out-of-memory path kept (handle_recycling.cpp), which
  /// the driver's free figure does not include.
  [[nodiscard]] bool within_limits(std::size_t bytes, std::size_t& headroom_budget, std::size_t from_recycled = 0);

  // stream_order.cpp's side of the pool (release_policy.cpp)
  /// Where a block freed on `s` with number `sequence` goes: slot 0 if an event of `s` that covers
  /// it already completed, else `s`'s own slot.
  [[nodiscard]] static std::uint32_t free_slot(const stream_state& s, std::uint64_t sequence) noexcept {
    return sequence <= s.completed ? 0 : s.slot;
  }
  /// Gives `s`'s parked block, if any, to the free index free_slot says.
  static void give_back_parked(stream_state& s) {
    if (block* b = s.parked) {
      s.parked = nullptr;
      b->owner_arena->give_back(b, free_slot(s, b->free_sequence), b->free_sequence, b->freed_tick);
    }
  }
  /// Records an event on `s` covering its frees up to `watermark` when it has room for one (or,
  /// overwrite_newest, records its newest event again); false if the driver refused (the frees
  /// then wait for a later event or a device-wide wait).
  bool record_event(stream_state& s, std::uint64_t watermark, bool overwrite_newest = false);
  /// record_event for an allocation on `s`: a stream that cannot be recorded on is refused.
  void record_or_throw(stream_state& s);
  /// Before a slow path in a call on `s` (alive, then): an event for every free of `s` so far, so
  /// that settling finds them done if `s` is idle.
  void cover_frees(stream_state& s) {
    if (s.last_free > s.covered) (void)record_event(s, s.last_free, /*overwrite_newest=*/true);
  }

  // release_policy.cpp
  /// Gives every parked block, and every block waiting in a thread's cache, to its free index
  /// (before any slow path looks at free blocks).
  void flush_parked();
  /// flush_parked for the parked blocks only.
  void give_back_parked();
  /// Hands to slot 0 the frees whose events completed, and recycles the slots of streams that
  /// hold nothing (wait: waits for the whole device first, see wait_for_device). Blocks waiting in
  /// threads' caches come back first.
  void settle_frees(bool wait);
  /// settle_frees(false) that leaves the blocks waiting in threads' caches where they are. With
  /// `hand_over` false (a miss within the growth budget, growth.cpp) a stream's completed frees stay
  /// its own unless it holds nothing live or was forgotten: see hand_over_completed_frees().
  void settle_frees_keeping_lent(bool hand_over = true);
  /// Hands to slot 0 every stream's frees known complete that a settling without hand-over left in
  /// the stream's own list. A miss within the growth budget leaves them there: each stream keeps
  /// the memory it freed, as PyTorch's per-stream pools do, since two streams that each allocate
  /// took each other's working sets and both grew (docs/RESULTS.md, section 0, "Streams that each
  /// allocate"); past the budget, on the out-of-memory path and before a release they reach every
  /// stream.
  void hand_over_completed_frees();
  /// Completes the held-back frees (free_held_back) whose events are done; true if any still
  /// waits for an event (not only for a device-wide wait). Every allocation looks while one waits
  /// (`stop_at_first_waiting`: the oldest ones only, up to the first still waiting, which then
  /// counts as waiting whatever it waits for), as PyTorch's allocator queries its events at each
  /// malloc: found only at the next miss, best fit had by then placed the requests in other free
  /// memory.
  bool settle_held_back_frees(bool stop_at_first_waiting);
  /// Completes every pending free `done` says is done, keeping the rest in the order freed
  /// (release_policy.cpp).
  template <typename Done>
  void complete_pending_where(Done done);
  void settle_stream(stream_state& s, bool hand_over = true);
  void complete_pending(pending_free& p);
  void recycle_idle_streams();
  /// Waits (with the lock dropped) for the newest event in flight on `s`, which the caller named in
  /// this call (so it is alive), and hands its frees to slot 0.
  void wait_for_stream(stream_state& s);
  /// Synchronizes the device (no event on any user stream) and hands every free made before the
  /// wait began to slot 0. drop_lock: the pool's lock is released during the wait (callers that
  /// hold no reference into the pool's state across it).
  void wait_for_device(bool drop_lock);
  /// Unmaps and releases whole free handles freed at or before tick `freed_by` (fallback: wholly
  /// free segments) until `want` bytes went back (at_most: never more than `want`), from arena
  /// `only` if given, else from all, never from the free blocks in `keep`; returns the bytes
  /// handed back.
  std::size_t release_free(std::size_t want, std::uint64_t freed_by, arena* only = nullptr, bool at_most = false,
                           joined_blocks keep = {});
  /// release_free in steps of 64 MiB, passing the lock to sleeping waiters between them.
  std::size_t release_in_steps(std::size_t want, std::uint64_t freed_by);
  // Automatic release after an allocation or a free (`freed`) on stream `s`.
  void after_operation(bool freed, stream_state& s);

  // out_of_memory_path.cpp
  [[nodiscard]] bool over_byte_cap(std::size_t size) const noexcept {
    return round_up(size, pages_.granularity()) > byte_cap_;
  }
  // Whether `size` could fit with every cached byte handed back: within the byte cap, and within
  // the device beside what is in use and the headroom (no driver call: the device's total).
  [[nodiscard]] bool could_ever_fit(std::size_t size) const noexcept {
    const std::size_t need = round_up(size, pages_.granularity());
    const std::size_t room = device_total_ - std::min(in_use_, device_total_);
    return !over_byte_cap(size) && need <= room && options_.headroom <= room - need;
  }
  block* out_of_memory_path(arena& where, std::size_t size, std::size_t requested, stream_state& s);
  /// At the path's entry: marks the pool stranding (page_table::mark_stranding) when free memory
  /// outside whole free handles is more than a set fraction of what it holds
  /// (out_of_memory_path.cpp).
  void mark_stranding_if_rests_hold_much();
  [[nodiscard]] std::size_t largest_possible(std::size_t driver_free);
  /// What growth may still create when the driver has `driver_free` bytes free: within the
  /// headroom and the byte cap.
  [[nodiscard]] std::size_t creatable_bytes(std::size_t driver_free) const noexcept;
  /// Whole free handles of every arena: what stealing or releasing can reach.
  [[nodiscard]] std::size_t whole_free_handle_bytes() const noexcept;
  /// Ends the device's limit and its nearness (page_table::at_limit, near_limit) when the device
  /// could give the pool a quarter of what it holds again (growth.cpp). Returns what growth may
  /// create now (creatable_bytes of the driver's free memory).
  std::size_t leave_limit_if_device_has_room();
  /// At the device's limit, whether the growth for `size` that maps least fits what the device can
  /// still give (`creatable`); when it does not, allocate_slow() goes to the out-of-memory path
  /// without trying growth (growth.cpp).
  [[nodiscard]] bool growth_fits_device(const arena& where, std::size_t size, std::uint32_t slot,
                                        std::size_t creatable) const;
  /// Marks the pool near the device's limit (page_table::near_limit) when a growth of `size` would
  /// leave the device less room than a quarter of what the pool would hold, the device filling
  /// (page_table::filling) when less than six of the largest requests yet, and the pool holding a
  /// share of the device (holds_device_share_) when less than sixteen times what it would hold
  /// (growth.cpp). Asks the driver only once held memory passes next_room_check_held_, or for a
  /// request larger than any before.
  void watch_device_room(std::size_t size);
  /// Whether growth gives the granule a request ends in a handle of its own (grow): only where
  /// what a long-lived neighbour pins there could one day fail an allocation.
  [[nodiscard]] bool end_granule_gets_own_handle() const noexcept;
  /// Ends the device's limit, its nearness, its filling and the pool's share of it (the next growth
  /// asks the driver again): release() and compact() handed back what they could.
  void forget_device_limit() noexcept;

  std::shared_ptr<driver> driver_;
  int device_;
  pool_options options_;
  driver_calls calls_;
  page_table pages_;
  block_slab slab_;
  std::array<std::unique_ptr<arena>, arena_kinds> arenas_;
  address_map live_;
  stream_registry streams_;
  event_pool events_;
  std::deque<pending_free> pending_;  // in the order freed
  driver_status record_failure_ = driver_status::success;  // why record_event returned false last
  std::unordered_map<block*, std::vector<stream_state*>> extra_streams_;
  std::size_t graphs_kept_ = 0;  // watched graphs that may still launch, per stream state (graph_capture.cpp)
  spin_lock lock_;

  // Thread caches (pool_thread_caches.cpp): the caches of threads, blocks and bytes lent to them
  // (lent blocks are neither in in_use_ nor free), and whether any thread has one (the fast paths
  // look at their thread's cache only then).
  const std::uint64_t id_ = next_pool_id();
  std::shared_ptr<pool_link> link_ = std::make_shared<pool_link>();
  std::vector<std::shared_ptr<thread_cache>> caches_;
  std::atomic<bool> has_thread_caches_{false};
  std::size_t lent_bytes_ = 0;
  std::size_t lent_count_ = 0;
  std::uint32_t window_calls_ = 0;      // locked calls in the contention window so far
  std::uint32_t window_contended_ = 0;  // of them, found the lock held
  bool caching_threads_ = false;        // threads taking the lock get caches (set once contended)

  bool virtual_memory_ = true;
  bool automatic_release_ = false;
  std::size_t device_total_ = 0;
  /// The most the pool maps: pool_options::byte_cap until set_byte_cap() changes it (options_
  /// keeps the options as made, which pool::options() hands out without the lock).
  std::size_t byte_cap_ = options_.byte_cap;
  std::size_t in_use_ = 0;
  std::size_t requested_ = 0;
  /// The growth budget's peak: in use, lent, and held back (free_held_back: freed, but not the
  /// program's to have again until other streams' work is done, which the program's own pace
  /// decides; counted as in use, a copy stream's backlog made the pool steal in every step).
  std::size_t peak_in_use_ = 0;
  /// Peak in use as pool_stats reports it: in use and lent only; reset_peak_stats() brings it
  /// down to in use, where the growth budget's peak_in_use_ stays the pool's whole history.
  std::size_t reported_peak_in_use_ = 0;
  std::size_t peak_requested_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t deallocations_ = 0;
  // Growth streaks (growth.cpp): deallocations_ at the last growth, and the bytes mapped by the
  // growths since the last free.
  std::uint64_t deallocations_at_growth_ = ~std::uint64_t{0};
  std::size_t streak_bytes_ = 0;
  std::uint64_t recoveries_ = 0;
  std::uint64_t free_sequence_ = 0;
  // Coarse time in milliseconds on the decay clock (release_policy::clock) since the pool's first
  // operation, read on it and every 64th after it when a decay is set (0 otherwise): blocks
  // remember it when freed.
  std::uint64_t tick_ = 0;
  std::uint64_t last_decay_check_ = 0;
  std::uint64_t clock_origin_ = 0;  // the clock's reading at the first operation
  std::uint64_t operations_since_clock_ = 0;
  std::size_t trim_floor_ = 0;  // max_cached_bytes: do not trim again until cached passes this
  // Held when the latest miss began: a request that fails hands back what its growth mapped
  // (another thread's miss while the out-of-memory path dropped the lock may have moved it).
  std::size_t held_before_miss_ = 0;
  // Held memory past which growth next asks the driver how much room the device has left
  // (watch_device_room): half way to where the room it saw last would be a quarter of held, or
  // (before the device fills) six of the largest requests, or (before the pool holds a share of
  // the device) sixteen times held, whichever comes first.
  std::size_t next_room_check_held_ = 0;
  // The largest request growth has served outside the limit (rounded to granules): the device
  // fills once its room is less than six of them (watch_device_room).
  std::size_t largest_request_ = 0;
  // The pool holds more than a seventeenth of what it could reach on the device (watch_device_room):
  // from here a request's end granule gets a handle of its own (end_granule_gets_own_handle).
  bool holds_device_share_ = false;
  // A held-back free waits for an event (settle_held_back_frees).
  bool held_back_frees_waiting_ = false;
  // Bytes of the pending frees (free_held_back).
  std::size_t held_back_bytes_ = 0;

  // Sleep (sleep_wake.cpp): while asleep_, allocate() refuses and automatic release is off; the
  // slept handles keep their page-table records (page_table::sleep_handle).
  struct kept_block {
    device_address address = 0;
    std::size_t bytes = 0;   // live blocks next to each other, as placed
    std::size_t offset = 0;  // in host_copy_
  };
  bool asleep_ = false;
  // compact() and the out-of-memory path's compaction set asleep_ too while they run, and this:
  // other threads' allocations wait for the end (wait_out_compaction), the rest refuse saying why.
  bool compacting_ = false;
  std::uint64_t compacting_thread_ = 0;  // this_thread_key() of the thread compacting
  bool automatic_release_awake_ = false;  // automatic_release_ before the pool slept
  std::vector<std::uint32_t> sleep_ids_;  // slept handles
  std::size_t asleep_bytes_ = 0;
  std::vector<kept_block> kept_;           // live blocks whose bytes host_copy_ holds
  void* host_copy_ = nullptr;              // pinned; kept after a wake for the next sleep
  std::size_t host_copy_capacity_ = 0;     // its size
  std::size_t host_copy_bytes_ = 0;        // contents it holds now (0: none)
  void drop_host_copy() noexcept;

  // Recording (pool_recording.cpp): events under the lock into recorded_, taken by the recorder.
  bool recording_ = false;
  std::vector<recorded_event> recorded_;
  std::size_t notify_at_ = 0;
  std::size_t next_notify_ = 0;
  recording_full_fn on_full_ = nullptr;
  void* on_full_context_ = nullptr;
  std::atomic<bool> recording_full_{false};
};

}  // namespace tidepool::detail
