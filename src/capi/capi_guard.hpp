// capi_guard.hpp: the one place where C++ exceptions stop. Every C entry point runs its body in
// guarded(), which turns whatever was thrown into a tidepool_status and the thread's last-error
// message, so no exception crosses the C ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <span>
#include <string_view>

#include "tidepool/c_api.h"
#include "tidepool/errors.hpp"

namespace tidepool::detail {

/// Stores `message` as the calling thread's last error (truncated, never allocating) and returns
/// `status`.
tidepool_status fail(tidepool_status status, std::string_view message) noexcept;

/// The C status of a tidepool::error_code.
tidepool_status to_status(error_code code) noexcept;

/// Throws tidepool::error (invalid_argument) saying that `function`'s argument `name` is NULL.
[[noreturn]] void throw_null_argument(const char* function, const char* name);

/// Throws tidepool::error (invalid_argument) when a caller's versioned struct has no struct_size
/// set (smaller than the field itself), naming `function` and the struct's `type` to size it by.
void check_struct_size(std::uint64_t size, const char* function, const char* type);

/// check_struct_size, and the size must end where one of the struct's fields ends (`field_ends`:
/// each field's end, ascending, the last being the size of the struct this library knows) or lie
/// past the last (a newer header's struct, whose fields this library does not know): a size that
/// ends inside a field would have part of that field read or written.
void check_struct_size(std::uint64_t size, const char* function, const char* type,
                       std::span<const std::size_t> field_ends);

/// Throws tidepool::error (invalid_argument) unless a struct's reserved field `name` is zero: a
/// later version may give it a meaning, and garbage there must not take one then.
void check_reserved(const char* function, const char* name, std::int64_t value);

/// Throws tidepool::error (invalid_argument) for a byte count `name` of 2^63 or more: more than
/// any device holds, and what a negative number becomes when a caller stores it in an unsigned
/// field or argument (headroom = -5 would make every allocation fail). UINT64_MAX, "no limit",
/// passes where `no_limit_allowed`.
void check_bytes(const char* name, std::uint64_t value, bool no_limit_allowed);

/// Writes "tidepool: <last error>" to stderr: for the framework entry points, which can only
/// return NULL, so that a failure is seen.
void print_last_error() noexcept;

/// Runs `body`; returns TIDEPOOL_SUCCESS, or the status of what it threw.
template <class Body>
tidepool_status guarded(Body&& body) noexcept {
  try {
    body();
    return TIDEPOOL_SUCCESS;
  } catch (const out_of_memory& e) {
    return fail(TIDEPOOL_OUT_OF_MEMORY, e.what());
  } catch (const error& e) {
    return fail(to_status(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    // Not tidepool::out_of_memory (caught above): host memory ran out for bookkeeping.
    return fail(TIDEPOOL_OUT_OF_MEMORY, "host memory exhausted (std::bad_alloc)");
  } catch (const std::exception& e) {
    return fail(TIDEPOOL_INTERNAL_ERROR, e.what());
  } catch (...) {
    return fail(TIDEPOOL_INTERNAL_ERROR, "an exception that is not a std::exception");
  }
}

}  // namespace tidepool::detail
