// sharing.hpp: the process's side of the ledgers (issue 14): which GPUs it has joined, the helper
// thread of each that serves the others' requests, and the reclaim hook that asks them before an
// allocation fails. The options are tidepool::sharing_options (process.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tidepool::detail {

/// Joins the ledger of `device`'s GPU, once (called when the device's pool is made): claims a
/// slot, starts the helper thread, registers the hook. Never throws: a ledger that cannot be
/// used leaves sharing off on that GPU, and the reason is kept (sharing_devices()).
void sharing_join(int device) noexcept;

/// Asks the other processes on `device`'s GPU for what an allocation of `bytes_needed` lacks (the
/// body of the reclaim hook; 0 on a helper thread, for a release of everything, or when off).
/// Returns the bytes they say they handed back.
std::size_t ask_neighbours(int device, std::size_t bytes_needed);

/// What this process knows of its ledgers, for tests and diagnostics.
struct sharing_device_status {
  int device = 0;
  std::string ledger_path;  ///< empty when refused
  std::string refused;      ///< why sharing is off on this GPU
  std::size_t slot = 0;
  bool serving = false;     ///< the helper thread runs
};
[[nodiscard]] std::vector<sharing_device_status> sharing_devices();

/// Counts of this process's asks since it started (or since reset_sharing_for_testing).
struct sharing_counters {
  std::uint64_t asks = 0;        ///< out-of-memory paths that asked
  std::uint64_t requests = 0;    ///< requests sent (one per process asked)
  std::uint64_t answered = 0;
  std::uint64_t timed_out = 0;
  std::uint64_t busy = 0;
  std::uint64_t gone = 0;
  std::uint64_t answered_bytes = 0;
  std::uint64_t last_round_trip_ns = 0;  ///< of the last answered request
  std::uint64_t served = 0;              ///< requests this process served
};
[[nodiscard]] sharing_counters sharing_counts();

/// The ledgers' directory: $TIDEPOOL_LEDGER_DIR, else /dev/shm.
[[nodiscard]] std::string ledger_directory();

/// Leaves every ledger, stops the threads and rereads the options from the environment (tests).
void reset_sharing_for_testing();

}  // namespace tidepool::detail
