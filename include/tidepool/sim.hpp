// tidepool/sim.hpp: the simulated GPU, a driver with exact accounting.
//
// CI runs on it and the replay tool uses it by default. It keeps: capacity and memory held by
// other processes; granularity; which devices hold a context; a count and a modelled cost of
// every driver call (the per-call costs measured on an H200, DESIGN 2a); streams as queues on a
// logical clock, so event completion is deterministic (the special handles CU_STREAM_LEGACY, 0x1,
// and CU_STREAM_PER_THREAD, 0x2, are the default stream and the calling thread's own stream); injected faults; and a check that nothing
// is unmapped while queued work may still touch it. Optionally, mapped memory is real host memory
// so a test can see two live blocks that share bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tidepool/driver.hpp"

namespace tidepool {

/// Settings of a simulated machine.
struct sim_config {
  int device_count = 1;
  /// Capacity of each device. The default is an H200 as the driver reports it (143,771 MiB).
  std::size_t capacity = std::size_t{143771} << 20;
  /// Bytes of each device held by other processes (count against free, not against us).
  std::size_t other_processes_bytes = 0;
  std::size_t granularity = std::size_t{2} << 20;
  /// Devices on which this process already holds a context at start.
  std::vector<int> devices_with_context = {};
  /// Device memory a context costs when opened (about half a GiB on an H200, docs/RESULTS.md;
  /// 0 by default).
  std::size_t context_bytes = 0;
  bool virtual_memory = true;
  /// Back mapped memory with host memory, so tests can write and read blocks (small devices only).
  bool back_with_host_memory = false;
  /// stream_create hands out the handle of the stream destroyed last, as a driver that recycles
  /// stream objects may (tests of a pool meeting a new stream under an old handle).
  bool reuse_stream_handles = false;
  /// Names the devices: device d's UUID (device_uuid) is a hash of this key and d, so sims made
  /// with one key, in any process, are the same GPUs. Empty: a key of this sim_driver's own (its
  /// pid and a counter), since its devices are then its own.
  std::string uuid_key;
  /// Non-empty: each device's capacity is shared with every process whose sim has a device of the
  /// same UUID, through a file in this directory (e.g. "/dev/shm") that keeps what each process
  /// holds, so one process's holdings make another's allocation fail, as on a real GPU.
  std::string shared_capacity_directory;
};

namespace detail {
class sim_state;
}

/// The simulated GPU.
class TIDEPOOL_API sim_driver final : public driver {
 public:
  explicit sim_driver(sim_config config = {});
  ~sim_driver() override;

  // --- the driver interface ---
  [[nodiscard]] std::string name() const override;
  [[nodiscard]] int device_count() override;
  [[nodiscard]] bool has_context(int device) override;
  driver_status open_context(int device) override;
  [[nodiscard]] bool supports_virtual_memory(int device) override;
  [[nodiscard]] std::size_t granularity(int device) override;
  driver_status address_reserve(int device, std::size_t size, std::size_t alignment,
                                device_address* out) override;
  driver_status address_free(int device, device_address address, std::size_t size) override;
  driver_status mem_create(int device, std::size_t size, physical_handle* out) override;
  driver_status mem_release(int device, physical_handle handle) override;
  driver_status mem_map(int device, device_address address, std::size_t size,
                        physical_handle handle) override;
  driver_status mem_set_access(int device, device_address address, std::size_t size,
                               int peer_device) override;
  driver_status mem_unmap(int device, device_address address, std::size_t size) override;
  driver_status mem_alloc(int device, std::size_t size, device_address* out) override;
  driver_status mem_free(int device, device_address address) override;
  [[nodiscard]] device_memory_info memory_info(int device) override;
  driver_status device_uuid(int device, device_uuid_bytes* out) override;
  driver_status stream_create(int device, stream_t* out) override;
  driver_status stream_destroy(int device, stream_t stream) override;
  [[nodiscard]] bool stream_on_device(stream_t stream, int device) override;
  driver_status event_create(int device, event_t* out) override;
  driver_status event_destroy(int device, event_t event) override;
  driver_status event_record(int device, event_t event, stream_t stream) override;
  driver_status event_query(int device, event_t event) override;
  driver_status event_synchronize(int device, event_t event) override;
  driver_status stream_wait_event(int device, stream_t stream, event_t event) override;
  driver_status stream_synchronize(int device, stream_t stream) override;
  driver_status device_synchronize(int device) override;
  std::size_t trim_async_pools(int device) override;
  driver_status host_alloc(int device, std::size_t bytes, void** out) override;
  driver_status host_free(int device, void* host) override;
  driver_status copy_to_host(int device, void* destination, device_address source, std::size_t bytes,
                             stream_t stream) override;
  driver_status copy_to_device(int device, device_address destination, const void* source, std::size_t bytes,
                               stream_t stream) override;
  driver_status mem_export(int device, physical_handle handle, int* fd) override;
  driver_status mem_import(int device, int fd, physical_handle* out) override;
  driver_status capture_of(int device, stream_t stream, stream_capture* out) override;
  driver_status watch_graph(int device, void* graph, graph_gone_fn gone, void* context) override;
  [[nodiscard]] driver_call_counts call_counts() const override;
  [[nodiscard]] double modelled_cost_us(driver_call call, std::size_t bytes) const override;

  // --- the logical clock and queued work ---
  /// Queues work of `duration_us` on `stream` that touches [address, address + bytes)
  /// (bytes = 0: touches nothing the allocator owns). Completes at max(now, stream tail) + duration.
  void launch(int device, stream_t stream, double duration_us, device_address address = 0,
              std::size_t bytes = 0);
  /// Current logical time in microseconds.
  [[nodiscard]] double now() const;
  /// Moves the clock forward (work completes as its time passes).
  void advance(double microseconds);
  /// Moves the clock to when every stream is idle.
  void run_until_idle();

  // --- the simulated CUDA async pool (cudaMallocAsync with a raised release threshold) ---
  /// Parks `bytes` in device's stream-ordered pool: counted as held by this process until
  /// trim_async_pools() hands them back.
  void park_in_async_pool(int device, std::size_t bytes);
  [[nodiscard]] std::size_t async_pool_bytes(int device) const;

  // --- CUDA graphs (stream capture) ---
  /// Starts capturing `stream` (not the legacy default stream) into a new graph; returns the
  /// capture's id. Work launched on it is not run while it is captured, and an event recorded on
  /// it is recorded inside the capture: querying it later fails, as in CUDA.
  std::uint64_t begin_capture(int device, stream_t stream);
  /// Joins `stream` to the capture running on `capturing` (a fork: an event recorded there and
  /// waited for here, in CUDA).
  void join_capture(int device, stream_t stream, stream_t capturing);
  /// Ends the capture on `stream` (and on every stream joined to it); returns its graph.
  void* end_capture(int device, stream_t stream);
  /// Destroys `graph` (as cuGraphDestroy with no executable graph left): its watchers are called.
  void destroy_graph(void* graph);
  /// Events recorded on a stream while it was captured.
  [[nodiscard]] std::uint64_t captured_event_records() const;
  /// watch_graph answers not_supported from now on, as a driver without user objects.
  void refuse_graph_watches();

  // --- fault injection ---
  /// The `nth` (1-based) next call of `call` fails with `status`.
  void fail_nth(driver_call call, std::uint64_t nth, driver_status status = driver_status::out_of_memory);
  /// Physical memory (mem_create + mem_alloc) beyond `bytes` on `device` fails with out_of_memory.
  void set_capacity_limit(int device, std::size_t bytes);
  /// Changes the bytes other processes hold on `device`.
  void set_other_processes_bytes(int device, std::size_t bytes);

  // --- checks ---
  /// Times mem_unmap or mem_release hit a range that queued, unfinished work touches.
  [[nodiscard]] std::uint64_t unsafe_unmap_count() const;
  /// Times launch() or a host copy named device memory that was not wholly mapped, such as a
  /// sleeping tag's (on a GPU: an illegal address fault that ends the context).
  [[nodiscard]] std::uint64_t unmapped_access_count() const;
  /// Physical bytes this process holds on `device` (handles, plain allocations, async pool, context).
  [[nodiscard]] std::size_t physical_bytes(int device) const;
  /// Bytes currently mapped on `device`.
  [[nodiscard]] std::size_t mapped_bytes(int device) const;
  /// Every mapping on `device`, as (address, size), in address order: a handle is mapped whole.
  [[nodiscard]] std::vector<std::pair<device_address, std::size_t>> mappings(int device) const;
  /// Host memory standing for [address, address + bytes) when back_with_host_memory is set and the
  /// whole range is mapped; nullptr otherwise.
  [[nodiscard]] std::byte* host_view(int device, device_address address, std::size_t bytes);
  /// Whether `peer_device` may access the mapped byte at `address` of `device` (the owning device
  /// after mem_map, peers after mem_set_access); false where nothing is mapped.
  [[nodiscard]] bool has_access(int device, device_address address, int peer_device) const;
  /// Zeroes the call counts.
  void reset_call_counts();

 private:
  std::unique_ptr<detail::sim_state> state_;
};

}  // namespace tidepool
