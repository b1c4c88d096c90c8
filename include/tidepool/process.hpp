// tidepool/process.hpp: the process-wide layer, one pool per device over one driver.
//
// Front ends (the C API, the Python package) use these; a C++ program may too, or may own its
// pools directly. The driver is the CUDA driver unless TIDEPOOL_DEVICE=sim selects the simulated
// GPU (or set_default_driver() was called before the first pool was made).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tidepool/driver.hpp"
#include "tidepool/pool.hpp"

namespace tidepool {

/// The process's driver: set_default_driver()'s, else sim when TIDEPOOL_DEVICE=sim, else CUDA.
/// Throws tidepool::error (unavailable) when CUDA is asked for and absent.
[[nodiscard]] TIDEPOOL_API std::shared_ptr<driver> default_driver();
/// Replaces the process's driver; only allowed before the first pool exists.
TIDEPOOL_API void set_default_driver(std::shared_ptr<driver> drv);
/// Options for the pools the process creates. Only allowed before the first pool exists (a pool
/// keeps the options it was made with): throws tidepool::error (invalid_argument) after.
TIDEPOOL_API void set_default_pool_options(const pool_options& options);

/// The process's pool of `device`, created on first use.
[[nodiscard]] TIDEPOOL_API pool& device_pool(int device);
/// The pools created so far, by device (nullptr where none).
[[nodiscard]] TIDEPOOL_API std::vector<pool*> existing_pools();

/// Hands back every cached byte this process holds on every GPU it has opened, and on no other:
/// tidepool's pools, the CUDA async pools, then the reclaim hooks. Returns the bytes handed back,
/// from the allocators' own counts.
TIDEPOOL_API std::size_t release_cached_memory();
/// Changes the most `device`'s pool maps (pool::set_byte_cap), as
/// torch.cuda.set_per_process_memory_fraction does for PyTorch's allocator; SIZE_MAX lifts it.
/// Before the pool exists the cap is kept and the pool is made with it (in place of the default
/// options' byte_cap). Tags' pools keep their own caps. Throws tidepool::error (invalid_device) for
/// a device that does not exist.
TIDEPOOL_API void set_device_byte_cap(int device, std::size_t bytes);
/// The byte cap of `device`'s pool, or the one it will be made with (SIZE_MAX: none).
[[nodiscard]] TIDEPOOL_API std::size_t device_byte_cap(int device);
/// The largest allocation that could succeed on `device` now: the pool's cache plus what the
/// driver reports free, less headroom and byte cap.
[[nodiscard]] TIDEPOOL_API std::size_t available_bytes(int device);

// --- Memory shared between processes (CUDA IPC of virtual memory) ---
// A process exports a live allocation with pool::export_allocation and passes the descriptors on;
// another process maps them with import_memory and sees the same bytes until it closes them.

/// Maps memory that another process (or this one) exported: `fds` and `handle_sizes` as
/// exported_allocation holds them, on the GPU whose UUID is `device_uuid`, and returns a pointer
/// to the allocation's first byte (`offset` into the handles, `bytes` long), and this process's
/// ordinal of that GPU in `*device` unless null. The descriptors stay the caller's. The memory
/// lives until close_imported_memory, even once the exporter lets go.
/// Throws tidepool::error: invalid_device when this process does not see that GPU,
/// invalid_argument for sizes or an offset that do not fit, or a descriptor that is not exported
/// memory; unavailable where the driver cannot import; driver_failure otherwise. A failed import
/// leaves nothing mapped.
[[nodiscard]] TIDEPOOL_API void* import_memory(const device_uuid_bytes& device_uuid, const std::vector<int>& fds,
                                               const std::vector<std::size_t>& handle_sizes, std::size_t offset,
                                               std::size_t bytes, int* device = nullptr);
/// Unmaps memory from import_memory once the device's queued work is done (it waits for it, so
/// that no kernel still reading the memory faults). Throws tidepool::error (invalid_pointer) for
/// any other pointer, or one closed already.
TIDEPOOL_API void close_imported_memory(void* ptr);
/// Bytes of other processes' memory mapped here by import_memory now (whole handles).
[[nodiscard]] TIDEPOOL_API std::size_t imported_bytes();

/// Maps on `device` (this process's ordinal) the cuMemAlloc allocation another process named with
/// cudaIpcGetMemHandle (what PyTorch's own allocator sends for a CUDA tensor) and returns its
/// first byte. Opening a handle that is open already returns the same pointer; every open is
/// closed with close_cuda_ipc_memory. Throws tidepool::error: invalid_device for a device that
/// does not exist, unavailable where the driver cannot open such handles (the simulated GPU),
/// invalid_argument for a handle the driver refuses, driver_failure otherwise.
[[nodiscard]] TIDEPOOL_API void* open_cuda_ipc_memory(int device, const ipc_memory_handle& handle);
/// Closes one open_cuda_ipc_memory of the allocation at `ptr` once the device's queued work is
/// done (it waits); the last close unmaps it. Throws tidepool::error (invalid_pointer) for any
/// other pointer, or one closed as often as it was opened.
TIDEPOOL_API void close_cuda_ipc_memory(void* ptr);

// --- Tags: sleep and wake (issue 13) ---
// A tag names memory that goes to sleep and wakes together (weights, optimizer state, a KV cache).
// Each tag has a pool of its own per device (its own address ranges, cache and handles), so one
// tag's freed memory is never reused by another. Allocations made through the process layer (C
// API, Python, the framework entry points) while a thread has a tag pushed come from that tag's
// pool; frees find the pool that owns the pointer. Tag pools use the default pool options, each
// on its own (a byte cap applies per pool). At most 64 tags per process.

/// Makes `name` the calling thread's current tag until the matching pop_tag() (tags nest).
/// Throws tidepool::error for an empty or over-long name.
TIDEPOOL_API void push_tag(const std::string& name);
/// Drops the calling thread's current tag; throws tidepool::error when none was pushed.
TIDEPOOL_API void pop_tag();
/// The tag of allocations made on threads with no tag pushed ("" for none, the default): for
/// memory allocated on threads the program does not run, such as PyTorch's autograd threads,
/// which run the backward pass (gradients). Returns the default tag it replaces.
TIDEPOOL_API std::string set_default_tag(const std::string& name);
/// The default tag, "" when none.
[[nodiscard]] TIDEPOOL_API std::string default_tag();
/// The calling thread's current tag (else the default tag), "" when none.
[[nodiscard]] TIDEPOOL_API std::string current_tag();
/// The pool the calling thread allocates from on `device`: the current tag's, else device_pool().
[[nodiscard]] TIDEPOOL_API pool& current_pool(int device);
/// Tag `name`'s pool of `device`, made on first use.
[[nodiscard]] TIDEPOOL_API pool& tag_pool(const std::string& name, int device);
/// The tags named so far, in order of first use.
[[nodiscard]] TIDEPOOL_API std::vector<std::string> tags();
/// Puts tag `name` to sleep on every device where it has a pool (pool::sleep): returns the bytes
/// handed back. All devices or none: if one fails, those already asleep are woken and the error
/// is rethrown. Throws tidepool::error (invalid_argument) for a tag never used, asleep when it is
/// asleep already.
TIDEPOOL_API std::size_t sleep_tag(const std::string& name, sleep_keep keep = sleep_keep::contents);
/// Wakes tag `name` on every device where it sleeps (pool::wake). When a device is full, the
/// other pools' caches there, the CUDA async pools and the reclaim hooks are asked first, then it
/// is tried once more; on failure (tidepool::out_of_memory, or an error) the devices woken by this
/// call go back to sleep, so the tag stays asleep with its contents. Throws tidepool::error
/// (asleep) when the tag is not asleep.
TIDEPOOL_API void wake_tag(const std::string& name);
/// Whether tag `name` is asleep (on any device). Throws for a tag never used.
[[nodiscard]] TIDEPOOL_API bool tag_asleep(const std::string& name);

/// Allocations made by this thread through the process layer while it lives carry tag `name`:
///   { tidepool::scoped_tag weights("weights"); load_weights(); }
///   tidepool::sleep_tag("weights");
class scoped_tag {
 public:
  explicit scoped_tag(const std::string& name) { push_tag(name); }
  ~scoped_tag() { pop_tag(); }
  scoped_tag(const scoped_tag&) = delete;
  scoped_tag& operator=(const scoped_tag&) = delete;
};

/// How this process shares GPUs with the user's other tidepool processes (issue 14). Each GPU
/// with a pool has a ledger in shared memory (/dev/shm, or $TIDEPOOL_LEDGER_DIR); before an
/// allocation fails, the process asks the others on that GPU to hand back cached memory, and a
/// helper thread serves their requests by releasing its own cache (never live data). Defaults
/// come from TIDEPOOL_SHARING (0: off), TIDEPOOL_SHARING_GIVES (0: never give) and
/// TIDEPOOL_SHARING_WAIT_MS.
struct sharing_options {
  bool enabled = true;  ///< ask the others before failing, and join the ledgers
  bool gives = true;    ///< hand cached memory to the processes that ask
  /// How long one out-of-memory path waits for the others' answers, in all. A neighbour gives
  /// its cache back handle by handle (an unmap and a release each), so a large cache takes a
  /// while; the wait is paid only by an allocation that would otherwise fail (the rates measured
  /// on an H200 are in docs/RESULTS.md).
  std::chrono::milliseconds wait{1000};
};

/// The options in force.
[[nodiscard]] TIDEPOOL_API sharing_options get_sharing_options();
/// Sets them, at any time: turning sharing off leaves every ledger and stops the helper threads;
/// `gives` is published at once. A wait of more than 60 s is refused (tidepool::error).
TIDEPOOL_API void set_sharing_options(const sharing_options& options);
/// Leaves every ledger and stops the helper threads, waiting at most a second for each (Python
/// calls it at exit, before the interpreter can no longer run a reclaim hook). Sharing resumes
/// when another pool is made.
TIDEPOOL_API void stop_sharing();
/// How a recording streams to its file.
struct recording_options {
  /// The writer thread writes every pool's buffer this often.
  std::chrono::milliseconds flush_interval{100};
  /// A pool's buffer wakes the writer at this many events (and every multiple)...
  std::size_t notify_events = 16384;
  /// ...and at this many the thread that fills it writes it itself: memory stays bounded.
  std::size_t synchronous_events = 16 * 16384;
  /// Events of each device kept in memory for snapshots (snapshot_events).
  std::size_t history_events = 100000;
};

/// Records every allocation and free of the process's pools (every device, from now until
/// stop_recording) to `path`: an RMM replay log (`Thread,Time,Action,Pointer,Size,Stream`, what
/// `tidepool replay` reads), gzip when the path ends in ".gz" ("%p" in it becomes the process id).
/// It begins with the allocations live now (thread 0, time 0); Time is since the start; Thread
/// is the caller's thread id. The file is streamed: a killed process leaves a readable file up to
/// the last flush. TIDEPOOL_RECORD=path starts one when the first pool is made. Throws
/// tidepool::error if already recording or the file cannot be created.
TIDEPOOL_API void start_recording(const std::string& path, const recording_options& options = {});
/// Writes what is buffered and closes the file; a no-op when not recording.
TIDEPOOL_API void stop_recording();
/// The file being recorded to, or "" when not recording.
[[nodiscard]] TIDEPOOL_API std::string recording_path();
/// The latest events of `device` (allocations, frees, failures, maps and unmaps; at most
/// recording_options::history_events, oldest first) while recording; empty otherwise.
[[nodiscard]] TIDEPOOL_API std::vector<recorded_event> recent_events(int device);

}  // namespace tidepool
