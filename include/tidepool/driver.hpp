// tidepool/driver.hpp: the device interface, everything the pool asks of a GPU driver.
//
// Two implementations live in src/device/: `sim` (a simulated GPU with exact accounting, used by
// CI and by the replay tool) and `cuda` (the CUDA driver API, loaded at run time). The core never
// talks to CUDA directly; it only calls this interface, so a replay on sim and a run on an H200
// exercise the same pool code.
//
// Conventions: calls return a driver_status and never throw; addresses are plain integers
// (device_address) because the pool does arithmetic on them; streams and events are CUDA's own
// opaque pointer types, declared here so that a cudaStream_t converts without a cast and no CUDA
// header is needed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tidepool/export.h"

struct CUstream_st;  // cudaStream_t / CUstream is CUstream_st*
struct CUevent_st;   // cudaEvent_t / CUevent is CUevent_st*

namespace tidepool {

/// A CUDA stream (cudaStream_t). nullptr is the legacy default stream.
using stream_t = ::CUstream_st*;
/// A CUDA event (cudaEvent_t).
using event_t = ::CUevent_st*;
/// A device virtual address.
using device_address = std::uintptr_t;
/// A physical memory handle (CUmemGenericAllocationHandle).
using physical_handle = std::uint64_t;

/// Outcome of one driver call.
enum class driver_status : std::uint8_t {
  success,
  out_of_memory,  ///< the device (or an injected capacity limit) has no room
  invalid_value,  ///< a bad argument: unknown handle, unaligned size, wrong device
  not_supported,  ///< e.g. the virtual memory API on a device without it
  not_ready,      ///< event_query: the event has not completed yet
  error,          ///< anything else the driver reported
};

/// Short name of a status, e.g. "out_of_memory".
[[nodiscard]] TIDEPOOL_API std::string_view to_string(driver_status status) noexcept;

/// Every driver call the device layer counts (and sim models the cost of).
enum class driver_call : std::uint8_t {
  address_reserve,    ///< cuMemAddressReserve
  address_free,       ///< cuMemAddressFree
  mem_create,         ///< cuMemCreate
  mem_release,        ///< cuMemRelease
  mem_map,            ///< cuMemMap
  mem_set_access,     ///< cuMemSetAccess
  mem_unmap,          ///< cuMemUnmap
  mem_alloc,          ///< cuMemAlloc / cudaMalloc (fallback segments, `exact` baseline)
  mem_free,           ///< cuMemFree / cudaFree
  mem_get_info,       ///< cuMemGetInfo
  event_create,       ///< cuEventCreate
  event_destroy,      ///< cuEventDestroy
  event_record,       ///< cuEventRecord
  event_query,        ///< cuEventQuery
  event_synchronize,  ///< cuEventSynchronize
  stream_create,      ///< cuStreamCreate
  stream_destroy,     ///< cuStreamDestroy
  stream_wait_event,  ///< cuStreamWaitEvent
  stream_synchronize, ///< cuStreamSynchronize
  device_synchronize, ///< cuCtxSynchronize on the device's primary context
  async_pool_trim,    ///< cuMemPoolTrimTo on the stream-ordered pools
  host_alloc,         ///< cuMemHostAlloc (pinned host memory: sleep's copy of a tag's contents)
  host_free,          ///< cuMemFreeHost
  copy_to_host,       ///< cuMemcpyDtoHAsync
  copy_to_device,     ///< cuMemcpyHtoDAsync
  mem_export,         ///< cuMemExportToShareableHandle (memory shared with another process)
  mem_import,         ///< cuMemImportFromShareableHandle
  ipc_open,           ///< cuIpcOpenMemHandle (another process's cuMemAlloc memory, cudaIpcGetMemHandle's)
  ipc_close,          ///< cuIpcCloseMemHandle
  count_              ///< number of kinds, not a call
};
inline constexpr std::size_t driver_call_kinds = static_cast<std::size_t>(driver_call::count_);

/// Whether `call` moves memory (reserves, maps or hands back address space or physical memory):
/// what driver_call_counts::memory_calls counts and a replay report breaks down.
[[nodiscard]] constexpr bool moves_memory(driver_call call) noexcept {
  switch (call) {
    case driver_call::address_reserve:
    case driver_call::address_free:
    case driver_call::mem_create:
    case driver_call::mem_release:
    case driver_call::mem_map:
    case driver_call::mem_set_access:
    case driver_call::mem_unmap:
    case driver_call::mem_alloc:
    case driver_call::mem_free:
      return true;
    default:
      return false;
  }
}

/// Whether `call` waits for the GPU (an event, a stream or the whole device): what
/// driver_call_counts::wait_calls counts. A pool waits on the out-of-memory path, to split a handle
/// for a block from its stream's fresh frees (placement.cpp), before growth past its budget while
/// the GPU runs behind, on release() and on sleep(); each wait lets the queued work drain before
/// the program can queue more.
[[nodiscard]] constexpr bool waits_for_gpu(driver_call call) noexcept {
  switch (call) {
    case driver_call::event_synchronize:
    case driver_call::stream_synchronize:
    case driver_call::device_synchronize:
      return true;
    default:
      return false;
  }
}

/// Name of a call, e.g. "mem_create".
[[nodiscard]] TIDEPOOL_API std::string_view to_string(driver_call call) noexcept;

/// How many calls of each kind were made and how long they took: measured wall time on `cuda`,
/// the modelled cost (DESIGN 2a, measured on an H200) on `sim`.
struct TIDEPOOL_API driver_call_counts {
  std::array<std::uint64_t, driver_call_kinds> calls{};
  std::array<double, driver_call_kinds> microseconds{};

  [[nodiscard]] std::uint64_t of(driver_call c) const noexcept { return calls[static_cast<std::size_t>(c)]; }
  [[nodiscard]] double us_of(driver_call c) const noexcept { return microseconds[static_cast<std::size_t>(c)]; }
  [[nodiscard]] std::uint64_t total_calls() const noexcept;
  [[nodiscard]] double total_us() const noexcept;
  /// Calls that move memory (reserve, create, map, set access, unmap, release, alloc, free):
  /// what "driver calls" means in replay reports.
  [[nodiscard]] std::uint64_t memory_calls() const noexcept;
  [[nodiscard]] double memory_us() const noexcept;
  /// Calls that wait for the GPU (event, stream and device synchronization) and their time.
  [[nodiscard]] std::uint64_t wait_calls() const noexcept;
  [[nodiscard]] double wait_us() const noexcept;
  driver_call_counts& operator-=(const driver_call_counts& other) noexcept;
};

/// What the two calls behind one mem_map took, in microseconds.
struct mem_map_times {
  double map_us = -1.0;         ///< cuMemMap
  double set_access_us = -1.0;  ///< cuMemSetAccess (0 when the map failed before it)
};

/// A GPU's UUID (cuDeviceGetUuid): the same for every process that sees the GPU, whatever its
/// ordinal there (CUDA_VISIBLE_DEVICES renumbers devices, not UUIDs).
using device_uuid_bytes = std::array<std::uint8_t, 16>;

/// A cudaIpcMemHandle_t / CUipcMemHandle: another process's cuMemAlloc allocation, as
/// cudaIpcGetMemHandle there named it (what PyTorch's own allocator sends for a CUDA tensor).
using ipc_memory_handle = std::array<std::uint8_t, 64>;

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
[[nodiscard]] TIDEPOOL_API std::string to_string(const device_uuid_bytes& uuid);

/// Memory of one device as the driver sees it.
struct device_memory_info {
  std::size_t total = 0;  ///< capacity of the device
  std::size_t free = 0;   ///< free device-wide (other processes count against it)
  /// Device memory held by this process (NVML on cuda, exact on sim); unknown_bytes if unknown.
  std::size_t process_used = 0;
  static constexpr std::size_t unknown_bytes = static_cast<std::size_t>(-1);
};

/// What the driver says of a stream being captured into a CUDA graph (cuStreamGetCaptureInfo).
struct stream_capture {
  bool active = false;     ///< work queued on the stream now is captured into a graph, not run
  std::uint64_t id = 0;    ///< the capture's number: the same on every stream joined to it
  void* graph = nullptr;   ///< the graph being built (a CUgraph), for watch_graph
};

/// Called once a graph watched with driver::watch_graph is gone. It runs on a thread of the
/// driver's own and must not call the driver.
using graph_gone_fn = void (*)(void* context);

/// The device interface. Implementations must be thread safe: pools of several devices call one
/// driver from several threads at once.
class TIDEPOOL_API driver {
 public:
  driver() = default;
  driver(const driver&) = delete;
  driver& operator=(const driver&) = delete;
  virtual ~driver() = default;

  /// "sim" or "cuda".
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual int device_count() = 0;
  /// Whether this process already holds a context on `device`. Never opens one.
  [[nodiscard]] virtual bool has_context(int device) = 0;
  /// Opens (retains) the primary context of `device`; pools call this once when created.
  virtual driver_status open_context(int device) = 0;
  /// Whether `device` supports the virtual memory API (else pools use mem_alloc segments).
  [[nodiscard]] virtual bool supports_virtual_memory(int device) = 0;
  /// Physical allocation granularity of `device` (2 MiB on current GPUs).
  [[nodiscard]] virtual std::size_t granularity(int device) = 0;

  // Virtual address space.
  virtual driver_status address_reserve(int device, std::size_t size, std::size_t alignment,
                                        device_address* out) = 0;
  virtual driver_status address_free(int device, device_address address, std::size_t size) = 0;

  // Physical memory, in multiples of granularity().
  virtual driver_status mem_create(int device, std::size_t size, physical_handle* out) = 0;
  virtual driver_status mem_release(int device, physical_handle handle) = 0;
  /// Maps the whole of `handle` (of `size` bytes) at `address` and grants `device` read/write
  /// access: cuMemMap followed by cuMemSetAccess, counted as two calls.
  virtual driver_status mem_map(int device, device_address address, std::size_t size,
                                physical_handle handle) = 0;
  /// Grants `peer_device` access to an already mapped range (peer access).
  virtual driver_status mem_set_access(int device, device_address address, std::size_t size,
                                       int peer_device) = 0;
  /// Unmaps a range. Does not wait for the GPU: the caller must know no queued work uses it.
  virtual driver_status mem_unmap(int device, device_address address, std::size_t size) = 0;

  // Plain allocations: the fallback where the virtual memory API is missing, and baselines.
  virtual driver_status mem_alloc(int device, std::size_t size, device_address* out) = 0;
  virtual driver_status mem_free(int device, device_address address) = 0;

  [[nodiscard]] virtual device_memory_info memory_info(int device) = 0;
  /// memory_info(device).free alone, for callers that need nothing else: the pool asks it at every
  /// growth while at the device's limit and at every retry of its out-of-memory path. A driver that
  /// finds the other figures dearly (cuda: NVML's list of processes) answers this without them.
  [[nodiscard]] virtual std::size_t free_bytes(int device) { return memory_info(device).free; }

  /// The UUID of `device`, which names one GPU to every process (the per-GPU ledger of processes
  /// sharing it is keyed by it). Needs no context. not_supported where a driver has none.
  virtual driver_status device_uuid(int device, device_uuid_bytes* out) {
    (void)device;
    (void)out;
    return driver_status::not_supported;
  }

  // Streams and events.
  virtual driver_status stream_create(int device, stream_t* out) = 0;
  virtual driver_status stream_destroy(int device, stream_t stream) = 0;
  /// Whether `stream` may be used on `device` (nullptr, the default stream, is valid everywhere).
  [[nodiscard]] virtual bool stream_on_device(stream_t stream, int device) = 0;
  virtual driver_status event_create(int device, event_t* out) = 0;
  virtual driver_status event_destroy(int device, event_t event) = 0;
  virtual driver_status event_record(int device, event_t event, stream_t stream) = 0;
  /// success when the event completed, not_ready while work before it is still queued.
  virtual driver_status event_query(int device, event_t event) = 0;
  virtual driver_status event_synchronize(int device, event_t event) = 0;
  virtual driver_status stream_wait_event(int device, stream_t stream, event_t event) = 0;
  virtual driver_status stream_synchronize(int device, stream_t stream) = 0;
  /// Waits for all work queued on every stream of `device` (needs no stream handle, so it is safe
  /// when a program has destroyed streams it once freed memory on).
  virtual driver_status device_synchronize(int device) = 0;

  /// Trims the CUDA stream-ordered (cudaMallocAsync) pools of `device`, the default pool and the
  /// current one, to zero. Returns the bytes handed back where the driver tells, else 0.
  virtual std::size_t trim_async_pools(int device) = 0;

  // CUDA graphs. A pool keeps what it lends to a capture for the graph's life (pool_options::
  // follow_graph_captures). Neither call is counted: they move no memory, and the first is made on
  // allocations of streams that are not the legacy default stream.
  /// Whether `stream` is being captured into a graph now, and which. The defaults say it is not
  /// (a driver without graphs).
  virtual driver_status capture_of(int device, stream_t stream, stream_capture* out) {
    (void)device;
    (void)stream;
    *out = stream_capture{};
    return driver_status::success;
  }
  /// Calls `gone(context)` once `graph` (from capture_of) is destroyed, with every executable
  /// graph instantiated from it and every launch of those complete (a CUDA user object the graph
  /// owns). not_supported where a driver cannot tell; then `gone` is never called.
  virtual driver_status watch_graph(int device, void* graph, graph_gone_fn gone, void* context) {
    (void)device;
    (void)graph;
    (void)gone;
    (void)context;
    return driver_status::not_supported;
  }
  // Host copies (sleep and wake keep a tag's contents in pinned host memory). Not every driver
  // has them: the defaults say not_supported.
  /// Allocates `bytes` of page-locked host memory into `*out`.
  virtual driver_status host_alloc(int device, std::size_t bytes, void** out) {
    (void)device;
    (void)bytes;
    (void)out;
    return driver_status::not_supported;
  }
  /// Frees host memory from host_alloc.
  virtual driver_status host_free(int device, void* host) {
    (void)device;
    (void)host;
    return driver_status::not_supported;
  }
  /// Queues a copy of `bytes` from device memory at `source` to host memory on `stream`; done
  /// once the stream's work before a later synchronization is.
  virtual driver_status copy_to_host(int device, void* destination, device_address source, std::size_t bytes,
                                     stream_t stream) {
    (void)device;
    (void)destination;
    (void)source;
    (void)bytes;
    (void)stream;
    return driver_status::not_supported;
  }
  /// Queues a copy of `bytes` from host memory to device memory at `destination` on `stream`.
  virtual driver_status copy_to_device(int device, device_address destination, const void* source,
                                       std::size_t bytes, stream_t stream) {
    (void)device;
    (void)destination;
    (void)source;
    (void)bytes;
    (void)stream;
    return driver_status::not_supported;
  }

  // Memory shared with another process (CUDA IPC of virtual memory: docs/DESIGN.md, "Memory
  // shared between processes"). Not every driver has it: the defaults say not_supported.
  /// A new file descriptor through which another process can import `handle` (made by
  /// mem_create); the caller owns it and closes it. not_supported where `device`'s handles are
  /// not made exportable.
  virtual driver_status mem_export(int device, physical_handle handle, int* fd) {
    (void)device;
    (void)handle;
    (void)fd;
    return driver_status::not_supported;
  }
  /// A handle of this process for the memory exported as `fd` by mem_export in this or another
  /// process; `fd` stays the caller's. The handle is mapped with mem_map and given back with
  /// mem_release like one from mem_create, but the memory is charged to the process that made it.
  virtual driver_status mem_import(int device, int fd, physical_handle* out) {
    (void)device;
    (void)fd;
    (void)out;
    return driver_status::not_supported;
  }
  /// Maps on `device` the allocation another process named with cudaIpcGetMemHandle; `*out` is
  /// its first byte here. Opening a handle open already returns the same address (the driver
  /// counts the opens); each open is closed with ipc_close.
  virtual driver_status ipc_open(int device, const ipc_memory_handle& handle, device_address* out) {
    (void)device;
    (void)handle;
    (void)out;
    return driver_status::not_supported;
  }
  /// Closes one ipc_open of the allocation mapped at `address`; the last unmaps it.
  virtual driver_status ipc_close(int device, device_address address) {
    (void)device;
    (void)address;
    return driver_status::not_supported;
  }

  /// Calls made so far through this driver, by every user of it.
  [[nodiscard]] virtual driver_call_counts call_counts() const = 0;

  /// The measured times of the calling thread's latest mem_map through this driver (cuda), so a
  /// pool can count map and set access apart; negative where nothing is measured (sim models its
  /// costs: modelled_cost_us).
  [[nodiscard]] virtual mem_map_times last_mem_map_times() const { return {}; }

  /// The modelled cost in microseconds of one `call` on `bytes` (sim), or a negative number
  /// where costs are real and must be timed (cuda). Lets a pool account its own calls' time
  /// when several pools share a driver.
  [[nodiscard]] virtual double modelled_cost_us(driver_call call, std::size_t bytes) const {
    (void)call;
    (void)bytes;
    return -1.0;
  }
};

/// The CUDA driver, loaded at run time. Throws tidepool::error if libcuda.so.1 cannot be loaded
/// or has no device; cuda_driver_unavailable_reason() says why without throwing.
[[nodiscard]] TIDEPOOL_API std::shared_ptr<driver> make_cuda_driver();
/// Empty when make_cuda_driver() would succeed, else the reason it would not.
[[nodiscard]] TIDEPOOL_API std::string cuda_driver_unavailable_reason();

}  // namespace tidepool
