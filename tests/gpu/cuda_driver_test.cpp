// cuda_driver_test.cpp: the cuda driver on a real GPU: pages through the virtual memory API hold
// the bytes written to them, a map's two calls timed apart, plain allocations, streams and events,
// has_context that opens nothing, NVML's per-process figure following cuMemCreate, trimming the
// async pools, and the statuses of failed calls. Skipped where no GPU is present.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu_test.hpp"

namespace tidepool {
namespace {

using gpu_test::check;
using gpu_test::cu;
using gpu_test::first_mismatch;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

TEST(CudaDriver, DescribesTheDevice) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  EXPECT_EQ(drv->name(), "cuda");
  ASSERT_GE(drv->device_count(), 1);
  EXPECT_TRUE(drv->supports_virtual_memory(0));
  const std::size_t granularity = drv->granularity(0);
  EXPECT_GT(granularity, 0u);
  EXPECT_EQ(granularity % (64 * 1024), 0u) << "granularity " << granularity;
  EXPECT_FALSE(drv->supports_virtual_memory(drv->device_count()));
  EXPECT_EQ(drv->granularity(-1), 0u);
}

TEST(CudaDriver, HasContextNeverOpensOne) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  if (drv->has_context(0)) GTEST_SKIP() << "an earlier test in this process opened the context";
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(drv->has_context(0));
  // Nothing was opened: NVML does not list this process, and its figure is 0 (or unknown
  // where NVML is absent).
  const device_memory_info before = drv->memory_info(0);
  EXPECT_EQ(before.process_used, 0u);
  EXPECT_FALSE(drv->has_context(0)) << "memory_info opened a context";
  ASSERT_EQ(drv->open_context(0), driver_status::success);
  EXPECT_TRUE(drv->has_context(0));
  const device_memory_info after = drv->memory_info(0);
  if (after.process_used != device_memory_info::unknown_bytes) {
    EXPECT_GT(after.process_used, 0u) << "an open context costs device memory";
    std::printf("[figure] context on device 0: %.1f MiB (NVML)\n",
                static_cast<double>(after.process_used) / static_cast<double>(MiB));
  }
}

TEST(CudaDriver, PagesHoldWhatIsWrittenToThem) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  const std::size_t page = drv->granularity(0);
  const std::size_t sizes[] = {page, 10 * page, 32 * page};
  std::size_t range = 0;
  for (std::size_t s : sizes) range += s;
  const driver_call_counts start = drv->call_counts();

  device_address base = 0;
  ASSERT_EQ(drv->address_reserve(0, range, page, &base), driver_status::success);
  ASSERT_NE(base, 0u);
  std::vector<physical_handle> handles;
  device_address at = base;
  for (std::size_t s : sizes) {
    physical_handle h = 0;
    ASSERT_EQ(drv->mem_create(0, s, &h), driver_status::success);
    ASSERT_EQ(drv->mem_map(0, at, s, h), driver_status::success);
    handles.push_back(h);
    at += s;
  }
  // Each handle gets its own byte; a page mapped twice or not at all would show up here.
  at = base;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    check(cu().cuMemsetD8(static_cast<CUdeviceptr>(at), static_cast<unsigned char>(0x11 * (i + 1)), sizes[i]),
          "cuMemsetD8");
    at += sizes[i];
  }
  at = base;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(first_mismatch(at, sizes[i], static_cast<std::uint8_t>(0x11 * (i + 1))), -1) << "handle " << i;
    at += sizes[i];
  }
  at = base;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(drv->mem_unmap(0, at, sizes[i]), driver_status::success);
    EXPECT_EQ(drv->mem_release(0, handles[i]), driver_status::success);
    at += sizes[i];
  }
  EXPECT_EQ(drv->address_free(0, base, range), driver_status::success);

  driver_call_counts used = drv->call_counts();
  used -= start;
  EXPECT_EQ(used.of(driver_call::address_reserve), 1u);
  EXPECT_EQ(used.of(driver_call::mem_create), 3u);
  EXPECT_EQ(used.of(driver_call::mem_map), 3u);
  EXPECT_EQ(used.of(driver_call::mem_set_access), 3u);
  EXPECT_EQ(used.of(driver_call::mem_unmap), 3u);
  EXPECT_EQ(used.of(driver_call::mem_release), 3u);
  EXPECT_EQ(used.of(driver_call::address_free), 1u);
  EXPECT_GT(used.us_of(driver_call::mem_create), 0.0);
}

TEST(CudaDriver, MemMapTimesItsTwoCallsApart) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  const std::size_t page = drv->granularity(0);
  device_address base = 0;
  ASSERT_EQ(drv->address_reserve(0, 8 * page, page, &base), driver_status::success);
  std::vector<physical_handle> handles(8);
  const driver_call_counts start = drv->call_counts();
  double map_us = 0;
  double access_us = 0;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    ASSERT_EQ(drv->mem_create(0, page, &handles[i]), driver_status::success);
    ASSERT_EQ(drv->mem_map(0, base + i * page, page, handles[i]), driver_status::success);
    const mem_map_times times = drv->last_mem_map_times();
    EXPECT_GT(times.map_us, 0.0);
    EXPECT_GT(times.set_access_us, 0.0);
    map_us += times.map_us;
    access_us += times.set_access_us;
  }
  driver_call_counts used = drv->call_counts();
  used -= start;
  // The figures of each call are the driver's own count of cuMemMap and cuMemSetAccess.
  EXPECT_NEAR(map_us, used.us_of(driver_call::mem_map), 1e-6 * used.us_of(driver_call::mem_map) + 1e-3);
  EXPECT_NEAR(access_us, used.us_of(driver_call::mem_set_access),
              1e-6 * used.us_of(driver_call::mem_set_access) + 1e-3);
  std::printf("[figure] mem_map of a %zu MiB handle, mean of %zu: cuMemMap %.1f us, cuMemSetAccess %.1f us\n",
              page / MiB, handles.size(), map_us / static_cast<double>(handles.size()),
              access_us / static_cast<double>(handles.size()));
  // A refused map: cuMemMap fails, cuMemSetAccess is never reached.
  EXPECT_NE(drv->mem_map(0, base, page, handles[1]), driver_status::success);
  EXPECT_EQ(drv->last_mem_map_times().set_access_us, 0.0);
  for (std::size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(drv->mem_unmap(0, base + i * page, page), driver_status::success);
    EXPECT_EQ(drv->mem_release(0, handles[i]), driver_status::success);
  }
  EXPECT_EQ(drv->address_free(0, base, 8 * page), driver_status::success);
}

TEST(CudaDriver, FailedCallsReportTheirStatus) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  ASSERT_EQ(drv->open_context(0), driver_status::success);
  const std::size_t page = drv->granularity(0);
  physical_handle h = 0;
  EXPECT_EQ(drv->mem_create(0, page + 4096, &h), driver_status::invalid_value) << "unaligned size";
  EXPECT_EQ(drv->mem_create(drv->device_count(), page, &h), driver_status::invalid_value) << "bad device";
  const std::size_t too_much = drv->memory_info(0).total + 64 * GiB;
  EXPECT_EQ(drv->mem_create(0, too_much / page * page, &h), driver_status::out_of_memory);
  device_address p = 0;
  EXPECT_EQ(drv->mem_alloc(0, too_much, &p), driver_status::out_of_memory);
  EXPECT_NE(drv->mem_unmap(0, 0x1000, page), driver_status::success);
  EXPECT_EQ(drv->open_context(-1), driver_status::invalid_value);
  EXPECT_FALSE(drv->has_context(99));
}

TEST(CudaDriver, PlainAllocationsHoldBytes) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  device_address p = 0;
  ASSERT_EQ(drv->mem_alloc(0, 64 * MiB + 256, &p), driver_status::success);
  check(cu().cuMemsetD8(static_cast<CUdeviceptr>(p), 0x5a, 64 * MiB + 256), "cuMemsetD8");
  EXPECT_EQ(first_mismatch(p, 64 * MiB + 256, 0x5a), -1);
  EXPECT_EQ(drv->mem_free(0, p), driver_status::success);
  EXPECT_EQ(drv->call_counts().of(driver_call::mem_alloc), 1u);
  EXPECT_EQ(drv->call_counts().of(driver_call::mem_free), 1u);
}

TEST(CudaDriver, EventsFollowQueuedWork) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  gpu_test::stream_occupier busy;
  stream_t a = nullptr;
  stream_t b = nullptr;
  ASSERT_EQ(drv->stream_create(0, &a), driver_status::success);
  ASSERT_EQ(drv->stream_create(0, &b), driver_status::success);
  EXPECT_TRUE(drv->stream_on_device(a, 0));
  EXPECT_TRUE(drv->stream_on_device(nullptr, 0));
  EXPECT_FALSE(drv->stream_on_device(a, drv->device_count()));
  if (drv->device_count() > 1) {
    EXPECT_FALSE(drv->stream_on_device(a, 1));
  }

  event_t done = nullptr;
  ASSERT_EQ(drv->event_create(0, &done), driver_status::success);
  busy.occupy(reinterpret_cast<CUstream>(a), 300);
  ASSERT_EQ(drv->event_record(0, done, a), driver_status::success);
  EXPECT_EQ(drv->event_query(0, done), driver_status::not_ready) << "work queued for 300 ms (" << busy.method() << ")";
  // b waits for a's work through the event: b's own marker cannot complete before it.
  event_t b_done = nullptr;
  ASSERT_EQ(drv->event_create(0, &b_done), driver_status::success);
  ASSERT_EQ(drv->stream_wait_event(0, b, done), driver_status::success);
  ASSERT_EQ(drv->event_record(0, b_done, b), driver_status::success);
  EXPECT_EQ(drv->event_query(0, b_done), driver_status::not_ready);
  EXPECT_EQ(drv->event_synchronize(0, b_done), driver_status::success);
  EXPECT_EQ(drv->event_query(0, done), driver_status::success);
  EXPECT_EQ(drv->stream_synchronize(0, a), driver_status::success);
  EXPECT_EQ(drv->event_destroy(0, done), driver_status::success);
  EXPECT_EQ(drv->event_destroy(0, b_done), driver_status::success);
  EXPECT_EQ(drv->stream_destroy(0, a), driver_status::success);
  EXPECT_EQ(drv->stream_destroy(0, b), driver_status::success);
  EXPECT_EQ(drv->stream_destroy(0, nullptr), driver_status::invalid_value) << "the default stream";
}

TEST(CudaDriver, NvmlFigureFollowsMemCreate) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  ASSERT_EQ(drv->open_context(0), driver_status::success);
  const std::size_t before = drv->memory_info(0).process_used;
  if (before == device_memory_info::unknown_bytes) GTEST_SKIP() << "NVML absent or hides this process";
  const std::size_t bytes = GiB;
  physical_handle h = 0;
  ASSERT_EQ(drv->mem_create(0, bytes, &h), driver_status::success);
  const std::size_t held = drv->memory_info(0).process_used;
  ASSERT_EQ(drv->mem_release(0, h), driver_status::success);
  const std::size_t after = drv->memory_info(0).process_used;
  std::printf("[figure] NVML process figure: %zu -> %zu -> %zu bytes around a 1 GiB cuMemCreate\n", before, held,
              after);
  // NVML counts physical memory when it is created, mapped or not, and not a byte more.
  EXPECT_EQ(held - before, bytes);
  EXPECT_EQ(after, before);
}

TEST(CudaDriver, TrimHandsBackTheAsyncPool) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  CUmemoryPool pool = nullptr;
  check(cu().cuDeviceGetDefaultMemPool(&pool, 0), "cuDeviceGetDefaultMemPool");
  cuuint64_t keep_everything = ~cuuint64_t{0};
  check(cu().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_everything), "set threshold");
  std::vector<CUdeviceptr> parked(4);
  for (auto& p : parked) check(cu().cuMemAllocAsync(&p, GiB, nullptr), "cuMemAllocAsync");
  for (auto p : parked) check(cu().cuMemFreeAsync(p, nullptr), "cuMemFreeAsync");
  check(cu().cuCtxSynchronize(), "cuCtxSynchronize");
  const std::size_t held = drv->memory_info(0).process_used;
  const std::size_t trimmed = drv->trim_async_pools(0);
  const std::size_t after = drv->memory_info(0).process_used;
  EXPECT_GE(trimmed, 4 * GiB);
  EXPECT_EQ(drv->call_counts().of(driver_call::async_pool_trim), 1u) << "the default pool is the current one";
  if (held != device_memory_info::unknown_bytes) {
    EXPECT_EQ(held - after, trimmed) << "NVML sees exactly what the trim reports";
  }
  EXPECT_EQ(drv->trim_async_pools(0), 0u) << "nothing left to trim";
}

}  // namespace
}  // namespace tidepool
