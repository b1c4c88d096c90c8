// Each thread's current stream per device: a small thread-local table, read on every CuPy
// allocation, written only when the Python side sees CuPy's current stream change.
#include "capi/thread_streams.hpp"

#include <cstddef>
#include <vector>

namespace tidepool::detail {
namespace {
thread_local std::vector<stream_t> streams_by_device;
}

stream_t current_stream(int device) noexcept {
  const auto index = static_cast<std::size_t>(device);
  return device >= 0 && index < streams_by_device.size() ? streams_by_device[index] : nullptr;
}

void set_current_stream(int device, stream_t stream) {
  const auto index = static_cast<std::size_t>(device);
  if (index >= streams_by_device.size()) streams_by_device.resize(index + 1, nullptr);
  streams_by_device[index] = stream;
}

}  // namespace tidepool::detail
