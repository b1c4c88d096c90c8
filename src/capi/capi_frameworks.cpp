// The entry points the frameworks load: PyTorch's CUDAPluggableAllocator (alloc and free with a
// stream) and CuPy's CFunctionAllocator (malloc and free without one).
//
// PyTorch never checks the pointer its alloc function returns: a NULL becomes a tensor over
// address 0 and a crash later. So tidepool_torch_alloc throws instead, as PyTorch's own allocator
// does from the same call site (c10::OutOfMemoryError from CUDACachingAllocator's malloc): the
// exception unwinds through PyTorch's C++ and reaches Python as a RuntimeError the program can
// catch, and the allocation is simply not made. The out-of-memory message starts with PyTorch's
// own words, "CUDA out of memory.", which code written for PyTorch's allocator looks for (the type
// torch.OutOfMemoryError itself can only come from a c10::OutOfMemoryError, which this library
// cannot make without linking libtorch). CuPy's malloc returns NULL on failure (CuPy calls it from
// Cython, which no C++ exception may cross); the Python package checks it and raises CuPy's
// OutOfMemoryError. Every failure also keeps its status and message for tidepool_last_status()
// and tidepool_last_error().
#include <exception>
#include <string>

#include <fmt/format.h>

#include "capi/allocation_streams.hpp"
#include "capi/capi_guard.hpp"
#include "capi/pool_lookup.hpp"
#include "capi/thread_lifetime.hpp"
#include "capi/thread_streams.hpp"
#include "process/tags.hpp"
#include "tidepool/c_api.h"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

namespace tidepool::detail {
namespace {

// "1.50 GiB", as PyTorch writes sizes in its own out-of-memory message.
std::string torch_size_text(std::size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  unsigned unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

// tidepool::out_of_memory with the message PyTorch's allocator would give first, then tidepool's
// report. Still a tidepool::out_of_memory and a std::bad_alloc for a C++ caller.
class torch_out_of_memory final : public out_of_memory {
 public:
  explicit torch_out_of_memory(const out_of_memory& cause)
      : out_of_memory(cause.report()),
        message_(fmt::format("CUDA out of memory. Tried to allocate {}. {}",
                             torch_size_text(cause.report().requested_bytes), cause.what())) {}
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

}  // namespace

// tidepool_torch_alloc's body, with the pool `pool_for(device)`.
template <class PoolFor>
void* torch_alloc_from(size_t size, int device, stream_t stream, PoolFor&& pool_for) {
  // PyTorch asks for empty tensors too; a null data pointer is what it expects for them.
  if (size == 0) return nullptr;
  try {
    return pool_for(device).allocate(size, stream, thread_lifetime());
  } catch (const out_of_memory& e) {
    fail(TIDEPOOL_OUT_OF_MEMORY, e.what());
    throw torch_out_of_memory(e);
  } catch (...) {
    // Keeps the status and message as guarded() would, then lets the exception go to PyTorch.
    (void)guarded([] { throw; });
    throw;
  }
}

// The pool of tag slot `slot` (the tag with that index) on `device`.
pool& tag_slot_pool(std::size_t slot, int device) {
  tag_entry* tag = tag_at(slot);
  if (tag == nullptr) {
    throw error(error_code::invalid_argument,
                fmt::format("tidepool: no tag has index {} (make the allocator with tidepool.torch.mem_pool(tag))", slot));
  }
  return tag_pool_of(*tag, device);
}

}  // namespace tidepool::detail

extern "C" {

void* tidepool_torch_alloc(size_t size, int device, tidepool_stream_t stream) {
  return tidepool::detail::torch_alloc_from(size, device, stream, [](int d) -> tidepool::pool& {
    return tidepool::current_pool(d);  // the thread's tag's pool, if one is pushed
  });
}

// One entry point per tag slot for torch.cuda.MemPool (tidepool.torch.mem_pool): PyTorch's
// pluggable allocator passes no tag, and the MemPool's allocator may run on any thread, so the
// tag is in the function: slot N allocates from the tag with index N (tidepool_tag_id).
#define TIDEPOOL_TORCH_TAG_SLOT(n)                                                                \
  void* tidepool_torch_alloc_tag##n(size_t size, int device, tidepool_stream_t stream) {           \
    return tidepool::detail::torch_alloc_from(size, device, stream, [](int d) -> tidepool::pool& { \
      return tidepool::detail::tag_slot_pool(n, d);                                               \
    });                                                                                            \
  }
TIDEPOOL_TORCH_TAG_SLOT(0)
TIDEPOOL_TORCH_TAG_SLOT(1)
TIDEPOOL_TORCH_TAG_SLOT(2)
TIDEPOOL_TORCH_TAG_SLOT(3)
TIDEPOOL_TORCH_TAG_SLOT(4)
TIDEPOOL_TORCH_TAG_SLOT(5)
TIDEPOOL_TORCH_TAG_SLOT(6)
TIDEPOOL_TORCH_TAG_SLOT(7)
TIDEPOOL_TORCH_TAG_SLOT(8)
TIDEPOOL_TORCH_TAG_SLOT(9)
TIDEPOOL_TORCH_TAG_SLOT(10)
TIDEPOOL_TORCH_TAG_SLOT(11)
TIDEPOOL_TORCH_TAG_SLOT(12)
TIDEPOOL_TORCH_TAG_SLOT(13)
TIDEPOOL_TORCH_TAG_SLOT(14)
TIDEPOOL_TORCH_TAG_SLOT(15)
#undef TIDEPOOL_TORCH_TAG_SLOT

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
    tidepool::pool& from = tidepool::current_pool(device);
    void* allocated = from.allocate(size, stream, thread_lifetime());
    try {
      remember_allocation_stream(allocated, stream);
    } catch (...) {
      from.deallocate(allocated, stream);
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
