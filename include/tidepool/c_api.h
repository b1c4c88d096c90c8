/* tidepool/c_api.h: the stable C ABI of libtidepool.so, over the process's pools (one per device).
 *
 * Every function but tidepool_torch_alloc catches whatever the C++ side throws: nothing propagates
 * out of it. A function that returns a tidepool_status reports failure by its code, and
 * tidepool_last_error() then holds a message for the calling thread (naming the pointer, size or
 * device at fault). The framework entry points (tidepool_torch_*, tidepool_cupy_*) cannot return a
 * status; they set the message and tidepool_last_status() on failure. tidepool_torch_alloc then
 * throws a C++ exception, for PyTorch (which does not check for NULL) to turn into a Python
 * exception; tidepool_cupy_malloc returns NULL (the Python package checks it and raises CuPy's
 * OutOfMemoryError); the free functions print the message to stderr, since nothing else would
 * show it.
 *
 * Streams are CUDA streams (cudaStream_t, CUstream); NULL is the legacy default stream.
 *
 *   void* p;
 *   if (tidepool_allocate(1 << 20, 0, stream, TIDEPOOL_SCRATCH, &p) != TIDEPOOL_SUCCESS)
 *     fprintf(stderr, "%s\n", tidepool_last_error());
 *   tidepool_deallocate(p, 0, stream);
 *
 * The driver is CUDA unless TIDEPOOL_DEVICE=sim (the simulated GPU; TIDEPOOL_SIM_DEVICES=N and
 * TIDEPOOL_SIM_CAPACITY=bytes, e.g. 8GiB, set its devices and per-device capacity).
 */
#ifndef TIDEPOOL_C_API_H
#define TIDEPOOL_C_API_H

#include <stddef.h>
#include <stdint.h>

#include "tidepool/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A CUDA stream: the same type as cudaStream_t and CUstream. */
typedef struct CUstream_st* tidepool_stream_t;

/** Outcome of a call. Mirrors tidepool::error_code (offset by one), plus out of memory. */
typedef enum tidepool_status {
  TIDEPOOL_SUCCESS = 0,
  TIDEPOOL_INVALID_SIZE = 1,      /**< zero, or larger than the device could ever hold */
  TIDEPOOL_INVALID_POINTER = 2,   /**< not allocated by tidepool (or an interior pointer) */
  TIDEPOOL_DOUBLE_FREE = 3,       /**< already freed */
  TIDEPOOL_INVALID_STREAM = 4,    /**< a stream of another device */
  TIDEPOOL_INVALID_DEVICE = 5,    /**< a device ordinal out of range */
  TIDEPOOL_INVALID_ARGUMENT = 6,  /**< any other bad argument (a null out-pointer, a bad hook id) */
  TIDEPOOL_DRIVER_FAILURE = 7,    /**< the driver failed in a way that is not out of memory */
  TIDEPOOL_UNAVAILABLE = 8,       /**< the backend (the CUDA driver) is not present */
  TIDEPOOL_OUT_OF_MEMORY = 9,     /**< nothing left after every reclaim step */
  TIDEPOOL_INTERNAL_ERROR = 10,   /**< anything else; the message says what */
  TIDEPOOL_ASLEEP = 11,           /**< the tag's memory is asleep (allocate, sleep), or not asleep (wake) */
  TIDEPOOL_STATUS_MAX_ENUM = 0x7FFFFFFF  /**< not a status: keeps the type int-sized */
} tidepool_status;

/** How long an allocation is expected to live (tidepool::lifetime). */
typedef enum tidepool_lifetime {
  TIDEPOOL_SCRATCH = 0,    /**< the default: freed soon, reused often */
  TIDEPOOL_PERSISTENT = 1, /**< lives long: placed apart, so it never pins freed scratch */
  TIDEPOOL_LIFETIME_MAX_ENUM = 0x7FFFFFFF  /**< not a hint: keeps the type int-sized */
} tidepool_lifetime;

/** For tidepool_deallocate and tidepool_record_stream: find the device that owns the pointer. */
#define TIDEPOOL_ANY_DEVICE (-1)

/** The figures of one device's pool (tidepool::pool_stats). Set struct_size to
 *  sizeof(tidepool_stats_t) before the call: fields only ever get appended, and the library fills
 *  no more than the caller's struct holds. */
typedef struct tidepool_stats_t {
  uint64_t struct_size;
  uint64_t in_use_bytes;            /**< live blocks as placed */
  uint64_t requested_bytes;         /**< live bytes as asked for */
  uint64_t cached_bytes;            /**< held but not in use */
  uint64_t mapped_bytes;            /**< physical memory held */
  uint64_t reserved_address_bytes;  /**< virtual address space reserved */
  uint64_t peak_in_use_bytes;
  uint64_t peak_requested_bytes;
  uint64_t peak_mapped_bytes;
  uint64_t live_allocations;
  uint64_t allocations;             /**< allocations that succeeded, in total */
  uint64_t deallocations;
  uint64_t out_of_memory_recoveries;  /**< allocations saved by the out-of-memory path */
  uint64_t released_bytes;          /**< handed back to the driver so far */
  uint64_t driver_calls;            /**< driver calls that move memory, made by this pool */
  double driver_microseconds;       /**< their time (measured on cuda, modelled on sim) */
  uint64_t asleep_bytes;            /**< handed back by sleep, mapped again by wake (0 awake) */
  uint64_t thread_caches;           /**< threads with a cache of their own in front of the pool's
                                         lock (tidepool_pool_options_t.thread_caches) */
  uint64_t graph_kept_bytes;        /**< free bytes kept for CUDA graphs still alive: reusable only
                                         by their capture, not handed back by release */
  uint64_t graphs;                  /**< CUDA graphs the pool keeps memory for now (once per stream
                                         they allocated on) */
  uint64_t waits;                   /**< times this pool waited for the GPU (an event, a stream or
                                         the whole device: the out-of-memory path, a handle split
                                         for a block from its stream's fresh frees, growth past its
                                         budget while the GPU runs behind, release, sleep) */
  double wait_microseconds;         /**< their time (measured on cuda; on sim the call's modelled
                                         cost only, not the queued work's) */
} tidepool_stats_t;

/** When a thread allocating from a pool gets a small cache of its own in front of the pool's lock
 *  (tidepool::thread_cache_policy): at most 8 blocks and 64 MiB, same-size frees and allocations
 *  served with no lock shared with other threads, figures exact (only the peaks count the blocks
 *  waiting in a cache as in use), every block taken back by release, the out-of-memory path and a
 *  thread's end. Never while recording or with an automatic release policy. */
typedef enum tidepool_thread_caches {
  TIDEPOOL_THREAD_CACHES_WHEN_CONTENDED = 0, /**< the default: once the pool's lock is contended
                                                  (a program with one allocating thread never) */
  TIDEPOOL_THREAD_CACHES_ALWAYS = 1,         /**< from each thread's first call */
  TIDEPOOL_THREAD_CACHES_NEVER = 2,          /**< every call takes the pool's lock */
  TIDEPOOL_THREAD_CACHES_MAX_ENUM = 0x7FFFFFFF  /**< not a policy: keeps the type int-sized */
} tidepool_thread_caches;

/** Options of the pools made from now on (tidepool::pool_options). Set struct_size to
 *  sizeof(tidepool_pool_options_t); fields past the caller's struct keep the values in force. */
typedef struct tidepool_pool_options_t {
  uint64_t struct_size;
  uint64_t byte_cap;              /**< never map more than this (UINT64_MAX: no cap) */
  uint64_t headroom;              /**< leave this much free on the device */
  uint64_t small_size_threshold;  /**< requests of at most this size are packed into pages of their own */
  uint64_t max_cached_bytes;      /**< keep at most this much cached (UINT64_MAX: no limit) */
  uint64_t decay_milliseconds;    /**< free pages unused this long go back (0: never) */
  uint64_t address_range_bytes;   /**< reserve address space in ranges of this size (0: auto) */
  int32_t immediate_release;      /**< 1: hand free pages back at once */
  int32_t reserved_;              /**< zero */
  double growth_slack;            /**< growth budget: held memory may pass peak in use by this
                                       fraction before free handles are moved instead of new ones
                                       made (tidepool::pool_options::growth_slack; default 1.0) */
  int32_t thread_caches;          /**< a tidepool_thread_caches (default WHEN_CONTENDED) */
  int32_t reserved2_;             /**< zero */
  int32_t alias_free_handles;     /**< 1: past the alias budget, map idle handles a second time before
                                       making new ones (experimental; tidepool::pool_options::
                                       alias_free_handles; default 0) */
  int32_t reserved3_;             /**< zero */
  double alias_slack;             /**< the alias budget's fraction above peak in use
                                       (tidepool::pool_options::alias_slack; default 0.02) */
  int32_t follow_graph_captures;  /**< 1 (default): what a CUDA graph capture allocates stays the graph's
                                       until the driver says it is gone; 0: a captured stream is an
                                       ordinary one (tidepool::pool_options::follow_graph_captures) */
  int32_t reserved4_;             /**< zero */
  int32_t compact_on_out_of_memory; /**< 1: before an allocation fails, move live bytes off the handles
                                         they cover in part when that would serve it; 0 (default): never
                                         (tidepool::pool_options::compact_on_out_of_memory says when it is safe) */
  int32_t reserved5_;             /**< zero */
} tidepool_pool_options_t;

/** A reclaim hook: free what you can on `device` (at least `bytes_needed` if you can) and return
 *  the bytes handed back to the driver (0 if unknown). Must not allocate from tidepool. Called
 *  when an allocation would fail, and with bytes_needed = SIZE_MAX by release_cached_memory. */
typedef size_t (*tidepool_reclaim_fn)(int device, size_t bytes_needed, void* user_data);

/** The library's version, e.g. "0.1.0". */
TIDEPOOL_API const char* tidepool_version(void);
/** The message of the calling thread's last failed call ("" if none failed yet). */
TIDEPOOL_API const char* tidepool_last_error(void);
/** The status of the calling thread's last failed call (TIDEPOOL_SUCCESS if none failed yet):
 *  what a NULL from tidepool_torch_alloc or tidepool_cupy_malloc meant. */
TIDEPOOL_API tidepool_status tidepool_last_status(void);
/** The name of a status, e.g. "TIDEPOOL_OUT_OF_MEMORY". */
TIDEPOOL_API const char* tidepool_status_name(tidepool_status status);

/** Number of devices the driver sees. */
TIDEPOOL_API tidepool_status tidepool_device_count(int* count);
/** Whether this process holds a context on `device` (*has = 0 or 1). Opens nothing. */
TIDEPOOL_API tidepool_status tidepool_has_context(int device, int* has);

/** Allocates `size` bytes on `device` for use on `stream` (the pool is made on first use). */
TIDEPOOL_API tidepool_status tidepool_allocate(size_t size, int device, tidepool_stream_t stream,
                                               tidepool_lifetime hint, void** out);
/** Frees `ptr`, last used on `stream`; device may be TIDEPOOL_ANY_DEVICE. Freeing NULL is a
 *  no-op. Works from any thread, whatever its current device. `stream` must not have been
 *  destroyed, unless tidepool_forget_stream was told (the free may record an event on it). */
TIDEPOOL_API tidepool_status tidepool_deallocate(void* ptr, int device, tidepool_stream_t stream);
/** Marks `ptr` as used on `stream` too: not reused before work queued there before its free has
 *  completed (an event is recorded on `stream` when `ptr` is freed: keep it until then, or tell
 *  tidepool_forget_stream). device may be TIDEPOOL_ANY_DEVICE. */
TIDEPOOL_API tidepool_status tidepool_record_stream(void* ptr, int device,
                                                    tidepool_stream_t stream);

/** Tells the pools that `stream` is, or is about to be, destroyed (before or after
 *  cudaStreamDestroy): they never name it to the driver again, and a new stream that CUDA gives
 *  the same handle starts afresh (tidepool::pool::forget_stream). device may be
 *  TIDEPOOL_ANY_DEVICE (every pool). Unknown streams are ignored; opens nothing. */
TIDEPOOL_API tidepool_status tidepool_forget_stream(int device, tidepool_stream_t stream);

/** Sets the calling thread's current stream for `device`: the stream tidepool_cupy_malloc
 *  allocates on (CuPy passes none). Each thread starts with NULL, the legacy default stream, on
 *  every device. The Python package sets it from cupy.cuda.get_current_stream() before each
 *  CuPy allocation. */
TIDEPOOL_API tidepool_status tidepool_set_current_stream(int device, tidepool_stream_t stream);
/** The calling thread's current stream for `device`. */
TIDEPOOL_API tidepool_status tidepool_get_current_stream(int device, tidepool_stream_t* stream);

/** Sets the calling thread's lifetime hint for the allocations tidepool_torch_alloc (and its tag
 *  slots) and tidepool_cupy_malloc make, which the frameworks cannot pass: TIDEPOOL_PERSISTENT
 *  around code that makes what lives long (an optimizer's state in its first step, a model's
 *  weights) places it apart from scratch, so that it never pins the handles of freed scratch and
 *  release() can hand that back. Each thread starts with TIDEPOOL_SCRATCH; other threads (PyTorch's
 *  autograd threads among them) are not affected. TIDEPOOL_INVALID_ARGUMENT for any other value. */
TIDEPOOL_API tidepool_status tidepool_set_thread_lifetime(tidepool_lifetime hint);
/** The calling thread's lifetime hint (tidepool_set_thread_lifetime). */
TIDEPOOL_API tidepool_status tidepool_get_thread_lifetime(tidepool_lifetime* hint);

/** PyTorch's CUDAPluggableAllocator alloc function, for PyTorch only (C callers: use
 *  tidepool_allocate). Returns NULL for size 0. On failure it throws a C++ exception, as PyTorch's
 *  own allocator does, which PyTorch turns into a Python RuntimeError: out of memory is a
 *  tidepool::out_of_memory (a std::bad_alloc) whose message starts "CUDA out of memory.", as
 *  PyTorch's does; anything else a tidepool::error. The status and message are kept as well. The
 *  hint is the calling thread's (tidepool_set_thread_lifetime). */
TIDEPOOL_API void* tidepool_torch_alloc(size_t size, int device, tidepool_stream_t stream);
/** PyTorch's CUDAPluggableAllocator free function (stream: the allocation's, as PyTorch passes). */
TIDEPOOL_API void tidepool_torch_free(void* ptr, size_t size, int device,
                                      tidepool_stream_t stream);
/** CuPy's CFunctionAllocator malloc (void*(*)(void*, size_t, int)). Allocates on the thread's
 *  current stream for `device` (tidepool_set_current_stream), with its lifetime hint
 *  (tidepool_set_thread_lifetime). `param` is unused. NULL on failure
 *  (silently: CuPy does not check, so the caller must; tidepool.cupy does). */
TIDEPOOL_API void* tidepool_cupy_malloc(void* param, size_t size, int device);
/** CuPy's CFunctionAllocator free (void(*)(void*, void*, int)). Frees on the stream the block was
 *  allocated on, as CuPy's own pool does, whatever the current stream is now. */
TIDEPOOL_API void tidepool_cupy_free(void* param, void* ptr, int device);

/** The figures of `device`'s pool; all zero (and success) where no pool exists yet. */
TIDEPOOL_API tidepool_status tidepool_stats(int device, tidepool_stats_t* stats);
/** Brings the peaks tidepool_stats reports for `device`'s pool (peak_in_use_bytes,
 *  peak_requested_bytes, peak_mapped_bytes) down to the current figures, as
 *  torch.cuda.reset_peak_memory_stats does (tidepool::pool::reset_peak_stats); the pool's growth
 *  budget is not touched. Tags' pools keep theirs. A no-op where no pool exists yet. */
TIDEPOOL_API tidepool_status tidepool_reset_peak_stats(int device);
/** Changes the most `device`'s pool maps, as torch.cuda.set_per_process_memory_fraction does for
 *  PyTorch's allocator (tidepool::set_device_byte_cap): UINT64_MAX lifts the cap. Memory mapped
 *  beyond a lowered cap stays until freed and released; an allocation that would grow past it
 *  releases free cached memory first, then fails as out of memory. Handles made under a cap are a
 *  256th of it at most (tidepool::pool_options::byte_cap). Before the device's pool exists
 *  the pool is made with this cap. Tags' pools keep their own. 2^63 bytes or more, but
 *  UINT64_MAX, is refused (TIDEPOOL_INVALID_ARGUMENT). */
TIDEPOOL_API tidepool_status tidepool_set_byte_cap(int device, uint64_t bytes);
/** The byte cap of `device`'s pool, or the one it will be made with (UINT64_MAX: none). */
TIDEPOOL_API tidepool_status tidepool_byte_cap(int device, uint64_t* bytes);
/** Hands `device`'s free cached memory back to the driver; *bytes: what went back (0 where no
 *  pool exists). bytes may be NULL. */
TIDEPOOL_API tidepool_status tidepool_release(int device, size_t* bytes);
/** tidepool_release, then the rest of what live allocations pin on `device`'s pool
 *  (tidepool::pool::compact): every physical handle that live allocations cover only in part is
 *  made again under just the 2 MiB granules they touch, their bytes moved through pinned host
 *  memory to the same addresses. Waits for the pool's streams first; while it runs no GPU work may
 *  touch the pool's memory, and allocations on other threads wait until it returns. *bytes:
 *  what went back, release's included (0 where no pool exists); bytes may be NULL. The pools of
 *  the tags on `device` are compacted too, but a sleeping one (its memory went back already).
 *  TIDEPOOL_UNAVAILABLE without the virtual memory API or with alias_free_handles. */
TIDEPOOL_API tidepool_status tidepool_compact(int device, size_t* bytes);
/** On every GPU this process has opened, and no other: every pool's cache, the CUDA async pools,
 *  then the reclaim hooks. *bytes: handed back, by the allocators' own counts. bytes may be NULL. */
TIDEPOOL_API tidepool_status tidepool_release_cached_memory(size_t* bytes);
/** The largest allocation that could succeed on `device` now (cache + driver free, within the
 *  pool's byte cap and headroom). Opens no context. */
TIDEPOOL_API tidepool_status tidepool_available_bytes(int device, size_t* bytes);

/** Sets the options pools are made with. Only before the first pool exists (the first allocation
 *  makes one): a pool keeps the options it was made with, so once one exists this is refused with
 *  TIDEPOOL_INVALID_ARGUMENT, naming its device. Byte counts of 2^63 or more (what a negative number
 *  stored in these unsigned fields becomes) are refused too, but for UINT64_MAX where it means "no
 *  limit" (byte_cap, max_cached_bytes). */
TIDEPOOL_API tidepool_status tidepool_set_default_pool_options(const tidepool_pool_options_t* options);
/** The options pools are made with now (the defaults until set); honours struct_size. */
TIDEPOOL_API tidepool_status tidepool_get_default_pool_options(tidepool_pool_options_t* options);

/** Registers a reclaim hook for every device; *id identifies it for removal. */
TIDEPOOL_API tidepool_status tidepool_add_reclaim_hook(tidepool_reclaim_fn hook, void* user_data,
                                                       int* id);
/** Unregisters a hook; an unknown id is TIDEPOOL_INVALID_ARGUMENT. Waits for calls of the hook
 *  in progress on other threads: once it returns, the hook is not running and is never called
 *  again, so its user_data may be freed. Called from inside the hook itself, it does not wait for
 *  that call (user_data must then outlive the call). */
TIDEPOOL_API tidepool_status tidepool_remove_reclaim_hook(int id);

/** Sharing a GPU with the user's other tidepool processes (tidepool::sharing_options, issue 14):
 *  before an allocation fails, ask the others on that GPU to hand back cached memory; serve their
 *  requests from a helper thread. Set struct_size to sizeof(tidepool_sharing_options_t). Defaults
 *  from TIDEPOOL_SHARING, TIDEPOOL_SHARING_GIVES and TIDEPOOL_SHARING_WAIT_MS. */
typedef struct tidepool_sharing_options_t {
  uint64_t struct_size;
  int32_t enabled;            /**< 1: ask and serve (default); 0: off, leave every ledger */
  int32_t gives;              /**< 1: hand cached memory to those who ask (default); 0: never */
  uint64_t wait_milliseconds; /**< how long one out-of-memory path waits for answers, in all
                                   (default 100, at most 60000) */
} tidepool_sharing_options_t;

/** Sets the sharing options, at any time (fields past the caller's struct keep their values). */
TIDEPOOL_API tidepool_status tidepool_set_sharing_options(const tidepool_sharing_options_t* options);
/** The sharing options in force; honours struct_size. */
TIDEPOOL_API tidepool_status tidepool_get_sharing_options(tidepool_sharing_options_t* options);
/** Leaves every GPU ledger and stops the helper threads (waiting at most a second for each). The
 *  Python package calls it at exit, while its reclaim hooks can still run. */
TIDEPOOL_API tidepool_status tidepool_stop_sharing(void);
/* --- Seeing memory: recording, blocks and handles, recent events (tidepool/process.hpp) --- */

/** Records every allocation and free of the process's pools (every device) to `path` until
 *  tidepool_stop_recording: an RMM replay log, what `tidepool replay` reads; gzip when the path
 *  ends in ".gz"; "%p" becomes the process id. Streamed: a killed process leaves a readable file
 *  up to the last flush (every 100 ms). TIDEPOOL_RECORD=path does the same from the first pool.
 *  Already recording: TIDEPOOL_INVALID_ARGUMENT. */
TIDEPOOL_API tidepool_status tidepool_start_recording(const char* path);
/** Writes what is buffered and closes the file; success when not recording. */
TIDEPOOL_API tidepool_status tidepool_stop_recording(void);
/** The path being recorded to ("" when not recording): *length gets its length; at most
 *  capacity - 1 bytes and a NUL are copied to buffer (buffer may be NULL when capacity is 0). */
TIDEPOOL_API tidepool_status tidepool_recording_path(char* buffer, size_t capacity, size_t* length);

/** What a block is (tidepool::block_description::status). */
typedef enum tidepool_block_state {
  TIDEPOOL_BLOCK_LIVE = 0,      /**< allocated */
  TIDEPOOL_BLOCK_FREE = 1,      /**< free and mapped: cached */
  TIDEPOOL_BLOCK_PENDING = 2,   /**< freed, waiting for other streams' work */
  TIDEPOOL_BLOCK_UNMAPPED = 3,  /**< free address space, nothing mapped */
  TIDEPOOL_BLOCK_STATE_MAX_ENUM = 0x7FFFFFFF
} tidepool_block_state;

#define TIDEPOOL_BLOCK_SMALL 1      /**< flags: in a small-request region */
#define TIDEPOOL_BLOCK_PERSISTENT 2 /**< flags: in a region for persistent requests */

/** One block of a pool; blocks cover each reserved range with no gap. */
typedef struct tidepool_block_info_t {
  uint64_t struct_size;
  uint64_t address;
  uint64_t size;        /**< as placed */
  uint64_t requested;   /**< live: bytes asked for; else 0 */
  uint64_t stream;      /**< live: allocated on; free: may be reused on (0: any stream) */
  uint64_t range;       /**< base of the reserved range (or segment) it lies in */
  int32_t state;        /**< a tidepool_block_state */
  int32_t flags;        /**< TIDEPOOL_BLOCK_SMALL | TIDEPOOL_BLOCK_PERSISTENT */
} tidepool_block_info_t;

/** What one device's pool holds now (tidepool::pool_description). Set struct_size. */
typedef struct tidepool_memory_summary_t {
  uint64_t struct_size;
  uint64_t held_bytes;          /**< physical memory held (mapped) */
  uint64_t in_use_bytes;        /**< live blocks as placed */
  uint64_t cached_bytes;        /**< held but not in use */
  uint64_t largest_free_block;  /**< the largest cached block */
  uint64_t releasable_bytes;    /**< what tidepool_release could hand back now */
  uint64_t blocks;
  uint64_t handles;             /**< physical handles mapped */
} tidepool_memory_summary_t;

/** An event kept while recording (tidepool::recorded_event). */
typedef enum tidepool_event_action {
  TIDEPOOL_EVENT_ALLOCATE = 0,
  TIDEPOOL_EVENT_FREE = 1,
  TIDEPOOL_EVENT_ALLOCATE_FAILURE = 2,
  TIDEPOOL_EVENT_MAP = 3,    /**< physical memory mapped at address */
  TIDEPOOL_EVENT_UNMAP = 4,
  TIDEPOOL_EVENT_ACTION_MAX_ENUM = 0x7FFFFFFF
} tidepool_event_action;

typedef struct tidepool_memory_event_t {
  uint64_t struct_size;
  int32_t action;       /**< a tidepool_event_action */
  uint32_t thread;      /**< thread id (gettid); 0: live when recording began */
  int64_t time_ns;      /**< steady clock (CLOCK_MONOTONIC) */
  uint64_t address;
  uint64_t size;        /**< bytes asked for (allocate, free, failure), bytes mapped (map, unmap) */
  uint64_t stream;
} tidepool_memory_event_t;

typedef void (*tidepool_block_fn)(const tidepool_block_info_t* block, void* user_data);
typedef void (*tidepool_handle_fn)(uint64_t address, uint64_t size, void* user_data);
typedef void (*tidepool_event_fn)(const tidepool_memory_event_t* event, void* user_data);

/** Describes `device`'s pool: fills *summary (may be NULL), then calls on_block for every block
 *  (by region, then address) and on_handle for every mapped handle (either may be NULL), with no
 *  lock held: a callback may call tidepool. All zero, no calls, where no pool exists. */
TIDEPOOL_API tidepool_status tidepool_describe(int device, tidepool_memory_summary_t* summary,
                                               tidepool_block_fn on_block, tidepool_handle_fn on_handle,
                                               void* user_data);
/** As tidepool_describe, for tag `tag`'s pool of `device` (tidepool_push_tag): all zero, no calls,
 *  where the tag has no pool there or was never named (asking makes none). */
TIDEPOOL_API tidepool_status tidepool_describe_tag(const char* tag, int device, tidepool_memory_summary_t* summary,
                                                   tidepool_block_fn on_block, tidepool_handle_fn on_handle,
                                                   void* user_data);
/** Calls on_event for the latest events of `device` (oldest first; at most 100,000 per device)
 *  of the latest recording; none when nothing was recorded. */
TIDEPOOL_API tidepool_status tidepool_recent_events(int device, tidepool_event_fn on_event, void* user_data);

/* --- Tags, sleep and wake (issue 13) ---
 * A tag names memory that sleeps and wakes together; each tag has pools of its own (its own
 * addresses and cache: one tag's freed memory is never another's). While a thread has a tag
 * pushed, its allocations through tidepool_allocate, tidepool_torch_alloc and tidepool_cupy_malloc
 * come from that tag's pool; frees find the owner by address.
 *
 *   tidepool_push_tag("weights"); load(); tidepool_pop_tag();
 *   size_t back; tidepool_sleep("weights", TIDEPOOL_KEEP_CONTENTS, &back);
 *   ... the other engine runs ...
 *   tidepool_wake("weights");   same addresses, same bytes
 *
 * While asleep, allocating in the tag fails with TIDEPOOL_ASLEEP, freeing works, and the GPU
 * must not touch the memory (on CUDA an illegal address fault, which ends the context). Memory
 * exported to another process and not yet ended (tidepool_export_memory, tidepool_end_export)
 * stays awake, with every live allocation sharing its physical memory. */
typedef enum tidepool_sleep_keep {
  TIDEPOOL_KEEP_CONTENTS = 0, /**< copied to pinned host memory, restored by tidepool_wake */
  TIDEPOOL_KEEP_NOTHING = 1,  /**< dropped: after waking the memory holds whatever it holds */
  TIDEPOOL_SLEEP_KEEP_MAX_ENUM = 0x7FFFFFFF
} tidepool_sleep_keep;

/* CUDA graph captures that share memory (tidepool/graph_pool.hpp), as PyTorch's
 * torch.cuda.graph(pool=...): a capture joins the graph pool given to it
 * (tidepool_set_capture_graph_pool), else the one current on the thread that makes its first
 * allocation on a stream, else the default one; captures of one graph pool share what they
 * free, kept until all their graphs are gone. Safe for graphs replayed one after another, never
 * two at once.
 *
 *   uint64_t shared, previous;
 *   tidepool_new_graph_pool(&shared);
 *   tidepool_set_graph_pool(shared, &previous);
 *   ... capture one graph per batch size ...
 *   tidepool_set_graph_pool(previous, NULL); */

/** A new graph pool's id (never 0). */
TIDEPOOL_API tidepool_status tidepool_new_graph_pool(uint64_t* id);
/** Makes graph pool `id` (0: none) current on the calling thread; the one it replaces goes to
 *  `*previous` unless `previous` is NULL. TIDEPOOL_INVALID_ARGUMENT for an id never made. */
TIDEPOOL_API tidepool_status tidepool_set_graph_pool(uint64_t id, uint64_t* previous);
/** The graph pool current on the calling thread (0: none). */
TIDEPOOL_API tidepool_status tidepool_current_graph_pool(uint64_t* id);
/** Makes graph pool `id` (0: none) the default, joined by captures on threads with none current
 *  (PyTorch's autograd threads run a captured backward pass); the one it replaces goes to
 *  `*previous` unless `previous` is NULL. TIDEPOOL_INVALID_ARGUMENT for an id never made. */
TIDEPOOL_API tidepool_status tidepool_set_default_graph_pool(uint64_t id, uint64_t* previous);
/** The default graph pool (0: none). */
TIDEPOOL_API tidepool_status tidepool_default_graph_pool(uint64_t* id);
/** Makes the capture running on `stream` of `device` join graph pool `id` for every allocation it
 *  makes, on whatever thread, ahead of the thread's current and the default graph pool: exact
 *  where captures on several threads overlap. The capture's id (the driver's, the same on every
 *  stream joined to it) goes to `*capture_id` unless NULL: hand it to
 *  tidepool_forget_capture_graph_pool once the capture ended. TIDEPOOL_INVALID_STREAM when
 *  `stream` is not being captured, TIDEPOOL_INVALID_ARGUMENT for an id never made. */
TIDEPOOL_API tidepool_status tidepool_set_capture_graph_pool(int device, tidepool_stream_t stream, uint64_t id,
                                                            uint64_t* capture_id);
/** Forgets the graph pool given to capture `capture_id` (nothing happens for one not given any). */
TIDEPOOL_API tidepool_status tidepool_forget_capture_graph_pool(uint64_t capture_id);

/* Memory shared with another process (CUDA IPC of tidepool's virtual memory; CUDA's
 * cudaIpcGetMemHandle cannot export it). The exporter passes the descriptors on (SCM_RIGHTS,
 * pidfd_getfd, Python's multiprocessing.reduction.DupFd) with the UUID, sizes, offset and bytes;
 * the importer maps them and sees the allocation's bytes until it closes them. The exporter keeps
 * the allocation live meanwhile: once freed there, its bytes are handed out again.
 *
 *   exporter:  tidepool_export_memory(ptr, uuid, fds, sizes, NULL, 8, &count, &offset, &bytes);
 *              ... send uuid, fds[0..count), sizes, offset, bytes; close the fds ...
 *   importer:  tidepool_import_memory(uuid, fds, sizes, count, offset, bytes, &ptr);
 *              ... use ptr ...; tidepool_close_imported_memory(ptr); */

/** Exports the live allocation at `ptr` (any device, any tag): one new file descriptor per
 *  physical handle under it into `fds` and its size into `handle_sizes` (room for `capacity` of
 *  each), in address order, their number into `*count`, the GPU's UUID into `device_uuid`, where
 *  the allocation starts in the first handle into `*offset` and its size into `*bytes`. Unless
 *  NULL, `handle_ids` (room for `capacity`) gets each handle's export id: the same in every export
 *  of that handle while it lives, never another handle's in this process (a forked child may
 *  repeat its parent's: pair the ids with the process's identity), so that an importer still
 *  mapping the handles can reuse its mapping instead of importing them again. The caller closes
 *  the descriptors. With too little room nothing is opened: TIDEPOOL_INVALID_ARGUMENT, and
 *  `*count` says how many are needed. TIDEPOOL_INVALID_POINTER for a pointer no pool holds live,
 *  TIDEPOOL_ASLEEP for a sleeping tag's, TIDEPOOL_UNAVAILABLE where the driver cannot make the
 *  memory shareable. */
TIDEPOOL_API tidepool_status tidepool_export_memory(const void* ptr, uint8_t device_uuid[16], int* fds,
                                                    size_t* handle_sizes, uint64_t* handle_ids, size_t capacity,
                                                    size_t* count, size_t* offset, size_t* bytes);
/** Says that the process one tidepool_export_memory of `ptr` went to no longer maps it (once per
 *  export that succeeded; extra calls are ignored). Until then the export is in use, and
 *  tidepool_sleep leaves the allocation's physical memory awake, with every live allocation that
 *  shares it: the other process maps it (released here, it would stay held there, and after wake
 *  the two would see different memory). tidepool.share_memory calls it once every receiver let
 *  go. TIDEPOOL_INVALID_POINTER for a pointer no pool holds, TIDEPOOL_DOUBLE_FREE for one already
 *  freed (its memory is no export's any more). */
TIDEPOOL_API tidepool_status tidepool_end_export(const void* ptr);
/** Maps memory another process exported (tidepool_export_memory's figures), sets `*ptr` to its
 *  first byte and `*device` (unless NULL) to this process's ordinal of the GPU. The descriptors
 *  stay the caller's. TIDEPOOL_INVALID_DEVICE when this process does
 *  not see the GPU, TIDEPOOL_INVALID_ARGUMENT for figures that do not fit or a descriptor that is
 *  not exported memory; a failed import leaves nothing mapped. */
TIDEPOOL_API tidepool_status tidepool_import_memory(const uint8_t device_uuid[16], const int* fds,
                                                    const size_t* handle_sizes, size_t count, size_t offset,
                                                    size_t bytes, void** ptr, int* device);
/** Unmaps memory from tidepool_import_memory, once the device's queued work is done (it waits).
 *  TIDEPOOL_INVALID_POINTER for any other pointer, or one closed already. */
TIDEPOOL_API tidepool_status tidepool_close_imported_memory(void* ptr);
/** Bytes of other processes' memory this process maps now (whole handles). */
TIDEPOOL_API tidepool_status tidepool_imported_bytes(size_t* bytes);
/** The UUID of `device` (this process's ordinal) into `uuid`: what tidepool_import_memory finds a
 *  GPU by, the same in every process whatever CUDA_VISIBLE_DEVICES numbers it. TIDEPOOL_INVALID_DEVICE
 *  for a device that does not exist, TIDEPOOL_UNAVAILABLE where the driver names none. */
TIDEPOOL_API tidepool_status tidepool_device_uuid(int device, uint8_t uuid[16]);
/** Maps on `device` the cuMemAlloc allocation another process named with cudaIpcGetMemHandle
 *  (`handle`: its 64 bytes; what PyTorch's own allocator sends for a CUDA tensor) and sets `*ptr`
 *  to its first byte. A handle open already gives the same pointer; close every open with
 *  tidepool_close_cuda_ipc_memory. TIDEPOOL_INVALID_DEVICE for a device that does not exist,
 *  TIDEPOOL_UNAVAILABLE where the driver has no such handles (the simulated GPU),
 *  TIDEPOOL_INVALID_ARGUMENT for a handle the driver refuses. */
TIDEPOOL_API tidepool_status tidepool_open_cuda_ipc_memory(int device, const uint8_t handle[64], void** ptr);
/** Closes one tidepool_open_cuda_ipc_memory of `ptr` once the device's queued work is done (it
 *  waits); the last close unmaps it. TIDEPOOL_INVALID_POINTER for any other pointer. */
TIDEPOOL_API tidepool_status tidepool_close_cuda_ipc_memory(void* ptr);

/** Makes `tag` (1-64 printable characters) the calling thread's current tag; tags nest. */
TIDEPOOL_API tidepool_status tidepool_push_tag(const char* tag);
/** Drops the calling thread's current tag (TIDEPOOL_INVALID_ARGUMENT when none is pushed). */
TIDEPOOL_API tidepool_status tidepool_pop_tag(void);
/** Sets the tag of allocations made on threads with no tag pushed (NULL or "": none): for threads
 *  the program does not run, such as PyTorch's autograd threads (the backward pass). */
TIDEPOOL_API tidepool_status tidepool_set_default_tag(const char* tag);
/** The default tag ("" when none), as tidepool_recording_path returns text. */
TIDEPOOL_API tidepool_status tidepool_default_tag(char* buffer, size_t capacity, size_t* length);
/** The calling thread's current tag, else the default tag ("" when none), as
 *  tidepool_recording_path returns text. */
TIDEPOOL_API tidepool_status tidepool_current_tag(char* buffer, size_t capacity, size_t* length);
/** The index of `tag` (made if new): tidepool_torch_alloc_tag<index> allocates from it. */
TIDEPOOL_API tidepool_status tidepool_tag_id(const char* tag, int* id);
/** *count: how many tags the process has named (their indexes are 0 to *count - 1). */
TIDEPOOL_API tidepool_status tidepool_tag_count(int* count);
/** The name of the tag with index `id`, as tidepool_recording_path returns text;
 *  TIDEPOOL_INVALID_ARGUMENT when no tag has that index. */
TIDEPOOL_API tidepool_status tidepool_tag_name(int id, char* buffer, size_t capacity, size_t* length);
/** Puts `tag` to sleep on every device where it has memory: waits for the work queued on the
 *  streams its memory was used on, copies live memory to pinned host memory if asked, hands
 *  every physical handle back; addresses stay reserved. *bytes (may be NULL): bytes handed back.
 *  TIDEPOOL_INVALID_ARGUMENT for a tag never used, TIDEPOOL_ASLEEP when asleep already. */
TIDEPOOL_API tidepool_status tidepool_sleep(const char* tag, tidepool_sleep_keep keep, size_t* bytes);
/** Maps memory again under `tag`'s addresses and restores its contents. TIDEPOOL_OUT_OF_MEMORY
 *  when the device has no room (after asking every cache): the tag stays asleep, contents kept,
 *  and tidepool_wake may be tried again. TIDEPOOL_ASLEEP when the tag is not asleep. */
TIDEPOOL_API tidepool_status tidepool_wake(const char* tag);
/** *asleep: 1 when `tag` is asleep, else 0. */
TIDEPOOL_API tidepool_status tidepool_tag_asleep(const char* tag, int* asleep);
/** The figures of `tag`'s pool of `device` (all zero where it has none), as tidepool_stats. */
TIDEPOOL_API tidepool_status tidepool_tag_stats(const char* tag, int device, tidepool_stats_t* stats);
/** PyTorch CUDAPluggableAllocator alloc functions of tag slots 0-15 (tidepool_tag_id), for a
 *  torch.cuda.MemPool whose memory carries a tag whatever thread allocates; as tidepool_torch_alloc
 *  otherwise (free with tidepool_torch_free). */
#define TIDEPOOL_TORCH_TAG_SLOTS 16
TIDEPOOL_API void* tidepool_torch_alloc_tag0(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag1(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag2(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag3(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag4(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag5(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag6(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag7(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag8(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag9(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag10(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag11(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag12(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag13(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag14(size_t size, int device, tidepool_stream_t stream);
TIDEPOOL_API void* tidepool_torch_alloc_tag15(size_t size, int device, tidepool_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* TIDEPOOL_C_API_H */
