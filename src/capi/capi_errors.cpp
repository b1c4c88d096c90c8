// The C API's errors: the thread's last-error message, status names and codes, and the version.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "capi/capi_guard.hpp"
#include "tidepool/c_api.h"

#ifndef TIDEPOOL_VERSION_STRING
#error "TIDEPOOL_VERSION_STRING is defined by src/capi/CMakeLists.txt"
#endif

namespace tidepool::detail {
namespace {
// A fixed buffer, so that recording an error never allocates (it may run after bad_alloc).
constexpr std::size_t message_capacity = 2048;
thread_local char last_message[message_capacity] = "";
thread_local tidepool_status last_failure = TIDEPOOL_SUCCESS;
}  // namespace

tidepool_status fail(tidepool_status status, std::string_view message) noexcept {
  last_failure = status;
  const std::size_t length = std::min(message.size(), message_capacity - 1);
  std::memcpy(last_message, message.data(), length);
  last_message[length] = '\0';
  return status;
}

tidepool_status to_status(error_code code) noexcept {
  switch (code) {
    case error_code::invalid_size: return TIDEPOOL_INVALID_SIZE;
    case error_code::invalid_pointer: return TIDEPOOL_INVALID_POINTER;
    case error_code::double_free: return TIDEPOOL_DOUBLE_FREE;
    case error_code::invalid_stream: return TIDEPOOL_INVALID_STREAM;
    case error_code::invalid_device: return TIDEPOOL_INVALID_DEVICE;
    case error_code::invalid_argument: return TIDEPOOL_INVALID_ARGUMENT;
    case error_code::driver_failure: return TIDEPOOL_DRIVER_FAILURE;
    case error_code::unavailable: return TIDEPOOL_UNAVAILABLE;
    case error_code::asleep: return TIDEPOOL_ASLEEP;
  }
  return TIDEPOOL_INTERNAL_ERROR;
}

void throw_null_argument(const char* function, const char* name) {
  throw error(error_code::invalid_argument, fmt::format("{}: {} is NULL", function, name));
}

void check_struct_size(std::uint64_t size, const char* function, const char* type) {
  if (size < sizeof(std::uint64_t)) {
    throw error(error_code::invalid_argument,
                fmt::format("{}: struct_size is {}; set it to sizeof({})", function, size, type));
  }
}

void check_struct_size(std::uint64_t size, const char* function, const char* type,
                       std::span<const std::size_t> field_ends) {
  check_struct_size(size, function, type);
  if (field_ends.empty() || size >= field_ends.back()) return;
  if (std::find(field_ends.begin(), field_ends.end(), size) != field_ends.end()) return;
  throw error(error_code::invalid_argument,
              fmt::format("{}: struct_size is {}, which ends inside a field of {}; set it to sizeof({})",
                          function, size, type, type));
}

void check_reserved(const char* function, const char* name, std::int64_t value) {
  if (value == 0) return;
  throw error(error_code::invalid_argument,
              fmt::format("{}: {} is {}; it is reserved and must be zero", function, name, value));
}

void print_last_error() noexcept {
  // The core's messages already start with "tidepool:"; the C API's own do not.
  const bool prefixed = std::strncmp(last_message, "tidepool", 8) == 0;
  std::fprintf(stderr, "%s%s\n", prefixed ? "" : "tidepool: ", last_message);
}

void check_bytes(const char* name, std::uint64_t value, bool no_limit_allowed) {
  constexpr auto no_limit = std::numeric_limits<std::uint64_t>::max();
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (value <= most || (no_limit_allowed && value == no_limit)) return;
  throw error(error_code::invalid_argument,
              fmt::format("{} is {} bytes ({} as a signed number): more than any device holds; a byte "
                          "count must be from 0 to 2^63 - 1{}",
                          name, value, static_cast<std::int64_t>(value),
                          no_limit_allowed ? ", or UINT64_MAX for no limit" : ""));
}

}  // namespace tidepool::detail

extern "C" {

const char* tidepool_version(void) { return TIDEPOOL_VERSION_STRING; }

const char* tidepool_last_error(void) { return tidepool::detail::last_message; }

tidepool_status tidepool_last_status(void) { return tidepool::detail::last_failure; }

const char* tidepool_status_name(tidepool_status status) {
  switch (status) {
    case TIDEPOOL_SUCCESS: return "TIDEPOOL_SUCCESS";
    case TIDEPOOL_INVALID_SIZE: return "TIDEPOOL_INVALID_SIZE";
    case TIDEPOOL_INVALID_POINTER: return "TIDEPOOL_INVALID_POINTER";
    case TIDEPOOL_DOUBLE_FREE: return "TIDEPOOL_DOUBLE_FREE";
    case TIDEPOOL_INVALID_STREAM: return "TIDEPOOL_INVALID_STREAM";
    case TIDEPOOL_INVALID_DEVICE: return "TIDEPOOL_INVALID_DEVICE";
    case TIDEPOOL_INVALID_ARGUMENT: return "TIDEPOOL_INVALID_ARGUMENT";
    case TIDEPOOL_DRIVER_FAILURE: return "TIDEPOOL_DRIVER_FAILURE";
    case TIDEPOOL_UNAVAILABLE: return "TIDEPOOL_UNAVAILABLE";
    case TIDEPOOL_OUT_OF_MEMORY: return "TIDEPOOL_OUT_OF_MEMORY";
    case TIDEPOOL_INTERNAL_ERROR: return "TIDEPOOL_INTERNAL_ERROR";
    case TIDEPOOL_ASLEEP: return "TIDEPOOL_ASLEEP";
    case TIDEPOOL_STATUS_MAX_ENUM: break;
  }
  return "TIDEPOOL_UNKNOWN_STATUS";
}

}  // extern "C"
