// The C API's memory shared with other processes: an allocation exported as file descriptors,
// memory another process exported mapped here (tidepool/process.hpp, pool::export_allocation),
// and another process's cuMemAlloc memory opened from its cudaIpc handle.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "capi/capi_guard.hpp"
#include "capi/pool_lookup.hpp"
#include "tidepool/c_api.h"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

extern "C" {

tidepool_status tidepool_export_memory(const void* ptr, uint8_t device_uuid[16], int* fds, size_t* handle_sizes,
                                       uint64_t* handle_ids, size_t capacity, size_t* count, size_t* offset,
                                       size_t* bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    constexpr const char* function = "tidepool_export_memory";
    if (device_uuid == nullptr) throw_null_argument(function, "device_uuid");
    if (count == nullptr) throw_null_argument(function, "count");
    if (offset == nullptr) throw_null_argument(function, "offset");
    if (bytes == nullptr) throw_null_argument(function, "bytes");
    if (capacity > 0 && fds == nullptr) throw_null_argument(function, "fds");
    if (capacity > 0 && handle_sizes == nullptr) throw_null_argument(function, "handle_sizes");
    tidepool::pool& owner = pool_holding(ptr, TIDEPOOL_ANY_DEVICE, "export");
    tidepool::device_uuid_bytes uuid{};
    if (const auto status = owner.get_driver()->device_uuid(owner.device(), &uuid);
        status != tidepool::driver_status::success) {
      throw tidepool::error(tidepool::error_code::unavailable,
                            fmt::format("{}: the driver names no UUID for device {} ({}), which an importer needs",
                                        function, owner.device(), tidepool::to_string(status)));
    }
    tidepool::exported_allocation exported = owner.export_allocation(ptr);
    *count = exported.fds.size();
    if (exported.fds.size() > capacity) {
      for (const int fd : exported.fds) ::close(fd);
      owner.end_export(ptr);  // nothing went out
      throw tidepool::error(tidepool::error_code::invalid_argument,
                            fmt::format("{}: the allocation at {} lies on {} handles, room was given for {}", function,
                                        ptr, exported.fds.size(), capacity));
    }
    std::copy(exported.fds.begin(), exported.fds.end(), fds);
    std::copy(exported.handle_sizes.begin(), exported.handle_sizes.end(), handle_sizes);
    if (handle_ids != nullptr) std::copy(exported.handle_ids.begin(), exported.handle_ids.end(), handle_ids);
    std::memcpy(device_uuid, uuid.data(), uuid.size());
    *offset = exported.offset;
    *bytes = exported.bytes;
  });
}

tidepool_status tidepool_end_export(const void* ptr) {
  using namespace tidepool::detail;
  return guarded([&] { pool_holding(ptr, TIDEPOOL_ANY_DEVICE, "end_export").end_export(ptr); });
}

tidepool_status tidepool_import_memory(const uint8_t device_uuid[16], const int* fds, const size_t* handle_sizes,
                                       size_t count, size_t offset, size_t bytes, void** ptr, int* device) {
  using namespace tidepool::detail;
  return guarded([&] {
    constexpr const char* function = "tidepool_import_memory";
    if (device_uuid == nullptr) throw_null_argument(function, "device_uuid");
    if (ptr == nullptr) throw_null_argument(function, "ptr");
    if (count > 0 && fds == nullptr) throw_null_argument(function, "fds");
    if (count > 0 && handle_sizes == nullptr) throw_null_argument(function, "handle_sizes");
    tidepool::device_uuid_bytes uuid{};
    std::memcpy(uuid.data(), device_uuid, uuid.size());
    *ptr = tidepool::import_memory(uuid, std::vector<int>(fds, fds + count),
                                   std::vector<std::size_t>(handle_sizes, handle_sizes + count), offset, bytes,
                                   device);
  });
}

tidepool_status tidepool_close_imported_memory(void* ptr) {
  using namespace tidepool::detail;
  return guarded([&] { tidepool::close_imported_memory(ptr); });
}

tidepool_status tidepool_device_uuid(int device, uint8_t uuid[16]) {
  using namespace tidepool::detail;
  return guarded([&] {
    constexpr const char* function = "tidepool_device_uuid";
    if (uuid == nullptr) throw_null_argument(function, "uuid");
    check_device_exists(device);
    tidepool::device_uuid_bytes bytes{};
    if (const auto status = tidepool::default_driver()->device_uuid(device, &bytes); status != tidepool::driver_status::success) {
      throw tidepool::error(tidepool::error_code::unavailable,
                            fmt::format("{}: the driver names no UUID for device {} ({})", function, device,
                                        tidepool::to_string(status)));
    }
    std::memcpy(uuid, bytes.data(), bytes.size());
  });
}

tidepool_status tidepool_open_cuda_ipc_memory(int device, const uint8_t handle[64], void** ptr) {
  using namespace tidepool::detail;
  return guarded([&] {
    constexpr const char* function = "tidepool_open_cuda_ipc_memory";
    if (handle == nullptr) throw_null_argument(function, "handle");
    if (ptr == nullptr) throw_null_argument(function, "ptr");
    tidepool::ipc_memory_handle bytes{};
    std::memcpy(bytes.data(), handle, bytes.size());
    *ptr = tidepool::open_cuda_ipc_memory(device, bytes);
  });
}

tidepool_status tidepool_close_cuda_ipc_memory(void* ptr) {
  using namespace tidepool::detail;
  return guarded([&] { tidepool::close_cuda_ipc_memory(ptr); });
}

tidepool_status tidepool_imported_bytes(size_t* bytes) {
  using namespace tidepool::detail;
  return guarded([&] {
    if (bytes == nullptr) throw_null_argument("tidepool_imported_bytes", "bytes");
    *bytes = tidepool::imported_bytes();
  });
}

}  // extern "C"
