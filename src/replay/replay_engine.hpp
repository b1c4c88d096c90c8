// replay/replay_engine.hpp: replays one trace against one allocator on one driver and measures
// what the allocator held and what it cost.
//
// Rows are replayed in order: an `allocate` asks the allocator for the recorded size on the
// recorded stream (each distinct stream of the trace becomes a real stream of the driver), a
// `free` frees what that allocate got, an `allocate failure` row is counted and skipped.
// Allocations still live at the end of the trace are left allocated: "held at end" counts them,
// and the release that follows cannot return them. An allocation the allocator cannot satisfy
// is counted as a failure (its later free is skipped); the replay goes on.
//
// "Held" is the physical memory the allocator holds from the driver: on sim exactly
// sim_driver::physical_bytes(), after every row; elsewhere the allocator's own count, with the
// driver's process figure (NVML on cuda) reported beside it at the end.
//
// With several passes the trace is replayed again and again through the same allocator, as a
// training loop runs its step again and again: between passes what the trace left live is freed
// (so each pass starts from the same live set); after the last pass it stays allocated, as with one
// pass. Each pass has its own figures; the "steady state" is the worst pass after the first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "replay/trace.hpp"
#include "tidepool/driver.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::replay {

/// What one pass of a trace measured.
struct pass_result {
  std::size_t peak_live_bytes = 0;  ///< most bytes live at once during the pass
  std::size_t peak_held_bytes = 0;  ///< most bytes held at once during the pass
  std::uint64_t driver_calls = 0;   ///< memory calls made during the pass
  double driver_us = 0;             ///< their modelled (sim) or measured (cuda) time
  /// Every driver call of the pass by kind (create, map, set access, unmap, release, ...): where
  /// the driver time goes.
  driver_call_counts by_kind{};
  /// Calls that waited for the GPU (event, stream or device synchronization) during the pass.
  std::uint64_t waits = 0;
  /// On sim with the GPU behind (replay_options::gpu_lag_us): how long the program stood waiting
  /// for queued work during the pass, on sim's clock (the clock's advance beyond the trace's own).
  double gpu_wait_us = 0;

  [[nodiscard]] double held_ratio() const noexcept {
    return peak_live_bytes == 0 ? 0.0 : static_cast<double>(peak_held_bytes) / static_cast<double>(peak_live_bytes);
  }
};

/// Memory and driver use at one point of a replay (replay_options::sample_every).
struct replay_sample {
  std::uint64_t row = 0;          ///< rows replayed so far, over all passes
  std::size_t live_bytes = 0;     ///< the most bytes live since the previous sample
  std::size_t held_bytes = 0;     ///< the most bytes held since the previous sample
  std::uint64_t driver_calls = 0; ///< memory calls since the allocator was created, cumulative
  double driver_us = 0;           ///< their time, cumulative
};

/// Where an allocation first failed in a replay: what was asked for and what the allocator held
/// then, so a failure on a smaller GPU (`replay --capacity`) says how much was held and not live.
struct failure_point {
  unsigned pass = 0;           ///< 1-based
  std::uint64_t row = 0;       ///< 1-based row of the trace (its events in order)
  std::size_t bytes = 0;       ///< asked for
  std::size_t live_bytes = 0;  ///< live when it was asked for
  std::size_t held_bytes = 0;  ///< held then, after the allocator's own attempt to make room
};

/// What one replay measured.
struct replay_result {
  std::string trace;
  std::string allocator;
  std::string device;  ///< the driver's name
  std::size_t device_capacity_bytes = 0;  ///< the device's total memory as its driver reports it
  std::uint64_t operations = 0;          ///< allocate and free calls made
  std::uint64_t failures = 0;            ///< allocations the allocator could not satisfy
  std::optional<failure_point> first_failure;  ///< the first of them; nullopt when none failed
  std::uint64_t recorded_failures = 0;   ///< `allocate failure` rows of the trace (skipped)
  std::size_t peak_live_bytes = 0;       ///< most bytes live at once, as requested
  std::size_t live_end_bytes = 0;        ///< bytes still live at the end (left allocated)
  std::size_t live_end_allocations = 0;
  /// The 2 MiB granules the blocks live at the end touch, in bytes: what this layout pins at
  /// least, however finely an allocator gives memory back.
  std::size_t live_end_granule_bytes = 0;
  std::size_t peak_held_bytes = 0;
  std::size_t held_end_bytes = 0;            ///< held after the last row, before release
  std::size_t held_after_release_bytes = 0;  ///< held after the allocator's release()
  /// Held after compact() following that release (tidepool; its calls are not in driver_calls).
  std::optional<std::size_t> held_after_compact_bytes;
  std::size_t released_bytes = 0;           ///< what release() says it returned
  std::size_t own_held_end_bytes = 0;        ///< the allocator's own count at the end
  /// Where the allocator can describe itself (tidepool), before the release at the end: its
  /// cached bytes (held, not in use), its largest free block and what release() could return.
  std::optional<std::size_t> cached_end_bytes;
  std::optional<std::size_t> largest_free_end_bytes;
  std::optional<std::size_t> releasable_end_bytes;
  /// The driver's figure for this process's device memory at the end, before and after release
  /// (NVML on cuda; sim's exact count); nullopt where the driver cannot tell.
  std::optional<std::size_t> process_used_end_bytes;
  std::optional<std::size_t> process_used_after_release_bytes;
  std::uint64_t driver_calls = 0;  ///< memory calls (reserve, create, map, access, unmap, release, alloc, free)
  double driver_us = 0;            ///< their modelled (sim) or measured (cuda) time
  double ns_per_op = 0;            ///< wall time inside allocate/free per operation
  /// One entry per pass, in order (one pass: one entry). The driver figures above also count the
  /// allocator's creation and its final release; a pass's count only what happened inside it.
  std::vector<pass_result> passes;
  /// With replay_options::sample_every: one sample every that many rows, and one after the last.
  std::vector<replay_sample> samples;

  /// The steady state: over the passes after the first, the worst held ratio, driver calls, driver
  /// time and waits for the GPU (each its own worst); the first pass itself where there is only one.
  [[nodiscard]] pass_result steady_state() const noexcept {
    if (passes.size() <= 1) return passes.empty() ? pass_result{} : passes.front();
    pass_result worst;
    double worst_ratio = -1.0;
    for (std::size_t i = 1; i < passes.size(); ++i) {
      const pass_result& p = passes[i];
      if (p.held_ratio() > worst_ratio) {
        worst_ratio = p.held_ratio();
        worst.peak_live_bytes = p.peak_live_bytes;
        worst.peak_held_bytes = p.peak_held_bytes;
      }
      worst.driver_calls = std::max(worst.driver_calls, p.driver_calls);
      worst.driver_us = std::max(worst.driver_us, p.driver_us);
      worst.waits = std::max(worst.waits, p.waits);
      worst.gpu_wait_us = std::max(worst.gpu_wait_us, p.gpu_wait_us);
    }
    return worst;
  }

  /// peak held / peak live.
  [[nodiscard]] double held_ratio() const noexcept {
    return peak_live_bytes == 0 ? 0.0 : static_cast<double>(peak_held_bytes) / static_cast<double>(peak_live_bytes);
  }
};

/// Settings of a replay.
struct replay_options {
  int device = 0;
  /// How many times the trace is replayed through the one allocator (at least 1).
  unsigned passes = 1;
  /// How far the simulated GPU runs behind the program, in microseconds (sim only). 0: the GPU
  /// keeps up, and every free is done as soon as it is made. Otherwise the clock follows the
  /// trace's times and each row queues work on its stream that completes this long after the row,
  /// as in a program that queues kernels ahead of a busy GPU: a block freed on a stream is that
  /// stream's alone until then.
  double gpu_lag_us = 0.0;
  /// Options of the tidepool allocator (the other allocators have none).
  pool_options tidepool_options{};
  /// Take a replay_sample every this many rows (0: none). Each holds the peaks of live and held
  /// memory since the one before, so a chart of the samples misses no peak.
  std::size_t sample_every = 0;
  /// Called now and then with (rows done, rows in all); may be empty.
  std::function<void(std::size_t, std::size_t)> progress;
};

/// Creates the allocator `allocator_name` on `drv` and replays `t` with it. Driver calls are
/// counted from before the allocator exists, so give each replay a fresh driver for counts that
/// are the allocator's own.
[[nodiscard]] replay_result replay_trace(const trace& t, std::string_view allocator_name,
                                         const std::shared_ptr<driver>& drv, const replay_options& options = {});

}  // namespace tidepool::replay
