// tidepool/pool.hpp: the pool of one device. Thread safe.
//
//   auto pool = tidepool::pool(tidepool::make_cuda_driver(), /*device=*/0);
//   void* p = pool.allocate(1 << 20, stream);
//   pool.deallocate(p, stream);
//   std::size_t returned = pool.release();   // bytes handed back to the driver
//
// Physical memory comes in handles mapped into reserved address ranges, so a free handle goes back
// even when its neighbours are in use (docs/DESIGN.md). The implementation is in src/core/.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tidepool/driver.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/export.h"

namespace tidepool {

namespace detail {
class pool_impl;
}

/// How long an allocation is expected to live. Persistent requests are placed apart from
/// scratch, so a long-lived array never pins a freed scratch region.
enum class lifetime : std::uint8_t {
  scratch,     ///< the default: freed soon, reused often
  persistent,  ///< lives long (weights, kept results, caches)
};

/// What pool::sleep keeps of the live allocations' contents.
enum class sleep_keep : std::uint8_t {
  contents,  ///< copied to pinned host memory and restored by wake()
  nothing,   ///< dropped: after wake() the allocations hold whatever the new memory holds
};

/// When free physical memory goes back to the driver. It always goes back on release() and
/// under memory pressure (the out-of-memory path); these add automatic release.
struct release_policy {
  /// Keep at most this many free (cached) bytes; above it, free handles go back at once.
  std::size_t max_cached_bytes = static_cast<std::size_t>(-1);
  /// Free handles unused for this long go back (checked on allocate/deallocate); 0 = never.
  std::chrono::milliseconds decay{0};
  /// The clock `decay` is measured on; empty: std::chrono::steady_clock::now. Read on the first
  /// allocate or deallocate and every 64th after it (tests pass a clock of their own).
  std::function<std::chrono::steady_clock::time_point()> clock{};
  /// Hand free handles back as soon as they are free (slow; for debugging and tight sharing).
  bool immediate = false;
};

/// Options of a pool. The defaults suit training and inference.
/// When a thread allocating from a pool gets a small cache of its own in front of the pool's lock
/// (a few blocks it frees and takes again of one size, with no lock shared with other threads).
enum class thread_cache_policy : std::uint8_t {
  /// Once the thread keeps finding the pool's lock held (a sixteenth of its calls in a window
  /// of 256): programs with one allocating thread never have one.
  when_contended,
  always,  ///< from the thread's first call (tests; programs known to allocate from many threads)
  never,   ///< every call takes the pool's lock (peaks then never count cached blocks as in use)
};

struct pool_options {
  /// Never map more than this many bytes (physical memory held by the pool). Like a smaller
  /// device, a cap bounds the physical handles the pool makes to a 256th of it (a granule at
  /// least), so that what live blocks pin of a handle stays a small share of what the pool may hold.
  std::size_t byte_cap = static_cast<std::size_t>(-1);
  /// Leave at least this many bytes free on the device (checked against the driver's free).
  std::size_t headroom = 0;
  /// Requests of at most this size are packed into pages of their own (1 MiB: PyTorch's small
  /// pool takes the same sizes, so a program's 1 MiB buffers live where PyTorch put them).
  std::size_t small_size_threshold = std::size_t{1} << 20;
  release_policy release{};
  /// Reserve address space in ranges of this size. 0: four times the device's capacity for large
  /// lifetime::scratch requests (a layout near the device's capacity needs address space for
  /// the holes it keeps), the device's capacity for the others.
  std::size_t address_range_bytes = 0;
  /// Growth budget: new physical memory is created freely while held + need stays within
  /// (1 + growth_slack) * max(peak in use, in use + need); beyond it, free handles cached
  /// elsewhere in the pool are unmapped and moved under the request instead (stealing: no more
  /// memory held, but an unmap, a map and a set-access per handle moved; docs/DESIGN.md has their cost).
  /// The budget is fixed: it never widens by itself. It is a cap for workloads whose own
  /// fragmentation is pathological, not what holds memory down: placement does that (best fit
  /// with the frontier rule holds the recorded training loops and the loader at or below
  /// expandable segments' figure with no stealing at all). A workload whose fragmentation passes
  /// the slack steals in every step, forever, and stealing moves handles that placement would
  /// have reused; and a program still growing toward its peak can pass a tight cap for a moment
  /// (a large request while its cache is cut up), when a steal leaves an unmapped hole inside the
  /// free memory that every later pass lays out around. So the default, 1.0 (held at most twice
  /// peak in use), sits well above what the measured workloads need: no measured trace steals at
  /// it. Smaller values hold less only on workloads past them and pay driver calls in every step
  /// (the measured frontier is in docs/RESULTS.md).
  /// Must be >= 0.
  double growth_slack = 1.0;
  /// Past the alias budget (alias_slack), map free handles a second time under the request (one
  /// map and set-access per handle, no unmap, no new memory) before making new ones: a handle may
  /// then be mapped at several addresses, of which one at a time holds live blocks. Mappings stay,
  /// so a loop that has seen its shapes stops calling the driver. Aliasing stops by itself in a
  /// pool where the blocks it keeps out of reuse cause growth of 0.6x peak in use (loader and
  /// random shapes). Experimental and off by default: it holds the recorded LLM training loops at
  /// 1.01-1.02x their peak in use and the checkpointed ones below expandable segments, but the
  /// loader, random mixes and a generation loop above them, and loops whose aliases keep meeting
  /// refusals make driver calls in later steps (docs/RESULTS.md, section 0, "Aliases with a budget
  /// of their own", "The aliases' stop"). sleep() refuses while a live block lies on a handle
  /// mapped twice.
  bool alias_free_handles = false;
  /// With alias_free_handles: new handles while held + need stays within (1 + alias_slack) *
  /// max(peak in use, in use + need); past it idle handles are mapped again first. Must be >= 0;
  /// a value above growth_slack acts as growth_slack.
  double alias_slack = 0.02;
  /// Per-thread caches (docs/DESIGN.md, "Thread caches"): each holds at most 8 blocks and 64 MiB,
  /// which every slow path, release() and the out-of-memory path take back first. While a thread
  /// has one, peak_in_use_bytes counts the blocks waiting in it as in use; in_use_bytes and every
  /// other figure stay exact. Off while recording or with an automatic release policy.
  thread_cache_policy thread_caches = thread_cache_policy::when_contended;
  /// CUDA graphs: an allocation on a stream being captured into a graph is the graph's (its
  /// kernels write there at every launch), so once freed, during the capture or after it, it
  /// serves only later allocations of that capture on that stream, and goes back to the pool when
  /// the driver says the graph is gone (destroyed, with every executable graph made from it and
  /// their launches complete), as PyTorch's private graph pools do. No event is recorded on a
  /// stream being captured. Costs one driver query (cuStreamGetCaptureInfo) per allocation on a
  /// stream other than the legacy default stream, which cannot be captured. Off: a block freed
  /// in a capture may be handed to other work while the graph still writes to it.
  bool follow_graph_captures = true;
  /// The out-of-memory path's last step, after every cache is handed back and the device waited
  /// for: when the granules that live allocations leave untouched on their handles would serve
  /// the request, the pool moves those allocations' bytes as compact() does (only as many handles
  /// as the request lacks) and serves it, where it would otherwise throw out_of_memory. The pool
  /// waits for the whole device first, so work queued before the request is safe; GPU work that
  /// another thread launches on the pool's memory while the bytes move is not (its writes are
  /// lost, its reads see bytes not yet copied back), and the pool cannot see such a thread. So
  /// it is off by default: turn it on in a program that launches work on this device from one
  /// thread at a time (a training loop, PyTorch's backward thread included). Skipped while any
  /// stream of the device is being captured into a CUDA graph.
  bool compact_on_out_of_memory = false;
};

/// A snapshot of a pool's figures. "mapped" is physical memory held (created and mapped or
/// cached unmapped); "in use" counts live blocks as placed (rounded to alignment); "requested"
/// counts live bytes as asked for.
struct pool_stats {
  std::size_t in_use_bytes = 0;
  std::size_t requested_bytes = 0;
  std::size_t cached_bytes = 0;           ///< held by the pool but not in use: mapped - in use
  std::size_t mapped_bytes = 0;           ///< physical memory held (what the driver counts)
  std::size_t reserved_address_bytes = 0; ///< virtual address space reserved
  std::size_t peak_in_use_bytes = 0;
  std::size_t peak_requested_bytes = 0;
  std::size_t peak_mapped_bytes = 0;
  std::size_t live_allocations = 0;
  std::size_t streams = 0;                ///< streams the pool keeps state for now
  std::size_t thread_caches = 0;          ///< threads with a cache of their own (pool_options::thread_caches)
  std::uint64_t allocations = 0;          ///< total allocate() calls that succeeded
  std::uint64_t deallocations = 0;
  std::uint64_t out_of_memory_recoveries = 0; ///< allocations saved by the out-of-memory path
  std::size_t released_bytes = 0;         ///< total handed back to the driver so far
  /// Physical memory handed back by sleep() that wake() maps again (0 while awake). In use +
  /// cached = mapped + asleep always.
  std::size_t asleep_bytes = 0;
  /// Free bytes kept for CUDA graphs that are still alive (pool_options::follow_graph_captures):
  /// cached, but reusable only by their capture, and not handed back by release().
  std::size_t graph_kept_bytes = 0;
  /// CUDA graphs the pool keeps memory for now, counted once per stream they allocated on.
  std::size_t graphs = 0;
  driver_call_counts driver{};            ///< calls this pool made

  /// Memory held but not in use (mapped minus in use).
  [[nodiscard]] std::size_t fragmentation_bytes() const noexcept { return mapped_bytes - in_use_bytes; }
};

/// The physical memory under one allocation as another process can map it
/// (pool::export_allocation).
struct exported_allocation {
  /// One file descriptor per physical handle under the allocation, in address order (POSIX
  /// file-descriptor handles of the CUDA driver); the caller owns them and closes them once they
  /// are passed on (SCM_RIGHTS, pidfd_getfd, Python's multiprocessing.reduction.DupFd).
  std::vector<int> fds;
  /// Each handle's bytes: the handles are mapped side by side, in this order.
  std::vector<std::size_t> handle_sizes;
  /// Each handle's export id: the same in every export of the handle while it lives, and never
  /// another handle's in this process (a forked child may repeat its parent's), so an importer
  /// that still maps the handles from an earlier export can reuse that mapping.
  std::vector<std::uint64_t> handle_ids;
  std::size_t offset = 0;  ///< from the first handle's start to the allocation's first byte
  std::size_t bytes = 0;   ///< the allocation's size as asked for
};

/// One event a recording pool keeps (pool::start_recording): what the program asked and what the
/// pool mapped, in the order the pool's lock saw them.
struct recorded_event {
  enum class kind : std::uint8_t {
    allocate,          ///< `address`, `size` bytes as asked
    free,              ///< `address`, `size` bytes as asked when allocated
    allocate_failure,  ///< out of memory for `size` bytes (`address` 0)
    map,               ///< `size` bytes of physical memory mapped at `address`
    unmap,             ///< `size` bytes unmapped at `address`
  };
  kind what = kind::allocate;
  std::uint32_t thread = 0;     ///< the calling thread's id (gettid); 0 for allocations live at the start
  std::int64_t time_ns = 0;     ///< std::chrono::steady_clock, in nanoseconds
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::uintptr_t stream = 0;    ///< the stream handle of the call (0: the legacy default stream)
};

/// Called (with no lock held) by the thread whose allocate or deallocate filled a recording pool's
/// buffer: `pending` events are waiting in pool `device`'s buffer for pool::take_recorded.
using recording_full_fn = void (*)(void* context, int device, std::size_t pending);

/// One block of a pool as pool::describe() sees it. Blocks cover each reserved range with no gap.
struct block_description {
  enum class status : std::uint8_t {
    live,      ///< allocated
    free,      ///< free and mapped (cached)
    pending,   ///< freed, waiting for other streams' work (record_stream) or being moved
    unmapped,  ///< free address space with no memory mapped under it
  };
  std::uintptr_t address = 0;
  std::size_t size = 0;          ///< as placed
  std::size_t requested = 0;     ///< live: bytes asked for; else 0
  status state = status::free;
  std::uintptr_t stream = 0;     ///< live: the stream allocated on; free: the stream that may reuse it (0: any)
  bool small = false;            ///< in a small-request region (pool_options::small_size_threshold or less)
  bool persistent = false;       ///< in a region for lifetime::persistent requests
  std::uintptr_t range = 0;      ///< the base of the reserved range (or segment) it lies in
};

/// A physical memory handle the pool holds and where it is mapped.
struct handle_description {
  std::uintptr_t address = 0;
  std::size_t size = 0;
};

/// What a pool holds, block by block (pool::describe). Slow: for reports and snapshots.
struct pool_description {
  pool_stats stats{};
  std::vector<block_description> blocks;    ///< by region, then address
  std::vector<handle_description> handles;  ///< mapped handles (fallback segments: none)
  std::size_t largest_free_block = 0;       ///< the largest cached block (free and mapped)
  /// What release() could hand back now: whole handles (fallback: whole segments) under free
  /// blocks, counting blocks whose frees other streams' work still holds as release() waits for it.
  std::size_t releasable_bytes = 0;
};

/// The pool of one device.
class TIDEPOOL_API pool {
 public:
  /// Creates the pool of `device` on `drv` (opening the device's context if needed).
  pool(std::shared_ptr<driver> drv, int device, pool_options options = {});
  ~pool();
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  pool(pool&&) noexcept;
  pool& operator=(pool&&) noexcept;

  /// Allocates `bytes` (aligned to 256 bytes at least) for use on `stream`. Throws
  /// tidepool::error on bad input and tidepool::out_of_memory when nothing can be reclaimed.
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream = nullptr,
                               lifetime hint = lifetime::scratch);
  /// Frees `ptr`, last used on `stream`: it is reused at once on `stream`, and on other streams
  /// once the work queued on `stream` at this point has completed and, while the pool is within
  /// its growth budget, `stream` holds nothing live or was forgotten (a stream that still
  /// allocates keeps what it frees, as PyTorch's per-stream pools do; past the budget, on the
  /// out-of-memory path and at release() every stream's completed frees serve any stream).
  /// `stream` must exist (not be destroyed) during the call, unless forget_stream() was told.
  void deallocate(void* ptr, stream_t stream = nullptr);
  /// Marks `ptr` as used on `stream` too (like PyTorch's record_stream): its memory is not
  /// reused until the work queued on `stream` before its free has completed. As in PyTorch, an
  /// event is recorded on `stream` when `ptr` is freed, so `stream` must still exist then (or have
  /// been passed to forget_stream()).
  void record_stream(void* ptr, stream_t stream);
  /// Tells the pool that `stream` is, or is about to be, destroyed. Call it (before or after the
  /// destruction) for every stream the program made and used with the pool: the pool never names
  /// `stream` to the driver again, and a new stream that CUDA later gives the same handle starts
  /// with nothing of the old one's (the pool cannot tell them apart by itself). Memory freed on
  /// `stream` reaches other streams once the work queued there is done. `stream` passed to a
  /// later deallocate() of a block allocated on it still means the forgotten stream. Unknown
  /// streams and the default stream are ignored.
  void forget_stream(stream_t stream);
  /// Hands every free physical handle back to the driver (waiting for pending frees first).
  /// Returns the bytes handed back.
  std::size_t release();
  /// release(), then the rest of what live allocations pin: every physical handle that live
  /// allocations cover only in part is made again as handles under just the 2 MiB granules they
  /// touch, their bytes moved through pinned host memory (kept after the call for the next one,
  /// as sleep() keeps its buffer), at the same addresses; the other granules go back to the
  /// driver. Afterwards the pool holds the granules its live allocations touch, plus what it
  /// cannot move: memory exported to another process and not yet ended (as for sleep), a CUDA
  /// graph capture's cached blocks, and frees another stream's work still holds. Waits first for
  /// the work queued on every stream the pool's allocations were made, freed or recorded on (as
  /// sleep() does), so call it outside a CUDA graph capture. While it runs the program must not
  /// touch the pool's memory from the GPU (the bytes move: a kernel would read an unmapped
  /// address or stale bytes); allocate() on other threads waits until it returns (on the thread
  /// calling compact(), a callback that allocates is refused: tidepool::error, asleep);
  /// deallocate() works. A handle the device has
  /// no room to copy (the new handles exist beside the old one for a moment), or that would pass
  /// the byte cap meanwhile, stays as it is. Returns the bytes handed back, release()'s included.
  /// Throws tidepool::error: asleep while asleep, unavailable without the virtual memory API or
  /// with alias_free_handles, driver_failure when a copy or the driver fails (that handle then
  /// stays as it was, contents and all).
  std::size_t compact();
  /// Puts the pool to sleep: waits for the work queued on the streams its allocations were made
  /// or recorded on (an event on each; a device-wide wait where one of them cannot be named: a
  /// forgotten stream, another thread's per-thread stream, a pending record_stream free), copies
  /// every live allocation's bytes to pinned host memory when `keep` is contents (one buffer, kept
  /// after wake() for the next sleep, since pinning costs far more than the copy), then unmaps and
  /// releases every physical handle, cached ones too. Address ranges and allocations stay: the
  /// pointers remain the program's, and wake() brings memory back under them. Handles under an
  /// allocation exported to another process and not yet ended (export_allocation, end_export)
  /// stay awake, contents and all, with every live allocation that shares a handle with them:
  /// that memory is the other process's too (stats().mapped_bytes says how much stayed). Returns
  /// the bytes handed back to the driver (exact, as release()). While asleep, allocate() throws
  /// tidepool::error (asleep); deallocate() works (the memory under the freed block comes back with
  /// wake() as cache); release() returns 0; touching the memory on the GPU is an illegal address.
  /// Throws tidepool::error: asleep when already asleep, unavailable without the virtual memory
  /// API, driver_failure when a copy or the driver fails (the pool then stays awake when it could
  /// put back what it had done, else asleep for what slept; wake() then restores it). An
  /// allocation another thread has in progress when sleep begins must end first: ordering them
  /// is the program's (as for using memory on a stream the pool never saw).
  std::size_t sleep(sleep_keep keep = sleep_keep::contents);
  /// Wakes a sleeping pool: new handles mapped at the same addresses, the contents copied back (if
  /// kept), so pointers, and CUDA graphs captured over them, stay valid. Throws
  /// tidepool::out_of_memory when the device has no room (then nothing is mapped, the pool stays
  /// asleep with its contents, and wake() may be tried again), tidepool::error (asleep) when not
  /// asleep, driver_failure when the driver fails otherwise (also left asleep).
  void wake();
  /// Whether the pool is asleep.
  [[nodiscard]] bool asleep() const;
  /// Size of the live allocation at `ptr` as requested; throws tidepool::error if not live.
  [[nodiscard]] std::size_t allocation_size(const void* ptr) const;
  /// Whether `ptr` is a live allocation of this pool.
  [[nodiscard]] bool owns(const void* ptr) const;
  /// Exports the physical memory under the live allocation at `ptr`, so that another process
  /// can map it (tidepool::import_memory there; CUDA IPC of virtual memory). The handles stay
  /// this pool's: a process that imported them keeps their memory alive after this pool lets go,
  /// but the pool hands the allocation's bytes out again once it is freed here, so the program
  /// keeps the allocation live while others use it (tidepool.torch.use() does that for tensors
  /// sent through torch.multiprocessing). Other allocations sharing its handles are visible to
  /// the importer too, as with cudaIpcGetMemHandle. Each export counts as in use until
  /// end_export(): while any is, sleep() leaves the allocation's handles awake (the importer
  /// maps that memory; released here, it would live on there, and the two copies would part
  /// at wake). Throws tidepool::error: invalid_pointer
  /// unless `ptr` is a live allocation of this pool, asleep while the pool sleeps, unavailable
  /// where the driver cannot export the pool's memory (a plain cuMemAlloc segment, a GPU or
  /// container without POSIX file-descriptor handles), driver_failure when an export fails;
  /// then no descriptor is left open.
  [[nodiscard]] exported_allocation export_allocation(const void* ptr);
  /// Says that the process an export_allocation() of `ptr` went to no longer maps it (once per
  /// export; more calls than exports are ignored), so that sleep() may put its handles to sleep
  /// again. tidepool.share_memory calls it when every receiver has let go. Throws
  /// tidepool::error (invalid_pointer) unless `ptr` is a live allocation of this pool.
  void end_export(const void* ptr);
  /// The largest allocation that could succeed now: cached free memory plus what the driver
  /// could still give, within the byte cap and headroom.
  [[nodiscard]] std::size_t available_bytes() const;
  [[nodiscard]] pool_stats stats() const;
  /// Brings the peaks stats() reports (peak_in_use_bytes, peak_requested_bytes,
  /// peak_mapped_bytes) down to the current figures, so they measure from now on, as
  /// torch.cuda.reset_peak_memory_stats does. The growth budget keeps the peak in use of the
  /// pool's whole life: resetting changes what is reported, never what the pool does.
  void reset_peak_stats();
  /// Changes the most this pool maps (pool_options::byte_cap) while it runs, as
  /// torch.cuda.set_per_process_memory_fraction does for PyTorch's allocator: SIZE_MAX lifts the
  /// cap, 0 lets the pool grow no more (a fraction of 0). Handles made from then on are a 256th of
  /// the new cap at most, as for pool_options::byte_cap. Memory mapped beyond a lowered cap stays
  /// until it is freed and released; an allocation that would grow past it first releases free
  /// cached memory, then fails as out of memory.
  void set_byte_cap(std::size_t bytes);
  /// The cap in force now (SIZE_MAX: none).
  [[nodiscard]] std::size_t byte_cap() const;
  [[nodiscard]] int device() const noexcept;
  /// The options the pool was made with (byte_cap as made: byte_cap() has the cap in force).
  [[nodiscard]] const pool_options& options() const noexcept;
  [[nodiscard]] const std::shared_ptr<driver>& get_driver() const noexcept;
  /// Grants `peer_device` access to every page this pool maps, now and later.
  void enable_peer_access(int peer_device);

  /// Every block and mapped handle, the largest free block and what release() could return.
  [[nodiscard]] pool_description describe() const;

  /// Starts keeping every allocate, free, failed allocation, map and unmap in a buffer, beginning
  /// with an `allocate` (thread 0) for each allocation live now, so a free of one made before is
  /// never orphaned. When the buffer reaches `notify_at` events, and again at every multiple of it,
  /// the calling thread calls `on_full` after dropping the lock. Throws if already recording.
  void start_recording(std::size_t notify_at, recording_full_fn on_full, void* context);
  /// Appends the buffered events to `out` and empties the buffer (no-op when not recording).
  void take_recorded(std::vector<recorded_event>& out);
  /// Stops recording; appends what was still buffered to `out`.
  void stop_recording(std::vector<recorded_event>& out);

  /// Takes the pool's lock and its thread caches' locks, for a fork() handler: a thread that held
  /// one of them at fork() would leave the child's copy locked for ever. tidepool's own handlers,
  /// registered when the first pool is made, call it for every pool of the process (the devices',
  /// the tags' and those a program makes itself), so a program need not. Every other call on this
  /// pool waits until unlock_after_fork().
  void lock_for_fork() noexcept;
  /// Drops the locks lock_for_fork() took (in the parent and in the child after fork()).
  void unlock_after_fork() noexcept;

 private:
  std::unique_ptr<detail::pool_impl> impl_;
};

}  // namespace tidepool
