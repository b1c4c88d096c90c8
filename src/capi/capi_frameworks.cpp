// The entry points the frameworks load: PyTorch's CUDAPluggableAllocator (alloc and free with a
// stream) and CuPy's CFunctionAllocator (malloc and free without one). They cannot return a
// status, so a failure returns NULL (or nothing) and keeps the status and message for
// tidepool_last_status() and tidepool_last_error(). PyTorch never checks, so its failures are also
// printed; CuPy's malloc is checked by the Python package, which raises instead.
#include "capi/allocation_streams.hpp"
#include "capi/capi_guard.hpp"
#include "capi/pool_lookup.hpp"
#include "capi/thread_streams.hpp"
#include "tidepool/c_api.h"
#include "tidepool/process.hpp"

extern "C" {

void* tidepool_torch_alloc(size_t size, int device, tidepool_stream_t stream) {
  using namespace tidepool::detail;
  // PyTorch asks for empty tensors too; a null data pointer is what it expects for them.
  if (size == 0) return nullptr;
  void* ptr = nullptr;
  const auto status = guarded([&] { ptr = tidepool::device_pool(device).allocate(size, stream); });
  if (status != TIDEPOOL_SUCCESS) print_last_error();
  return ptr;
}

void tidepool_torch_free(void* ptr, size_t size, int device, tidepool_stream_t stream) {
  using namespace tidepool::detail;
  (void)size;  // the pool knows each allocation's size
  if (guarded([&] { deallocate_on(ptr, device, stream); }) != TIDEPOOL_SUCCESS) print_last_error();
}

void* tidepool_cupy_malloc(void* param, size_t size, int device) {
  using namespace tidepool::detail;
  (void)param;
  void* ptr = nullptr;
  // A failure leaves its status and message for tidepool_last_status() and tidepool_last_error().
  guarded([&] {
    const tidepool::stream_t stream = current_stream(device);
    void* allocated = tidepool::device_pool(device).allocate(size, stream);
    try {
      remember_allocation_stream(allocated, stream);
    } catch (...) {
      tidepool::device_pool(device).deallocate(allocated, stream);
      throw;
    }
    ptr = allocated;
  });
  return ptr;
}

void tidepool_cupy_free(void* param, void* ptr, int device) {
  using namespace tidepool::detail;
  (void)param;
  const auto status = guarded([&] {
    if (ptr == nullptr) return;
    const tidepool::stream_t stream = take_allocation_stream(ptr);
    try {
      deallocate_on(ptr, device, stream);
    } catch (...) {
      restore_allocation_stream(ptr, stream);
      throw;
    }
  });
  if (status != TIDEPOOL_SUCCESS) print_last_error();
}

}  // extern "C"
