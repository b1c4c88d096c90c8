// tidepool/errors.hpp: what tidepool throws.
//
// Bad input (a double free, a foreign pointer, a zero or absurd size, a stream of another device)
// throws tidepool::error with a code and a message that names the pointer or size; the pool is
// left exactly as it was. Running out of memory, after every reclaim step of the out-of-memory
// path, throws tidepool::out_of_memory, a std::bad_alloc, with a report.
#pragma once

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

#include "tidepool/export.h"

namespace tidepool {

/// What kind of misuse or failure an error reports.
enum class error_code {
  invalid_size,     ///< zero, or larger than the device could ever hold
  invalid_pointer,  ///< a pointer this pool did not allocate (or an interior pointer)
  double_free,      ///< a pointer already freed
  invalid_stream,   ///< a stream that belongs to another device
  invalid_device,   ///< a device ordinal out of range
  invalid_argument, ///< any other bad argument (options, hooks, trace input)
  driver_failure,   ///< the driver failed in a way that is not out of memory
  unavailable,      ///< the requested backend (e.g. the CUDA driver) is not present
  asleep,           ///< the pool (a tag's memory) is asleep (pool::sleep), or not asleep for wake
};

/// Base of tidepool's exceptions other than out_of_memory.
class TIDEPOOL_API error : public std::runtime_error {
 public:
  error(error_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  [[nodiscard]] error_code code() const noexcept { return code_; }

 private:
  error_code code_;
};

/// The figures an out-of-memory report carries.
struct out_of_memory_report {
  int device = 0;
  std::size_t requested_bytes = 0;
  std::size_t in_use_bytes = 0;       ///< held by live allocations of this pool
  std::size_t cached_bytes = 0;       ///< held by this pool, free (after reclaiming: what is left)
  std::size_t driver_free_bytes = 0;  ///< free on the device as the driver reports it
  std::size_t largest_possible_bytes = 0;  ///< largest allocation that could still succeed
  std::size_t byte_cap = 0;           ///< the pool's cap (SIZE_MAX when none)
  /// Of cached_bytes, what lies free in handles that live allocations also touch: the driver frees
  /// a handle only whole, so only moving those allocations' bytes hands it back (pool::compact(),
  /// or pool_options::compact_on_out_of_memory on this path).
  std::size_t compactable_bytes = 0;
};

/// Thrown when an allocation cannot be satisfied after the whole out-of-memory path (release own
/// cache, trim CUDA async pools, reclaim hooks, wait for pending frees, retry).
class TIDEPOOL_API out_of_memory : public std::bad_alloc {
 public:
  explicit out_of_memory(const out_of_memory_report& report);
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  [[nodiscard]] const out_of_memory_report& report() const noexcept { return report_; }

 private:
  out_of_memory_report report_;
  std::string message_;
};

}  // namespace tidepool
