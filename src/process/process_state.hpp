// process_state.hpp: the state behind tidepool/process.hpp, shared by the files of src/process/.
//
// One driver and one pool slot per device. The slots live in a table that is made when the first
// pool is, and from then on the driver is fixed; the table is never freed (a framework may still
// free memory into a pool while the process exits, after static destructors have run), so a
// lookup of an existing pool is two atomic loads and no lock.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tidepool/driver.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::detail {

/// The pools of one driver, one slot per device; fixed once made.
struct pool_table {
  pool_table(std::shared_ptr<driver> drv_in, int count);

  std::shared_ptr<driver> drv;
  int device_count;
  /// slots[d] points into `owned` once device d's pool exists.
  std::unique_ptr<std::atomic<pool*>[]> slots;
  /// Owns the pools; written only under process_state::mutex.
  std::vector<std::unique_ptr<pool>> owned;
};

/// Everything process.hpp keeps.
struct process_state {
  std::mutex mutex;
  /// The driver chosen so far (set_default_driver or the environment); null until first asked.
  std::shared_ptr<driver> drv;
  pool_options options{};
  /// Byte caps set for a device before its pool existed (set_device_byte_cap), taken by the pool
  /// when it is made.
  std::map<int, std::size_t> device_byte_caps;
  /// Made with the first pool; from then on its driver is the process's driver.
  std::atomic<pool_table*> table{nullptr};
  /// TIDEPOOL_RECORD was read (with the first pool): it starts one recording at most.
  bool recording_environment_read = false;
};

/// The process's state; never destroyed.
process_state& process();

/// The driver the environment asks for: sim when TIDEPOOL_DEVICE=sim (TIDEPOOL_SIM_DEVICES,
/// TIDEPOOL_SIM_CAPACITY set its devices and capacity), else the CUDA driver. Throws
/// tidepool::error naming a malformed variable.
std::shared_ptr<driver> driver_from_environment();

/// Throws tidepool::error (invalid_device) unless `drv` has device `device`.
void check_device(driver& drv, int device);
/// The options pools are made with now (set_default_pool_options(), else the defaults).
pool_options default_pool_options();

/// The pool of `device` if it exists, else nullptr. Never creates one; never throws.
pool* find_pool(int device) noexcept;

/// The existing pool that owns `ptr`, else nullptr. Never creates one.
pool* find_owning_pool(const void* ptr);

/// Drops every pool and forgets the driver and options, so the next call starts afresh. For
/// tests only: no other thread may use the process layer meanwhile, and live allocations are lost.
void reset_process_for_testing();

}  // namespace tidepool::detail
