// The state behind tidepool::sim_driver: every device's memory, address space, streams and queued
// work, the events, the logical clock, the call counts and the injected faults, under one mutex.
//
// sim_driver's methods lock `mutex`, call begin_call() (which counts the call, applies an injected
// fault and checks the device, its context and the virtual memory API), then change the state.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device/sim/address_space.hpp"
#include "device/sim/shared_capacity.hpp"
#include "tidepool/driver.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::detail {

/// One physical handle (mem_create, or mem_import of another's). A released handle that is still
/// mapped lives on, as in CUDA, until its last mapping goes.
struct sim_handle {
  std::size_t size = 0;
  std::uint32_t mappings = 0;
  bool released = false;
  int memfd = -1;         ///< host backing, and every imported handle
  bool imported = false;  ///< the memory is the exporting process's: not charged to this one
};

/// One reserved virtual range (address_reserve).
struct sim_reservation {
  std::size_t size = 0;
  std::uint32_t mappings = 0;
};

/// One mapping of a whole handle (mem_map), and the devices that may access it.
struct sim_mapping {
  std::size_t size = 0;
  physical_handle handle = 0;
  device_address reservation = 0;
  std::vector<int> access;
};

/// One plain allocation (mem_alloc).
struct sim_allocation {
  std::size_t size = 0;
  std::size_t held = 0;        ///< physical bytes of its own: whole 2 MiB pages, 0 in a shared page
  std::size_t host_bytes = 0;  ///< bytes of host memory behind it (host backing only)
  device_address page = 0;     ///< the shared page it lies in (0: pages of its own)
};

/// A 2 MiB page that mem_alloc shares among allocations of up to 1 MiB that fit the same number
/// to a page (device/sim/cuda_malloc_rule.hpp). Held while any of its slots is in use.
struct sim_shared_page {
  std::size_t per_page = 0;               ///< allocations it holds when full
  std::size_t stride = 0;                 ///< bytes from one slot to the next
  std::vector<std::uint32_t> free_slots;  ///< slots not in use, the lowest last
  std::size_t host_bytes = 0;             ///< host backing only
};

/// Work queued on a stream that touches allocator-owned memory until it completes.
struct sim_queued_work {
  double completes_at = 0;
  device_address address = 0;
  std::size_t bytes = 0;
};

/// Everything about one simulated device.
struct sim_device {
  explicit sim_device(int ordinal) : addresses(ordinal) {}

  bool context = false;
  std::size_t other_processes_bytes = 0;
  std::size_t capacity_limit = static_cast<std::size_t>(-1);  ///< on handle + allocation bytes
  std::size_t handle_bytes = 0;
  std::size_t allocation_bytes = 0;
  std::size_t async_pool_bytes = 0;
  std::size_t context_bytes = 0;
  std::size_t mapped_bytes = 0;
  device_uuid_bytes uuid{};
  /// The capacity shared with other processes (sim_config::shared_capacity_directory), else null.
  std::unique_ptr<sim_shared_capacity> shared;
  sim_address_space addresses;
  std::map<device_address, sim_reservation> reservations;
  std::map<device_address, sim_mapping> mappings;
  std::map<device_address, sim_allocation> allocations;
  std::map<device_address, sim_shared_page> shared_pages;
  /// Shared pages with a free slot, by allocations per page; the lowest address is filled first.
  std::map<std::size_t, std::set<device_address>> open_shared_pages;
  std::unordered_map<physical_handle, sim_handle> handles;
  std::unordered_map<stream_t, double> stream_tails;  ///< created streams -> when their work ends
  double default_stream_tail = 0;
  /// CU_STREAM_PER_THREAD: each thread's own default stream, made on first use.
  std::map<std::thread::id, double> per_thread_tails;
  /// Handles of destroyed streams, the last one at the back (sim_config::reuse_stream_handles).
  std::vector<stream_t> destroyed_streams;
  std::vector<sim_queued_work> queued_work;
  double busy_until = 0;  ///< when every stream of the device is idle

  /// Physical bytes this process holds on the device.
  [[nodiscard]] std::size_t physical_bytes() const noexcept {
    return handle_bytes + allocation_bytes + async_pool_bytes + context_bytes;
  }
  /// Tells the processes sharing the device what this one holds now (after every change).
  void publish() const noexcept {
    if (shared) shared->publish(physical_bytes());
  }
  /// Holds the shared device's lock while a room check and the taking of the room happen (a
  /// no-op lock on a device of this process's own).
  [[nodiscard]] std::unique_lock<sim_shared_capacity> hold_shared() const {
    return shared ? std::unique_lock<sim_shared_capacity>(*shared) : std::unique_lock<sim_shared_capacity>();
  }
};

/// An event: the device it belongs to and the logical time its captured work completes.
struct sim_event {
  int device = 0;
  double completes_at = 0;
  bool recorded_in_capture = false;  ///< last recorded on a stream being captured: not queryable
};

/// A CUDA graph made by stream capture (sim_graphs.cpp).
struct sim_graph {
  std::uint64_t capture_id = 0;
  bool capturing = true;
  std::vector<std::pair<graph_gone_fn, void*>> watchers;  ///< called when it is destroyed
};

/// CUDA's special stream handles: the legacy default stream and the calling thread's default stream.
inline constexpr std::uintptr_t legacy_stream_handle = 0x1;      // CU_STREAM_LEGACY
inline constexpr std::uintptr_t per_thread_stream_handle = 0x2;  // CU_STREAM_PER_THREAD

/// What a call requires of its device beyond a valid ordinal.
enum class call_needs : std::uint8_t { valid_device, context, virtual_memory };

/// The simulated machine.
class sim_state {
 public:
  explicit sim_state(sim_config settings);
  ~sim_state();
  sim_state(const sim_state&) = delete;
  sim_state& operator=(const sim_state&) = delete;

  /// Counts one `call` of `cost_us`, then returns why it must fail (an injected fault, a bad
  /// ordinal, no context, no virtual memory API), or success when it may proceed.
  [[nodiscard]] driver_status begin_call(driver_call call, double cost_us, int device, call_needs needs);
  /// Adds one call of `cost_us` to the counts.
  void count(driver_call call, double cost_us) noexcept;
  [[nodiscard]] bool valid_device(int device) const noexcept;
  /// Device-wide free bytes: capacity - other processes - this process, never below zero.
  [[nodiscard]] std::size_t free_bytes(const sim_device& device) const noexcept;
  /// Whether `bytes` more of handles or plain allocations fit (capacity and injected limit).
  [[nodiscard]] bool fits(const sim_device& device, std::size_t bytes) const noexcept;
  /// The tail time of `stream` on `device` (nullptr or CU_STREAM_LEGACY: the default stream;
  /// CU_STREAM_PER_THREAD: the calling thread's stream); nullptr if unknown there.
  [[nodiscard]] double* stream_tail(sim_device& device, stream_t stream);
  /// Whether queued work not yet complete touches [address, address + bytes). Drops completed work.
  [[nodiscard]] bool queued_work_touches(sim_device& device, device_address address, std::size_t bytes);
  /// Whether every byte of [address, address + bytes) is mapped (handles, or a plain allocation).
  [[nodiscard]] static bool wholly_mapped(const sim_device& device, device_address address, std::size_t bytes);
  /// A fresh non-null token for a stream or event pointer; encodes `device` in its low 20 bits.
  [[nodiscard]] std::uintptr_t make_token(int device) noexcept;
  /// Opens the context of `device`, charging its memory; out_of_memory when it does not fit.
  driver_status open_context(sim_device& device) noexcept;
  /// Makes the `nth` (1-based) next call of `call` fail with `status`.
  void inject_failure(driver_call call, std::uint64_t nth, driver_status status);

  mutable std::mutex mutex;
  sim_config config;
  std::vector<sim_device> devices;
  std::unordered_map<event_t, sim_event> events;
  double now = 0;
  driver_call_counts counts;
  std::uint64_t unsafe_unmaps = 0;
  /// Times launched work or a copy named device memory that was not mapped (a sleeping tag's).
  std::uint64_t unmapped_accesses = 0;
  /// Pinned host memory (host_alloc): its size by address. Without host backing the address is a
  /// token with no memory behind it, and copies move nothing.
  std::unordered_map<void*, std::size_t> host_allocations;
  physical_handle next_handle = 1;
  /// Graphs by token, and the streams being captured into one, by (device, stream handle).
  std::map<std::uintptr_t, sim_graph> graphs;
  std::map<std::pair<int, stream_t>, std::uintptr_t> capturing_streams;
  /// How many streams are being captured: capture_of reads it with no lock, so allocations on
  /// streams in a program that never captures cost no lock here.
  std::atomic<std::size_t> capture_count{0};
  std::uint64_t next_capture_id = 1;
  std::uint64_t captured_event_records = 0;
  bool graph_watches_refused = false;

 private:
  // Calls seen of each kind since the start (never reset: fault injection counts from here).
  std::array<std::uint64_t, driver_call_kinds> calls_seen_{};
  std::array<std::map<std::uint64_t, driver_status>, driver_call_kinds> injected_failures_;
  std::uintptr_t next_token_serial_ = 1;
};

}  // namespace tidepool::detail
