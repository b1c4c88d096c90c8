// pool_lookup.hpp: how the C API finds the pool behind a device number or a pointer, without ever
// making a pool where only a lookup was asked for.
#pragma once

#include "tidepool/pool.hpp"

namespace tidepool::detail {

/// Throws tidepool::error (invalid_device) unless `device` is an ordinal of the process's driver.
void check_device_exists(int device);

/// The existing pool that must hold `ptr`: the one of `device`, or whichever owns it when device
/// is TIDEPOOL_ANY_DEVICE. Throws tidepool::error otherwise: double_free (naming `operation`) for
/// a pointer that a pool has in free memory, else invalid_pointer or invalid_device.
pool& pool_holding(const void* ptr, int device, const char* operation);

/// Frees `ptr` (a no-op for nullptr) into the pool that holds it; a pointer freed already is a
/// double_free error, whichever device was named.
void deallocate_on(void* ptr, int device, stream_t stream);

}  // namespace tidepool::detail
