// The stress workload (issue 10): threads allocating and freeing on streams of their own at once,
// random sizes from 256 B to 64 MiB, frees handed to other threads, record_stream with work queued,
// streams destroyed and recreated, an observer thread calling release() and stats() every few
// milliseconds, a byte cap that makes out-of-memory frequent, and a reclaim hook that frees into
// the pool from inside the out-of-memory path. Every live block carries a pattern written at
// allocation and checked at its free. The driver-specific parts (writing and reading device bytes,
// queueing work) are a `stress_backend`: the sim one is here, the CUDA one in tests/gpu.
//
// With `observer_thread` off and one thread the workload is deterministic (the observer's steps
// run inline), which is what the fault sweep replays with a failure injected at each driver call.
// With `driver_faults` on, a tidepool::error of the driver (error_code::driver_failure) is an
// accepted outcome of any call: counted, its message checked, the block kept as the call left it.
//
// The program's live set is bounded (each thread's blocks, a mailbox of handed-over blocks and the
// hook's reserve, each to a limit), so a run of any length keeps the same shape and costs the same
// per operation; a time limit ends a soak with a verdict whatever the machine's speed.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "tidepool/pool.hpp"
#include "tidepool/reclaim.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::testing {

/// What differs between the simulated GPU and a real one.
class stress_backend {
 public:
  virtual ~stress_backend() = default;
  /// Writes the block's pattern (words naming `tag` and their offset) into device memory.
  virtual void write(void* ptr, std::size_t bytes, std::uint64_t tag) = 0;
  /// Whether the block still holds its pattern.
  virtual bool intact(void* ptr, std::size_t bytes, std::uint64_t tag) = 0;
  /// Queues work on `stream` that touches the block.
  virtual void queue_work(stream_t stream, void* ptr, std::size_t bytes) = 0;
  /// The observer's step beside release() and stats() (sim: moves the logical clock).
  virtual void tick() {}

  /// The offsets of a block's pattern words: the first, one every `stride`, and the last whole word.
  template <class F>
  static void for_each_word(std::size_t bytes, std::size_t stride, F&& f) {
    if (bytes < 8) return;
    std::size_t last = 0;
    for (std::size_t offset = 0; offset + 8 <= bytes; offset += stride) {
      f(offset);
      last = offset;
    }
    if (bytes - 8 >= last + 8) f(bytes - 8);
  }
  static std::uint64_t word(std::uint64_t tag, std::size_t offset) {
    return (tag * 0x9E3779B97F4A7C15ull) ^ (offset * 0xC2B2AE3D27D4EB4Full) ^ 0x5bd1e995ull;
  }
};

/// The sim backend: host memory behind the device (back_with_host_memory), a word every 64 KiB.
class sim_stress_backend final : public stress_backend {
 public:
  explicit sim_stress_backend(sim_driver& sim, int device = 0) : sim_(sim), device_(device) {}
  void write(void* ptr, std::size_t bytes, std::uint64_t tag) override {
    std::byte* host = sim_.host_view(device_, reinterpret_cast<device_address>(ptr), bytes);
    if (host == nullptr) {
      unmapped_.fetch_add(1);
      return;
    }
    for_each_word(bytes, stride, [&](std::size_t offset) {
      const std::uint64_t w = word(tag, offset);
      std::memcpy(host + offset, &w, 8);
    });
  }
  bool intact(void* ptr, std::size_t bytes, std::uint64_t tag) override {
    std::byte* host = sim_.host_view(device_, reinterpret_cast<device_address>(ptr), bytes);
    if (host == nullptr) return false;
    bool ok = true;
    for_each_word(bytes, stride, [&](std::size_t offset) {
      const std::uint64_t w = word(tag, offset);
      ok = ok && std::memcmp(host + offset, &w, 8) == 0;
    });
    return ok;
  }
  void queue_work(stream_t stream, void* ptr, std::size_t bytes) override {
    sim_.launch(device_, stream, 50.0, reinterpret_cast<device_address>(ptr), bytes);
  }
  void tick() override { sim_.advance(20.0); }
  /// Blocks whose memory was not wholly mapped when allocated.
  [[nodiscard]] std::uint64_t unmapped_at_allocation() const { return unmapped_.load(); }

 private:
  static constexpr std::size_t stride = 64 * 1024;
  sim_driver& sim_;
  int device_;
  std::atomic<std::uint64_t> unmapped_{0};
};

struct stress_options {
  int threads = 8;
  int streams_per_thread = 4;
  int operations_per_thread = 1500;
  int max_live_per_thread = 8;
  std::size_t min_bytes = 256;
  std::size_t max_bytes = std::size_t{64} << 20;
  /// Positive: sizes come from this many fixed sizes (log-spaced over min..max), so that sizes
  /// repeat as in a program's loop (what per-thread caches serve); 0: any size in the range.
  int size_classes = 0;
  std::uint64_t seed = 1;
  /// On: a thread calls release(), stats() and the backend's tick() every `observer_period`.
  /// Off: the same steps run inline every 16th operation of thread 0 (deterministic with 1 thread).
  bool observer_thread = true;
  std::chrono::microseconds observer_period{2000};
  /// Accept tidepool errors of the driver (fault injection) as outcomes of any call.
  bool driver_faults = false;
  /// Positive: no thread starts an operation after this long (a soak then always ends with a
  /// verdict); the operation count still bounds each thread.
  std::chrono::milliseconds time_limit{0};
  /// Positive (with observer_thread on): a line of progress on stdout this often, so a long run
  /// shows whether it moves.
  std::chrono::milliseconds progress_period{0};
};

/// What the workload did; the pool's figures are checked against it.
struct stress_result {
  std::uint64_t allocations = 0;     ///< allocate() calls that succeeded
  std::uint64_t deallocations = 0;   ///< deallocate() calls that succeeded
  std::uint64_t out_of_memory = 0;
  std::uint64_t driver_errors = 0;   ///< tidepool::error from an injected driver failure
  std::uint64_t handed_over = 0;     ///< blocks freed by a thread other than the allocating one
  std::uint64_t recorded = 0;        ///< record_stream calls with work queued on the recorded stream
  std::uint64_t streams_recreated = 0;
  std::uint64_t freed_by_hook = 0;   ///< blocks the reclaim hook freed inside the out-of-memory path
  std::uint64_t observer_rounds = 0;
  std::uint64_t corrupted = 0;       ///< blocks whose pattern was not intact at their free
  std::uint64_t bad_errors = 0;      ///< exceptions that were neither of the above (or had no message)
  std::uint64_t peak_live_blocks = 0;  ///< the most blocks the program held at once
  std::uint64_t most_thread_caches = 0;  ///< the most threads with a cache the observer saw (pool_stats::thread_caches)
  std::vector<std::uint64_t> operations;  ///< operations each thread did
  bool stopped_by_time = false;           ///< the time limit ended the run before the operation count
  double seconds = 0;                     ///< the run's wall time
};

/// A number from the environment variable `name` (decimal), else `fallback`.
inline long env_number(const char* name, long fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  return std::strtol(value, nullptr, 10);
}

/// The soak's settings from the environment: TIDEPOOL_STRESS_OPS (operations per thread),
/// TIDEPOOL_STRESS_SEED (added to `seed_offset`) and TIDEPOOL_STRESS_SECONDS (a time limit; with
/// it, a line of progress every 10 s).
inline stress_options stress_options_from_environment(stress_options so, std::uint64_t seed_offset = 0) {
  so.operations_per_thread = static_cast<int>(env_number("TIDEPOOL_STRESS_OPS", so.operations_per_thread));
  so.seed = static_cast<std::uint64_t>(env_number("TIDEPOOL_STRESS_SEED", 1)) + seed_offset;
  const long seconds = env_number("TIDEPOOL_STRESS_SECONDS", 0);
  if (seconds > 0) {
    so.time_limit = std::chrono::seconds(seconds);
    so.progress_period = std::chrono::seconds(10);
  }
  return so;
}

/// One line saying what a run did (`where`: "on sim", "on the GPU"), and the operations per thread.
inline void print_stress_result(const char* where, const stress_options& so, const stress_result& r) {
  std::uint64_t total = 0;
  std::string per_thread;
  for (const std::uint64_t n : r.operations) {
    total += n;
    if (!per_thread.empty()) per_thread.push_back(' ');
    per_thread.append(std::to_string(n));
  }
  std::printf("stress %s: %d threads, %llu operations in %.1f s (%s; per thread: %s): %llu allocations, %llu frees "
              "(%llu handed to another thread, %llu by the reclaim hook), %llu out of memory, %llu record_stream, "
              "%llu streams recreated, %llu observer rounds, at most %llu blocks live, at most %llu thread caches\n",
              where, so.threads, static_cast<unsigned long long>(total), r.seconds,
              r.stopped_by_time ? "stopped by the time limit" : "every operation done", per_thread.c_str(),
              static_cast<unsigned long long>(r.allocations), static_cast<unsigned long long>(r.deallocations),
              static_cast<unsigned long long>(r.handed_over), static_cast<unsigned long long>(r.freed_by_hook),
              static_cast<unsigned long long>(r.out_of_memory), static_cast<unsigned long long>(r.recorded),
              static_cast<unsigned long long>(r.streams_recreated), static_cast<unsigned long long>(r.observer_rounds),
              static_cast<unsigned long long>(r.peak_live_blocks), static_cast<unsigned long long>(r.most_thread_caches));
  std::fflush(stdout);
}

class stress_workload {
 public:
  stress_workload(pool& p, stress_backend& backend, stress_options options)
      : pool_(p), backend_(backend), options_(options), slots_(static_cast<std::size_t>(options.threads)) {
    const auto device = p.device();
    for (auto& thread_slots : slots_) {
      for (int i = 0; i < options_.streams_per_thread; ++i) {
        auto slot = std::make_unique<stream_slot>();
        if (p.get_driver()->stream_create(device, &slot->handle) != driver_status::success) {
          throw std::runtime_error("stress: stream_create failed");
        }
        thread_slots.push_back(std::move(slot));
      }
    }
  }
  ~stress_workload() {
    for (auto& thread_slots : slots_) {
      for (auto& slot : thread_slots) {
        try {
          pool_.forget_stream(slot->handle);
        } catch (const error& e) {
          ADD_FAILURE() << "stress: forget_stream failed: " << e.what();
        }
        (void)pool_.get_driver()->stream_destroy(pool_.device(), slot->handle);
      }
    }
  }
  stress_workload(const stress_workload&) = delete;
  stress_workload& operator=(const stress_workload&) = delete;

  /// Runs every thread to the end; blocks still live stay live (see live_blocks(), free_all()).
  stress_result run() {
    const int hook = add_reclaim_hook([this](int device, std::size_t needed) { return reclaim(device, needed); });
    operations_ = std::vector<std::atomic<std::uint64_t>>(static_cast<std::size_t>(options_.threads));
    start_ = std::chrono::steady_clock::now();
    deadline_ = options_.time_limit.count() > 0 ? start_ + options_.time_limit
                                                 : std::chrono::steady_clock::time_point::max();
    std::atomic<bool> done{false};
    std::thread observer;
    if (options_.observer_thread) {
      observer = std::thread([&] {
        auto next_report = start_ + options_.progress_period;
        while (!done.load()) {
          observe();
          if (options_.progress_period.count() > 0 && std::chrono::steady_clock::now() >= next_report) {
            report_progress();
            next_report += options_.progress_period;
          }
          std::this_thread::sleep_for(options_.observer_period);
        }
      });
    }
    std::vector<std::thread> threads;
    for (int t = 1; t < options_.threads; ++t) threads.emplace_back([this, t] { worker(t); });
    worker(0);
    for (auto& t : threads) t.join();
    done = true;
    if (observer.joinable()) observer.join();
    remove_reclaim_hook(hook);
    stress_result r;
    r.allocations = allocations_;
    r.deallocations = deallocations_;
    r.out_of_memory = out_of_memory_;
    r.driver_errors = driver_errors_;
    r.handed_over = handed_over_;
    r.recorded = recorded_;
    r.streams_recreated = streams_recreated_;
    r.freed_by_hook = freed_by_hook_;
    r.observer_rounds = observer_rounds_;
    r.corrupted = corrupted_;
    r.bad_errors = bad_errors_;
    r.peak_live_blocks = peak_live_;
    r.most_thread_caches = most_thread_caches_;
    for (const auto& n : operations_) r.operations.push_back(n.load());
    r.stopped_by_time = stopped_by_time_;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return r;
  }

  /// Blocks the program holds now (each thread's, handed over and parked for the hook).
  [[nodiscard]] std::size_t live_blocks() const { return live_count_.load(); }
  [[nodiscard]] std::size_t live_requested_bytes() const { return live_bytes_.load(); }
  /// The most blocks the program may hold at once: each thread's own, and those handed over or
  /// parked for the hook, each held to a bound as a real program's would be. A live set that grows
  /// with the run's length fills the byte cap with small blocks and makes every later operation an
  /// out-of-memory path over ever more blocks (the soak then slows down quadratically).
  [[nodiscard]] std::size_t live_bound() const {
    const auto threads = static_cast<std::size_t>(options_.threads);
    return threads * (static_cast<std::size_t>(options_.max_live_per_thread) + 2) + 2 * shared_limit();
  }

  /// Frees every block still held (after run()); true when each was freed (those that were not
  /// stay held, for another call).
  bool free_all() {
    std::vector<held> rest;
    for (auto& mine : leftovers_) rest.insert(rest.end(), mine.begin(), mine.end());
    leftovers_.clear();
    rest.insert(rest.end(), mailbox_.begin(), mailbox_.end());
    mailbox_.clear();
    rest.insert(rest.end(), reserve_.begin(), reserve_.end());
    reserve_.clear();
    std::vector<held> kept;  // blocks whose free failed (an injected driver failure) stay held
    for (const held& h : rest) {
      if (!free_block(h, -1)) kept.push_back(h);
    }
    const bool ok = kept.empty();
    leftovers_.push_back(std::move(kept));
    return ok;
  }

  [[nodiscard]] std::uint64_t observer_errors() const { return observer_errors_.load(); }

 private:
  struct held {
    void* ptr;
    std::size_t bytes;
    std::uint64_t tag;
    int owner;          // the thread whose stream it was allocated on
    int slot;           // which of the owner's streams
    stream_t stream;    // the handle it was allocated on (forgotten once the slot is recreated)
  };
  struct stream_slot {
    // Shared by calls that name the stream from other threads; exclusive while it is recreated, so
    // no call names a stream being destroyed (the pool's contract).
    std::shared_mutex lock;
    stream_t handle = nullptr;
  };

  // How many blocks the mailbox, and the hook's reserve, may hold.
  [[nodiscard]] std::size_t shared_limit() const {
    return static_cast<std::size_t>(options_.threads) * static_cast<std::size_t>(options_.max_live_per_thread);
  }

  // Adds `h` to a list other threads take from; beyond shared_limit() one of the list, chosen at
  // random, comes back for the caller to free (else the list, and with it the live set, grows
  // by a few percent of the operations for as long as the run lasts).
  std::optional<held> share(std::mutex& m, std::vector<held>& list, const held& h, std::mt19937_64& rng) {
    std::lock_guard lock(m);
    list.push_back(h);
    if (list.size() <= shared_limit()) return std::nullopt;
    const std::size_t i = rng() % list.size();
    const held out = list[i];
    list[i] = list.back();
    list.pop_back();
    return out;
  }

  std::size_t random_size(std::mt19937_64& rng) const {
    const double lo = std::log2(static_cast<double>(options_.min_bytes));
    const double hi = std::log2(static_cast<double>(options_.max_bytes));
    double e = std::uniform_real_distribution<double>(lo, hi)(rng);
    if (options_.size_classes > 1) {
      const auto k = static_cast<double>(rng() % static_cast<std::uint64_t>(options_.size_classes));
      e = lo + (hi - lo) * k / static_cast<double>(options_.size_classes - 1);
    }
    return std::clamp(static_cast<std::size_t>(std::exp2(e)), options_.min_bytes, options_.max_bytes);
  }

  // An error an injected driver failure may cause: accepted when faults are on and it says why.
  void on_error(const error& e) {
    const bool accepted = options_.driver_faults && e.code() == error_code::driver_failure &&
                          std::string(e.what()).find("tidepool") != std::string::npos;
    if (accepted) {
      ++driver_errors_;
    } else {
      ++bad_errors_;
      ADD_FAILURE() << "stress: unexpected error: " << e.what();
    }
  }

  // Checks and frees `h` on its stream; `self` is the calling thread (-1: none of the workers).
  bool free_block(const held& h, int self, bool in_hook = false) {
    if (!backend_.intact(h.ptr, h.bytes, h.tag)) {
      ++corrupted_;
      ADD_FAILURE() << "stress: a live block of " << h.bytes << " bytes was overwritten or unmapped";
    }
    stream_slot& slot = *slots_[static_cast<std::size_t>(h.owner)][static_cast<std::size_t>(h.slot)];
    std::shared_lock<std::shared_mutex> guard(slot.lock, std::defer_lock);
    if (h.owner != self) {
      if (in_hook) {
        if (!guard.try_lock()) return false;  // its owner is recreating the stream: leave it
      } else {
        guard.lock();
      }
    }
    try {
      pool_.deallocate(h.ptr, h.stream);
    } catch (const error& e) {
      on_error(e);
      if (pool_.owns(h.ptr)) return false;  // still live: the caller keeps it
    }
    ++deallocations_;
    --live_count_;
    live_bytes_ -= h.bytes;
    if (h.owner != self) ++handed_over_;
    return true;
  }

  // The reclaim hook: frees parked blocks into the pool from inside the out-of-memory path.
  std::size_t reclaim(int device, std::size_t needed) {
    if (device != pool_.device()) return 0;
    std::vector<held> taken;
    {
      std::lock_guard lock(reserve_mutex_);
      std::size_t bytes = 0;
      while (!reserve_.empty() && bytes < needed) {
        taken.push_back(reserve_.back());
        bytes += reserve_.back().bytes;
        reserve_.pop_back();
      }
    }
    const int self = current_thread_;
    for (const held& h : taken) {
      if (free_block(h, self, /*in_hook=*/true)) {
        ++freed_by_hook_;
      } else {
        std::lock_guard lock(reserve_mutex_);
        reserve_.push_back(h);
      }
    }
    return 0;  // freed into the pool, not handed back to the driver
  }

  void observe() {
    ++observer_rounds_;
    try {
      const pool_stats s = pool_.stats();
      most_thread_caches_ = std::max<std::uint64_t>(most_thread_caches_, s.thread_caches);
      if (s.in_use_bytes + s.cached_bytes != s.mapped_bytes || s.requested_bytes > s.in_use_bytes ||
          s.mapped_bytes > pool_.options().byte_cap) {
        ++observer_errors_;
        ADD_FAILURE() << "stress: inconsistent figures: in use " << s.in_use_bytes << " cached " << s.cached_bytes
                      << " mapped " << s.mapped_bytes << " requested " << s.requested_bytes;
      }
      (void)pool_.release();
      if (observer_rounds_ % 4 == 0) (void)pool_.available_bytes();
    } catch (const error& e) {
      on_error(e);
    }
    backend_.tick();
  }

  void report_progress() {
    std::uint64_t ops = 0;
    for (const auto& n : operations_) ops += n.load();
    std::size_t shared = 0;
    {
      std::lock_guard lock(mailbox_mutex_);
      shared += mailbox_.size();
    }
    {
      std::lock_guard lock(reserve_mutex_);
      shared += reserve_.size();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::printf("stress progress: %.0f s, %llu operations, %llu allocations, %llu out of memory, %zu live blocks "
                "(%zu handed over or parked)\n",
                seconds, static_cast<unsigned long long>(ops), static_cast<unsigned long long>(allocations_.load()),
                static_cast<unsigned long long>(out_of_memory_.load()), live_count_.load(), shared);
    std::fflush(stdout);
  }

  void worker(int self) {
    current_thread_ = self;
    std::mt19937_64 rng(options_.seed * 1000 + static_cast<std::uint64_t>(self));
    auto& my_slots = slots_[static_cast<std::size_t>(self)];
    std::vector<held> mine;
    auto drop_one = [&](std::size_t i) {
      if (free_block(mine[i], self)) {
        mine[i] = mine.back();
        mine.pop_back();
      }
    };
    std::atomic<std::uint64_t>& done = operations_[static_cast<std::size_t>(self)];
    for (int op = 0; op < options_.operations_per_thread; ++op, done.store(static_cast<std::uint64_t>(op))) {
      if (std::chrono::steady_clock::now() >= deadline_) {
        stopped_by_time_ = true;
        break;
      }
      if (!options_.observer_thread && self == 0 && op % 16 == 15) observe();
      const unsigned r = static_cast<unsigned>(rng() % 100);
      if (mine.empty() || (r < 45 && mine.size() < static_cast<std::size_t>(options_.max_live_per_thread))) {
        const std::size_t bytes = random_size(rng);
        const int slot = static_cast<int>(rng() % my_slots.size());
        const stream_t stream = my_slots[static_cast<std::size_t>(slot)]->handle;
        try {
          void* ptr = pool_.allocate(bytes, stream, rng() % 8 == 0 ? lifetime::persistent : lifetime::scratch);
          const held h{ptr, bytes, next_tag_++, self, slot, stream};
          backend_.write(ptr, bytes, h.tag);
          ++allocations_;
          const std::size_t live = ++live_count_;
          for (std::size_t peak = peak_live_.load(); live > peak && !peak_live_.compare_exchange_weak(peak, live);) {
          }
          live_bytes_ += bytes;
          if (rng() % 8 == 0) {
            // Parked: the reclaim hook may free it (a framework's cache, which has a bound too).
            if (auto evicted = share(reserve_mutex_, reserve_, h, rng); evicted && !free_block(*evicted, self)) {
              mine.push_back(*evicted);
            }
          } else {
            mine.push_back(h);
          }
        } catch (const out_of_memory& e) {
          ++out_of_memory_;
          if (e.report().requested_bytes != bytes || std::string(e.what()).empty()) {
            ++bad_errors_;
            ADD_FAILURE() << "stress: an out-of-memory report names " << e.report().requested_bytes
                          << " bytes for a request of " << bytes;
          }
          // Make room as a program would: give up half of what this thread holds.
          for (std::size_t n = mine.size() / 2; n > 0 && !mine.empty(); --n) drop_one(rng() % mine.size());
        } catch (const error& e) {
          on_error(e);
        }
      } else if (r < 70) {
        drop_one(rng() % mine.size());
      } else if (r < 80) {
        const std::size_t i = rng() % mine.size();
        const held given = mine[i];
        mine[i] = mine.back();
        mine.pop_back();
        // Handed to whichever thread takes it; a full mailbox makes this thread free one of it.
        if (auto evicted = share(mailbox_mutex_, mailbox_, given, rng); evicted && !free_block(*evicted, self)) {
          mine.push_back(*evicted);
        }
      } else if (r < 86) {
        held h{};
        bool got = false;
        {
          std::lock_guard lock(mailbox_mutex_);
          if (!mailbox_.empty()) {
            const std::size_t i = rng() % mailbox_.size();
            h = mailbox_[i];
            mailbox_[i] = mailbox_.back();
            mailbox_.pop_back();
            got = true;
          }
        }
        if (got && !free_block(h, self)) mine.push_back(h);
      } else if (r < 94) {
        // Work queued on another of this thread's streams uses the block: record_stream.
        const held& h = mine[rng() % mine.size()];
        stream_slot& other = *my_slots[rng() % my_slots.size()];
        try {
          backend_.queue_work(other.handle, h.ptr, h.bytes);
          pool_.record_stream(h.ptr, other.handle);
          ++recorded_;
        } catch (const error& e) {
          on_error(e);
        }
      } else if (r < 97) {
        // Destroy one of this thread's streams and make a new one (blocks allocated on the old one
        // stay live and are freed naming it, as the pool allows once it was forgotten).
        stream_slot& slot = *my_slots[rng() % my_slots.size()];
        std::unique_lock guard(slot.lock);
        try {
          pool_.forget_stream(slot.handle);
        } catch (const error& e) {
          on_error(e);
        }
        const auto device = pool_.device();
        if (pool_.get_driver()->stream_destroy(device, slot.handle) != driver_status::success ||
            pool_.get_driver()->stream_create(device, &slot.handle) != driver_status::success) {
          ++bad_errors_;
          ADD_FAILURE() << "stress: recreating a stream failed";
          return;
        }
        ++streams_recreated_;
      } else {
        try {
          const pool_stats s = pool_.stats();
          if (s.in_use_bytes + s.cached_bytes != s.mapped_bytes) ++observer_errors_;
          (void)pool_.available_bytes();
        } catch (const error& e) {
          on_error(e);
        }
      }
    }
    std::lock_guard lock(leftovers_mutex_);
    leftovers_.push_back(std::move(mine));
  }

  pool& pool_;
  stress_backend& backend_;
  stress_options options_;
  std::vector<std::vector<std::unique_ptr<stream_slot>>> slots_;
  std::mutex mailbox_mutex_;
  std::vector<held> mailbox_;
  std::mutex reserve_mutex_;
  std::vector<held> reserve_;
  std::mutex leftovers_mutex_;
  std::vector<std::vector<held>> leftovers_;
  std::atomic<std::uint64_t> next_tag_{1};
  std::atomic<std::uint64_t> allocations_{0}, deallocations_{0}, out_of_memory_{0}, driver_errors_{0},
      handed_over_{0}, recorded_{0}, streams_recreated_{0}, freed_by_hook_{0}, observer_rounds_{0}, corrupted_{0},
      bad_errors_{0}, observer_errors_{0};
  std::atomic<std::size_t> live_count_{0}, live_bytes_{0}, peak_live_{0};
  std::uint64_t most_thread_caches_ = 0;  // the observer's (read after it is joined)
  std::vector<std::atomic<std::uint64_t>> operations_;
  std::chrono::steady_clock::time_point start_, deadline_;
  std::atomic<bool> stopped_by_time_{false};
  static inline thread_local int current_thread_ = -1;
};

}  // namespace tidepool::testing
