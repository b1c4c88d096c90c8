// Tests of the framework entry points, called through function pointers of exactly the types the
// frameworks use: PyTorch's CUDAPluggableAllocator (alloc and free with a stream) and CuPy's
// CFunctionAllocator (malloc and free with a param and no stream: the thread's current stream).
#include <gtest/gtest.h>

#include <new>
#include <string>
#include <thread>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

namespace tidepool::testing {
namespace {

struct CUstream_st;
using cuda_stream = ::CUstream_st*;  // cudaStream_t
// The types PyTorch's CUDAPluggableAllocator casts the loaded symbols to.
using torch_alloc_fn = void* (*)(std::size_t size, int device, cuda_stream stream);
using torch_free_fn = void (*)(void* ptr, std::size_t size, int device, cuda_stream stream);
// The types CuPy's CFunctionAllocator casts its function addresses to.
using cupy_malloc_fn = void* (*)(void* param, std::size_t size, int device);
using cupy_free_fn = void (*)(void* param, void* ptr, int device);

using CApiFrameworks = process_test;

// A stream on `device`, as the framework makes it (opening the device's context first).
stream_t make_stream(sim_driver& sim, int device) {
  EXPECT_EQ(sim.open_context(device), driver_status::success);
  stream_t stream = nullptr;
  EXPECT_EQ(sim.stream_create(device, &stream), driver_status::success);
  return stream;
}

TEST_F(CApiFrameworks, TorchAllocAndFreeAsPyTorchCallsThem) {
  auto& sim = use_small_sim(2);
  const torch_alloc_fn alloc = &tidepool_torch_alloc;
  const torch_free_fn free = &tidepool_torch_free;
  const stream_t stream = make_stream(sim, 1);
  void* ptr = alloc(5 * MiB, 1, stream);
  ASSERT_NE(ptr, nullptr);
  EXPECT_TRUE(device_pool(1).owns(ptr));
  EXPECT_EQ(alloc(0, 1, stream), nullptr);  // empty tensors get no memory
  free(ptr, 5 * MiB, 1, stream);
  EXPECT_EQ(device_pool(1).stats().live_allocations, 0u);
  EXPECT_EQ(existing_pools()[0], nullptr);
  // A failure throws (PyTorch would use a NULL as memory) and keeps the reason.
  EXPECT_THROW((void)alloc(1024, 5, stream), error);
  EXPECT_EQ(tidepool_last_status(), TIDEPOOL_INVALID_DEVICE);
  EXPECT_NE(std::string(tidepool_last_error()).find("device 5"), std::string::npos);
}

TEST_F(CApiFrameworks, TorchOutOfMemoryThrowsWhatPyTorchsAllocatorWouldAndLosesNothing) {
  auto& sim = use_small_sim();
  sim.set_capacity_limit(0, 256 * MiB);
  const torch_alloc_fn alloc = &tidepool_torch_alloc;
  const torch_free_fn free = &tidepool_torch_free;
  void* weights = alloc(64 * MiB, 0, nullptr);
  ASSERT_NE(weights, nullptr);
  // A batch too large: PyTorch turns the exception into a Python RuntimeError (it catches
  // std::exception); the text starts as its own allocator's does.
  try {
    (void)alloc(512 * MiB, 0, nullptr);
    FAIL() << "512 MiB fitted under a 256 MiB limit";
  } catch (const std::bad_alloc& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("CUDA out of memory. Tried to allocate 512.00 MiB. tidepool: out of memory on device 0", 0),
              0u)
        << what;
    const auto* report = dynamic_cast<const out_of_memory*>(&e);
    ASSERT_NE(report, nullptr);
    EXPECT_EQ(report->report().requested_bytes, 512 * MiB);
  }
  EXPECT_EQ(tidepool_last_status(), TIDEPOOL_OUT_OF_MEMORY);
  // Nothing was lost: the weights are still live, and a smaller batch fits.
  EXPECT_TRUE(device_pool(0).owns(weights));
  void* batch = alloc(128 * MiB, 0, nullptr);
  ASSERT_NE(batch, nullptr);
  free(batch, 128 * MiB, 0, nullptr);
  free(weights, 64 * MiB, 0, nullptr);
  EXPECT_EQ(device_pool(0).stats().live_allocations, 0u);
}

TEST_F(CApiFrameworks, CupyMallocAndFreeAsCupyCallsThem) {
  use_small_sim();
  const cupy_malloc_fn malloc = &tidepool_cupy_malloc;
  const cupy_free_fn free = &tidepool_cupy_free;
  int param = 0;  // CuPy passes its param through; tidepool ignores it
  void* ptr = malloc(&param, 3 * MiB, 0);
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(device_pool(0).allocation_size(ptr), 3 * MiB);
  free(&param, ptr, 0);
  EXPECT_EQ(device_pool(0).stats().live_allocations, 0u);
  EXPECT_EQ(malloc(nullptr, 1024, 3), nullptr);
}

TEST_F(CApiFrameworks, CurrentStreamIsPerThreadAndPerDevice) {
  auto& sim = use_small_sim(2);
  const stream_t s0 = make_stream(sim, 0);
  const stream_t s1 = make_stream(sim, 1);
  tidepool_stream_t got = reinterpret_cast<tidepool_stream_t>(1);
  ASSERT_EQ(tidepool_get_current_stream(0, &got), TIDEPOOL_SUCCESS);
  EXPECT_EQ(got, nullptr);  // the legacy default stream until set
  ASSERT_EQ(tidepool_set_current_stream(0, s0), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_set_current_stream(1, s1), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_get_current_stream(0, &got), TIDEPOOL_SUCCESS);
  EXPECT_EQ(got, s0);
  ASSERT_EQ(tidepool_get_current_stream(1, &got), TIDEPOOL_SUCCESS);
  EXPECT_EQ(got, s1);
  std::thread([&] {
    tidepool_stream_t other = reinterpret_cast<tidepool_stream_t>(1);
    EXPECT_EQ(tidepool_get_current_stream(0, &other), TIDEPOOL_SUCCESS);
    EXPECT_EQ(other, nullptr);  // another thread's setting is not ours
  }).join();
  EXPECT_EQ(tidepool_set_current_stream(2, s0), TIDEPOOL_INVALID_DEVICE);
  EXPECT_EQ(tidepool_get_current_stream(0, nullptr), TIDEPOOL_INVALID_ARGUMENT);
}

// Whether `ptr` lies in a block of a persistent region of `device`'s pool.
bool placed_persistent(int device, const void* ptr) {
  for (const block_description& b : device_pool(device).describe().blocks) {
    if (b.address == reinterpret_cast<std::uintptr_t>(ptr)) return b.persistent;
  }
  ADD_FAILURE() << "no block at " << ptr;
  return false;
}

TEST_F(CApiFrameworks, TheThreadsLifetimeHintPlacesWhatTheFrameworksAllocate) {
  (void)use_small_sim();
  // This thread's settings outlive a test: an earlier one's stream is gone, and a failure here
  // must not leave the next test allocating persistent.
  ASSERT_EQ(tidepool_set_current_stream(0, nullptr), TIDEPOOL_SUCCESS);
  struct back_to_scratch {
    ~back_to_scratch() { (void)tidepool_set_thread_lifetime(TIDEPOOL_SCRATCH); }
  } reset;
  tidepool_lifetime hint = TIDEPOOL_PERSISTENT;
  ASSERT_EQ(tidepool_get_thread_lifetime(&hint), TIDEPOOL_SUCCESS);
  EXPECT_EQ(hint, TIDEPOOL_SCRATCH);  // until set
  void* scratch = tidepool_torch_alloc(3 * MiB, 0, nullptr);
  ASSERT_EQ(tidepool_set_thread_lifetime(TIDEPOOL_PERSISTENT), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_get_thread_lifetime(&hint), TIDEPOOL_SUCCESS);
  EXPECT_EQ(hint, TIDEPOOL_PERSISTENT);
  void* state = tidepool_torch_alloc(3 * MiB, 0, nullptr);
  void* small_state = tidepool_cupy_malloc(nullptr, 4096, 0);
  void* other_thread = nullptr;
  std::thread([&] {
    tidepool_lifetime theirs = TIDEPOOL_PERSISTENT;
    EXPECT_EQ(tidepool_get_thread_lifetime(&theirs), TIDEPOOL_SUCCESS);
    EXPECT_EQ(theirs, TIDEPOOL_SCRATCH);  // another thread's hint is not ours
    other_thread = tidepool_torch_alloc(3 * MiB, 0, nullptr);
  }).join();
  // A value that is no hint is refused and changes nothing.
  EXPECT_EQ(tidepool_set_thread_lifetime(static_cast<tidepool_lifetime>(7)), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("lifetime hint 7"), std::string::npos);
  ASSERT_EQ(tidepool_get_thread_lifetime(&hint), TIDEPOOL_SUCCESS);
  EXPECT_EQ(hint, TIDEPOOL_PERSISTENT);
  EXPECT_EQ(tidepool_get_thread_lifetime(nullptr), TIDEPOOL_INVALID_ARGUMENT);
  ASSERT_EQ(tidepool_set_thread_lifetime(TIDEPOOL_SCRATCH), TIDEPOOL_SUCCESS);
  void* scratch_again = tidepool_torch_alloc(3 * MiB, 0, nullptr);
  ASSERT_NE(scratch, nullptr);
  ASSERT_NE(state, nullptr);
  ASSERT_NE(small_state, nullptr);
  ASSERT_NE(other_thread, nullptr);
  ASSERT_NE(scratch_again, nullptr);
  EXPECT_FALSE(placed_persistent(0, scratch));
  EXPECT_TRUE(placed_persistent(0, state));
  EXPECT_TRUE(placed_persistent(0, small_state));
  EXPECT_FALSE(placed_persistent(0, other_thread));
  EXPECT_FALSE(placed_persistent(0, scratch_again));
  for (void* p : {scratch, state, other_thread, scratch_again}) tidepool_torch_free(p, 3 * MiB, 0, nullptr);
  tidepool_cupy_free(nullptr, small_state, 0);
  EXPECT_EQ(device_pool(0).stats().live_allocations, 0u);
}

TEST_F(CApiFrameworks, CupyAllocatesOnTheCurrentStreamAndFreesOnTheAllocationStream) {
  auto& sim = use_small_sim();
  const stream_t busy = make_stream(sim, 0);
  const stream_t other = make_stream(sim, 0);
  // CuPy's current stream is `busy` when the array is made, and work queued there uses it.
  ASSERT_EQ(tidepool_set_current_stream(0, busy), TIDEPOOL_SUCCESS);
  void* array = tidepool_cupy_malloc(nullptr, 8 * MiB, 0);
  ASSERT_NE(array, nullptr);
  sim.launch(0, busy, 1000.0, reinterpret_cast<device_address>(array), 8 * MiB);
  // The program switches to `other`, then the array is dropped: CuPy passes no stream.
  ASSERT_EQ(tidepool_set_current_stream(0, other), TIDEPOOL_SUCCESS);
  tidepool_cupy_free(nullptr, array, 0);
  // Freed on `busy`, its allocation stream: `other` must not get it while busy's work runs.
  void* next = tidepool_cupy_malloc(nullptr, 8 * MiB, 0);
  ASSERT_NE(next, nullptr);
  EXPECT_NE(next, array);
  // On `busy` itself it is reusable at once (stream order protects it).
  ASSERT_EQ(tidepool_set_current_stream(0, busy), TIDEPOOL_SUCCESS);
  void* again = tidepool_cupy_malloc(nullptr, 8 * MiB, 0);
  EXPECT_EQ(again, array);
  tidepool_cupy_free(nullptr, again, 0);
  tidepool_cupy_free(nullptr, next, 0);
  sim.run_until_idle();
  EXPECT_GT(release_cached_memory(), 0u);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u);
  ASSERT_EQ(tidepool_set_current_stream(0, nullptr), TIDEPOOL_SUCCESS);
}

// CuPy destroys a stream when it is collected, and may free arrays made there later (its garbage
// collector): the Python package tells the library with tidepool_forget_stream, after which no
// call names the handle, and a new stream under the same handle starts afresh.
TEST_F(CApiFrameworks, CupyFreesAfterItsStreamWasDestroyedAndForgotten) {
  auto& sim = use_small_sim();
  const stream_t s = make_stream(sim, 0);
  ASSERT_EQ(tidepool_set_current_stream(0, s), TIDEPOOL_SUCCESS);
  void* first = tidepool_cupy_malloc(nullptr, 4 * MiB, 0);
  void* array = tidepool_cupy_malloc(nullptr, 8 * MiB, 0);
  ASSERT_NE(array, nullptr);
  tidepool_cupy_free(nullptr, first, 0);  // the stream's event, while it is alive
  sim.launch(0, s, 1000.0, reinterpret_cast<device_address>(array), 8 * MiB);
  ASSERT_EQ(tidepool_set_current_stream(0, nullptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(sim.stream_destroy(0, s), driver_status::success);
  EXPECT_EQ(tidepool_forget_stream(TIDEPOOL_ANY_DEVICE, s), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_forget_stream(0, s), TIDEPOOL_SUCCESS) << "forgetting twice is harmless";
  EXPECT_EQ(tidepool_forget_stream(3, s), TIDEPOOL_INVALID_DEVICE);
  const std::uint64_t recorded = sim.call_counts().of(driver_call::event_record);
  tidepool_cupy_free(nullptr, array, 0);
  EXPECT_EQ(sim.call_counts().of(driver_call::event_record), recorded) << "a call named the destroyed stream";
  EXPECT_EQ(device_pool(0).stats().live_allocations, 0u);
  sim.run_until_idle();
  EXPECT_GT(release_cached_memory(), 0u);
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u);
}

}  // namespace
}  // namespace tidepool::testing
