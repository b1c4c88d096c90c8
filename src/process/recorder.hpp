// recorder: the process's recording (process.hpp start_recording, TIDEPOOL_RECORD). Every pool of
// the process records into its own buffer under its own lock (core/pool_recording.cpp); a writer
// thread takes the buffers every flush interval, or sooner when a pool's buffer fills, and writes
// them as RMM log rows (the format `tidepool replay` reads) to the file, keeping the latest events
// of each device in a bounded ring for snapshots (tidepool.dump_snapshot).
//
// Memory stays bounded: a pool whose buffer reaches `synchronous_events` (the writer fell behind)
// has the thread that filled it write the buffer itself before it returns to the program.
//
// A child made by fork() stops writing: it closes its copy of the file and drops what its pools
// buffer (a forked child of a CUDA program does not use the GPU; its copy of the parent's buffers
// would duplicate rows in the parent's file).
//
// Locks, always in this order: the process mutex (start, stop and pool creation), the recorder's
// file mutex (every write), a pool's lock (taking its buffer).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "process/record_file.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/process.hpp"

namespace tidepool::detail {

class recorder {
 public:
  /// The process's recorder; never destroyed (frees may arrive during static destruction).
  static recorder& instance();

  /// Starts recording to `path` (a "%p" in it becomes the process id): every pool in `pools`
  /// (nullptr entries skipped) and every pool attached later. The caller holds the process mutex.
  void start(const std::string& path, const recording_options& options, const std::vector<pool*>& pools);
  /// Writes what is buffered and closes the file; a no-op when not recording. The caller holds
  /// the process mutex.
  void stop(const std::vector<pool*>& pools);
  /// A pool made while recording records too. The caller holds the process mutex.
  void attach(pool& p);
  [[nodiscard]] bool active() const;
  [[nodiscard]] std::string path() const;
  /// The latest events of `device` (oldest first), after taking every pool's buffer.
  [[nodiscard]] std::vector<recorded_event> recent(int device);

 private:
  recorder() = default;
  static void on_full(void* context, int device, std::size_t pending);
  // fork(): no thread may hold a recorder lock across it; the child records nothing (it would
  // write its copy of the parent's buffers into the parent's file).
  static void fork_prepare();
  static void fork_parent();
  static void fork_child();
  void writer_loop();
  // Takes every pool's buffer and writes it; file_mutex_ held (as for the three below).
  void flush_locked();
  // Formats the allocate/free/failure rows of pool `device`'s events and keeps all in its ring.
  void consume(int device, const std::vector<recorded_event>& events);
  void append_row(const recorded_event& e);
  void write_text();

  mutable std::mutex file_mutex_;
  std::unique_ptr<record_file> file_;
  recording_options options_{};
  std::int64_t start_ns_ = 0;
  std::vector<recorded_event> taken_;
  std::string text_;
  std::vector<std::deque<recorded_event>> history_;  // by device
  bool failed_ = false;  // a write failed: rows are dropped from then on (said once on stderr)

  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool wake_due_ = false;
  bool stopping_ = false;
  // Held by pointer: a child made by fork() has no writer thread, and drops (leaks) the object.
  std::unique_ptr<std::thread> writer_;
  std::atomic<bool> writer_running_{false};
  bool at_exit_registered_ = false;
};

/// Reads TIDEPOOL_RECORD (and starts recording when set) once, as the process layer starts (its
/// first pool). The caller holds the process mutex.
void start_recording_from_environment(const std::vector<pool*>& pools);

}  // namespace tidepool::detail
