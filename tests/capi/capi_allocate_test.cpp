// Tests of the C API's allocation entry points and its errors: codes, messages naming the value at
// fault, and no exception crossing the boundary.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

namespace tidepool::testing {
namespace {

using CApi = process_test;

std::string last_error() { return tidepool_last_error(); }

TEST_F(CApi, AllocateAndFreeRoundTrip) {
  use_small_sim();
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(3 * MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(device_pool(0).allocation_size(ptr), 3 * MiB);
  void* kept = nullptr;
  ASSERT_EQ(tidepool_allocate(4096, 0, nullptr, TIDEPOOL_PERSISTENT, &kept), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(ptr, 0, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(kept, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(nullptr, 0, nullptr), TIDEPOOL_SUCCESS);  // like free(NULL)
  EXPECT_EQ(device_pool(0).stats().live_allocations, 0u);
}

TEST_F(CApi, BadInputGetsItsCodeAndAMessageNamingTheValue) {
  use_small_sim(2);
  void* ptr = reinterpret_cast<void*>(0x1234);
  EXPECT_EQ(tidepool_allocate(0, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_INVALID_SIZE);
  EXPECT_EQ(ptr, nullptr);  // *out is cleared on failure
  EXPECT_FALSE(last_error().empty());

  EXPECT_EQ(tidepool_allocate(1024, 7, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_INVALID_DEVICE);
  EXPECT_NE(last_error().find("device 7"), std::string::npos) << last_error();

  EXPECT_EQ(tidepool_allocate(1024, 0, nullptr, TIDEPOOL_SCRATCH, nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out"), std::string::npos) << last_error();

  EXPECT_EQ(tidepool_allocate(1024, 0, nullptr, static_cast<tidepool_lifetime>(5), &ptr),
            TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("5"), std::string::npos) << last_error();

  // A pointer tidepool never gave out: on a device without a pool, with one, and on any device.
  int local = 0;
  EXPECT_EQ(tidepool_deallocate(&local, 1, nullptr), TIDEPOOL_INVALID_POINTER);
  EXPECT_NE(last_error().find("device 1 has no pool"), std::string::npos) << last_error();
  EXPECT_EQ(existing_pools()[1], nullptr);  // a lookup made no pool
  ASSERT_EQ(tidepool_allocate(1024, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(&local, 0, nullptr), TIDEPOOL_INVALID_POINTER);
  EXPECT_EQ(tidepool_deallocate(&local, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_INVALID_POINTER);
  EXPECT_EQ(tidepool_deallocate(ptr, 9, nullptr), TIDEPOOL_INVALID_DEVICE);

  EXPECT_EQ(tidepool_deallocate(ptr, 0, nullptr), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(ptr, 0, nullptr), TIDEPOOL_DOUBLE_FREE);
  EXPECT_FALSE(last_error().empty());
  EXPECT_EQ(device_pool(0).stats().deallocations, 1u);  // the bad free changed nothing
}

TEST_F(CApi, ADoubleFreeIsCalledSoWhicheverDeviceIsNamed) {
  use_small_sim(2);
  void* ptr = nullptr;
  void* other = nullptr;
  ASSERT_EQ(tidepool_allocate(3 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_allocate(MiB, 0, nullptr, TIDEPOOL_SCRATCH, &other), TIDEPOOL_SUCCESS);
  ASSERT_EQ(tidepool_deallocate(ptr, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_SUCCESS);
  // Freed again, as Python's tidepool.deallocate(p) does (any device), and naming the device.
  EXPECT_EQ(tidepool_deallocate(ptr, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_DOUBLE_FREE);
  EXPECT_NE(last_error().find("double free"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("device 1"), std::string::npos) << last_error();
  EXPECT_EQ(tidepool_deallocate(ptr, 1, nullptr), TIDEPOOL_DOUBLE_FREE);
  EXPECT_NE(last_error().find("double free"), std::string::npos) << last_error();
  EXPECT_EQ(tidepool_record_stream(ptr, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_DOUBLE_FREE);
  EXPECT_NE(last_error().find("record_stream of"), std::string::npos) << last_error();
  // A pointer no pool ever had is still "not allocated", not a double free.
  int local = 0;
  EXPECT_EQ(tidepool_deallocate(&local, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_INVALID_POINTER);
  EXPECT_NE(last_error().find("not allocated by tidepool on any device"), std::string::npos) << last_error();
  // Nothing changed: one free counted, the other allocation still live.
  EXPECT_EQ(device_pool(1).stats().deallocations, 1u);
  EXPECT_TRUE(device_pool(0).owns(other));
  EXPECT_EQ(tidepool_deallocate(other, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApi, OutOfMemoryIsACodeWithTheReport) {
  auto& sim = use_small_sim();
  sim.set_capacity_limit(0, 64 * MiB);
  void* ptr = nullptr;
  EXPECT_EQ(tidepool_allocate(128 * MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_OUT_OF_MEMORY);
  EXPECT_EQ(ptr, nullptr);
  EXPECT_FALSE(last_error().empty());
  EXPECT_STREQ(tidepool_status_name(TIDEPOOL_OUT_OF_MEMORY), "TIDEPOOL_OUT_OF_MEMORY");
}

TEST_F(CApi, NoExceptionCrossesTheBoundary) {
  auto& sim = use_small_sim();
  sim.set_capacity_limit(0, 64 * MiB);
  // A hook that throws: the pool's out-of-memory path and release both run it.
  scoped_hook hook([](int, std::size_t) -> std::size_t { throw std::runtime_error("hook exploded"); });
  void* ptr = nullptr;
  tidepool_status status = TIDEPOOL_SUCCESS;
  EXPECT_NO_THROW(status = tidepool_allocate(128 * MiB, 0, nullptr, TIDEPOOL_SCRATCH, &ptr));
  EXPECT_NE(status, TIDEPOOL_SUCCESS);
  EXPECT_EQ(ptr, nullptr);
  std::size_t bytes = 0;
  EXPECT_NO_THROW(status = tidepool_release_cached_memory(&bytes));
  EXPECT_EQ(status, TIDEPOOL_INTERNAL_ERROR);
  EXPECT_NE(last_error().find("hook exploded"), std::string::npos) << last_error();
  void* got = reinterpret_cast<void*>(1);
  // The one exception by design: PyTorch's alloc function throws, since PyTorch does not check
  // for NULL (capi_frameworks_test.cpp).
  EXPECT_ANY_THROW(got = tidepool_torch_alloc(128 * MiB, 0, nullptr));
  EXPECT_NO_THROW(tidepool_torch_free(reinterpret_cast<void*>(0x40), 1, 0, nullptr));
  EXPECT_NO_THROW(got = tidepool_cupy_malloc(nullptr, 128 * MiB, 0));
  EXPECT_EQ(got, nullptr);
  EXPECT_NO_THROW(tidepool_cupy_free(nullptr, reinterpret_cast<void*>(0x40), 0));
}

TEST_F(CApi, UnavailableDriverIsACode) {
  // No driver set and TIDEPOOL_DEVICE=cuda: on a machine without CUDA every call says so.
  ::setenv("TIDEPOOL_DEVICE", "cuda", 1);
  const bool cuda_present = cuda_driver_unavailable_reason().empty();
  int count = -1;
  const tidepool_status status = tidepool_device_count(&count);
  ::unsetenv("TIDEPOOL_DEVICE");
  if (cuda_present) {
    EXPECT_EQ(status, TIDEPOOL_SUCCESS);
    EXPECT_GT(count, 0);
  } else {
    EXPECT_EQ(status, TIDEPOOL_UNAVAILABLE);
    EXPECT_FALSE(last_error().empty());
  }
}

TEST_F(CApi, LastErrorIsPerThreadAndVersionIsTheProjects) {
  use_small_sim();
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(0, 0, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_INVALID_SIZE);
  const std::string mine = last_error();
  std::string theirs = "unset";
  std::thread([&] { theirs = tidepool_last_error(); }).join();
  EXPECT_EQ(theirs, "");
  EXPECT_EQ(last_error(), mine);
  EXPECT_GT(std::strlen(tidepool_version()), 0u);
  EXPECT_EQ(std::string(tidepool_version()).find('.') != std::string::npos, true);
  EXPECT_STREQ(tidepool_status_name(TIDEPOOL_SUCCESS), "TIDEPOOL_SUCCESS");
  EXPECT_STREQ(tidepool_status_name(static_cast<tidepool_status>(99)), "TIDEPOOL_UNKNOWN_STATUS");
}

}  // namespace
}  // namespace tidepool::testing
