// pool_gpu_test.cpp: tidepool::pool on a real GPU, with the process's memory read from NVML:
// live blocks never share bytes; the retention workload of DESIGN 1.1 at full scale (peak held /
// peak live <= 1.02, and after release held <= live rounded up to 2 MiB pages); release()
// returns exactly what NVML sees handed back; the pool's map and set-access times are the
// driver's measurements; no memory unmapped while queued work uses it; out of memory across pools
// (the cudaMallocAsync pool, a program's reclaim hook). Skipped where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/reclaim.hpp"

namespace tidepool {
namespace {

using gpu_test::check;
using gpu_test::cu;
using gpu_test::first_mismatch;

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;
constexpr std::size_t page = 2 * MiB;

double gib(std::size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(GiB); }

// The process's device memory by NVML; skips the test where NVML cannot tell.
#define TIDEPOOL_NVML_USED(drv, out)                                                               \
  do {                                                                                             \
    (out) = (drv)->memory_info(0).process_used;                                                    \
    if ((out) == device_memory_info::unknown_bytes) GTEST_SKIP() << "NVML absent or hides this process"; \
  } while (0)

std::size_t nvml_used(driver& drv) { return drv.memory_info(0).process_used; }

// Bytes of the 2 MiB pages that live blocks touch: "live rounded up to 2 MiB pages".
std::size_t pages_touched(const std::vector<std::pair<std::uintptr_t, std::size_t>>& blocks) {
  std::set<std::uintptr_t> pages;
  for (const auto& [address, bytes] : blocks) {
    for (std::uintptr_t p = address / page; p <= (address + bytes - 1) / page; ++p) pages.insert(p);
  }
  return pages.size() * page;
}

std::size_t async_pool_reserved();

// Fills the default cudaMallocAsync pool (release threshold raised) until at most `leave` bytes
// are free on the device, then frees it all into the pool. Returns the bytes parked there.
std::size_t park_in_async_pool(std::size_t leave) {
  CUmemoryPool pool = nullptr;
  check(cu().cuDeviceGetDefaultMemPool(&pool, 0), "cuDeviceGetDefaultMemPool");
  cuuint64_t keep = ~cuuint64_t{0};
  check(cu().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep), "release threshold");
  std::vector<CUdeviceptr> blocks;
  for (;;) {
    std::size_t free = 0;
    std::size_t total = 0;
    check(cu().cuMemGetInfo(&free, &total), "cuMemGetInfo");
    if (free < leave + 2 * GiB) break;
    CUdeviceptr p = 0;
    if (cu().cuMemAllocAsync(&p, 2 * GiB, nullptr) != CUDA_SUCCESS) break;
    blocks.push_back(p);
    check(cu().cuCtxSynchronize(), "cuCtxSynchronize");
  }
  for (CUdeviceptr p : blocks) check(cu().cuMemFreeAsync(p, nullptr), "cuMemFreeAsync");
  check(cu().cuCtxSynchronize(), "cuCtxSynchronize");
  return async_pool_reserved();
}

std::size_t async_pool_reserved() {
  CUmemoryPool pool = nullptr;
  check(cu().cuDeviceGetDefaultMemPool(&pool, 0), "cuDeviceGetDefaultMemPool");
  cuuint64_t reserved = 0;
  check(cu().cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), "reserved");
  return static_cast<std::size_t>(reserved);
}

std::size_t device_free() {
  std::size_t free = 0;
  std::size_t total = 0;
  check(cu().cuMemGetInfo(&free, &total), "cuMemGetInfo");
  return free;
}

TEST(PoolOnGpu, LiveBlocksNeverShareBytes) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  pool p(drv, 0);
  gpu_test::make_current(*drv);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(64.0 * MiB));
  struct live_block {
    void* ptr;
    std::size_t bytes;
  };
  std::vector<live_block> live;
  auto allocate_some = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const auto bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
      const lifetime hint = rng() % 4 == 0 ? lifetime::persistent : lifetime::scratch;
      void* ptr = p.allocate(bytes, nullptr, hint);
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % 256, 0u);
      live.push_back({ptr, bytes});
    }
  };
  // Rounds of allocating, freeing half at random, and allocating again, so later blocks reuse
  // freed blocks and stolen handles.
  for (int round = 0; round < 3; ++round) {
    allocate_some(200);
    std::shuffle(live.begin(), live.end(), rng);
    for (std::size_t i = live.size() / 2; i < live.size(); ++i) p.deallocate(live[i].ptr);
    live.resize(live.size() / 2);
  }
  allocate_some(200);
  // Each live block gets its own byte value, written in order; a block that shared bytes with a
  // later one would read back the later one's value.
  for (std::size_t i = 0; i < live.size(); ++i) {
    check(cu().cuMemsetD8(reinterpret_cast<CUdeviceptr>(live[i].ptr), static_cast<unsigned char>(i % 251 + 1),
                          live[i].bytes),
          "cuMemsetD8");
  }
  for (std::size_t i = 0; i < live.size(); ++i) {
    ASSERT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(live[i].ptr), live[i].bytes,
                             static_cast<std::uint8_t>(i % 251 + 1)),
              -1)
        << "block " << i << " of " << live[i].bytes << " bytes at " << live[i].ptr;
    EXPECT_EQ(p.allocation_size(live[i].ptr), live[i].bytes);
  }
  for (const auto& b : live) p.deallocate(b.ptr);
  EXPECT_EQ(p.stats().live_allocations, 0u);
}

// DESIGN 1.1's loader-shaped workload at full scale: seven inputs of 16 chunks, each chunk with
// 2.4 GB of scratch and about 76 MB kept (36 KB, 4 MB, 72 MB); then a 62-region merge keeping
// 95 MB per region; then the inputs close. Held is NVML's figure for this process minus what it
// held before the workload (the context).
TEST(PoolOnGpu, RetentionWorkloadAtFullScale) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  pool p(drv, 0);
  gpu_test::make_current(*drv);
  std::size_t baseline = 0;
  TIDEPOOL_NVML_USED(drv, baseline);

  std::size_t live = 0;
  std::size_t peak_live = 0;
  std::size_t peak_held = 0;
  std::size_t worst_mismatch = 0;  // |NVML held - pool mapped| at the sample points
  auto alloc = [&](std::size_t bytes) {
    void* ptr = p.allocate(bytes);
    live += bytes;
    peak_live = std::max(peak_live, live);
    return ptr;
  };
  auto free_block = [&](void* ptr, std::size_t bytes) {
    p.deallocate(ptr);
    live -= bytes;
  };
  auto sample = [&] {
    const std::size_t held = nvml_used(*drv) - baseline;
    peak_held = std::max(peak_held, held);
    const std::size_t mapped = p.stats().mapped_bytes;
    worst_mismatch = std::max(worst_mismatch, held > mapped ? held - mapped : mapped - held);
  };

  const std::size_t scratch = 800'000'000;  // three per chunk: 2.4 GB
  const std::size_t kept_sizes[] = {36 * 1000, 4'000'000, 72'000'000};
  std::vector<std::pair<void*, std::size_t>> inputs;
  for (int input = 0; input < 7; ++input) {
    for (int chunk = 0; chunk < 16; ++chunk) {
      void* s[3];
      for (int k = 0; k < 3; ++k) {
        s[k] = alloc(scratch);
        inputs.emplace_back(alloc(kept_sizes[k]), kept_sizes[k]);
      }
      sample();
      for (void* x : s) free_block(x, scratch);
    }
  }
  std::vector<std::pair<void*, std::size_t>> regions;
  for (int region = 0; region < 62; ++region) {
    void* s = alloc(600'000'000);
    regions.emplace_back(alloc(95'000'000), 95'000'000);
    sample();
    free_block(s, 600'000'000);
  }
  for (auto& [ptr, bytes] : inputs) free_block(ptr, bytes);
  const pool_stats before_release = p.stats();
  const std::size_t held_before_release = nvml_used(*drv) - baseline;
  const auto release_start = std::chrono::steady_clock::now();
  const std::size_t returned = p.release();
  const double release_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - release_start).count();
  const std::size_t held_after = nvml_used(*drv) - baseline;
  const driver_call_counts calls = p.stats().driver;
  std::printf("[figure] retention workload driver work: %llu memory calls (%llu mem_create) taking %.1f ms; "
              "release() took %.1f ms\n",
              static_cast<unsigned long long>(calls.memory_calls()),
              static_cast<unsigned long long>(calls.of(driver_call::mem_create)), calls.memory_us() / 1000.0, release_ms);

  std::vector<std::pair<std::uintptr_t, std::size_t>> live_blocks;
  for (auto& [ptr, bytes] : regions) live_blocks.emplace_back(reinterpret_cast<std::uintptr_t>(ptr), bytes);
  const std::size_t live_pages = pages_touched(live_blocks);
  const std::size_t peak_mapped = p.stats().peak_mapped_bytes;
  std::printf("[figure] retention workload: peak live %.2f GiB, peak held %.2f GiB by NVML (%.2f by the pool), "
              "ratio %.4f; NVML vs pool mapped differ by at most %zu bytes at %d samples\n",
              gib(peak_live), gib(peak_held), gib(peak_mapped),
              static_cast<double>(std::max(peak_held, peak_mapped)) / static_cast<double>(peak_live), worst_mismatch,
              7 * 16 + 62);
  std::printf("[figure] after close: live %.2f GiB (%.2f GiB in 2 MiB pages), held %.2f GiB before release, "
              "%.2f GiB after; release() returned %.2f GiB; pool cached before release %.2f GiB\n",
              gib(live), gib(live_pages), gib(held_before_release), gib(held_after), gib(returned),
              gib(before_release.cached_bytes));
  // release() keeps the handles live blocks touch, no more (a handle goes back whole or not at
  // all), and NVML sees exactly that. How close that comes to the live blocks' own 2 MiB pages,
  // and the peak to 1.02x live, are goals, printed here and kept in docs/RESULTS.md (section 0:
  // splitting every handle a long-lived block cuts costs first-pass driver calls).
  std::size_t live_handles = 0;
  for (const handle_description& h : p.describe().handles) {
    const bool touched = std::any_of(live_blocks.begin(), live_blocks.end(), [&](const auto& b) {
      return b.first < h.address + h.size && h.address < b.first + b.second;
    });
    if (touched) live_handles += h.size;
  }
  const double peak_ratio = static_cast<double>(std::max(peak_held, peak_mapped)) / static_cast<double>(peak_live);
  std::printf("[figure] goals: peak held / peak live %.4f <= 1.02: %s; held after release %.3f GiB <= live "
              "pages %.3f GiB: %s (the handles live blocks touch: %.3f GiB)\n",
              peak_ratio, peak_ratio <= 1.02 ? "met" : "NOT met", gib(held_after), gib(live_pages),
              held_after <= live_pages ? "met" : "NOT met", gib(live_handles));
  EXPECT_EQ(held_after, live_handles) << "release() keeps exactly the handles live blocks touch";
  EXPECT_EQ(p.stats().mapped_bytes, held_after) << "the pool's mapped bytes are what NVML sees";
  EXPECT_EQ(held_before_release - held_after, returned) << "release() reports what NVML saw handed back";
  for (auto& [ptr, bytes] : regions) free_block(ptr, bytes);
  p.release();
}

TEST(PoolOnGpu, ReleaseReturnsExactlyWhatNvmlSees) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  pool p(drv, 0);
  gpu_test::make_current(*drv);
  std::size_t start = 0;
  TIDEPOOL_NVML_USED(drv, start);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> log_size(std::log(double(KiB)), std::log(256.0 * MiB));
  std::vector<void*> blocks;
  for (int i = 0; i < 300; ++i) blocks.push_back(p.allocate(static_cast<std::size_t>(std::exp(log_size(rng)))));
  for (std::size_t i = 0; i < blocks.size(); i += 2) p.deallocate(blocks[i]);
  const std::size_t before = nvml_used(*drv);
  const std::size_t mapped_before = p.stats().mapped_bytes;
  EXPECT_EQ(before - start, mapped_before) << "NVML counts what the pool maps, and nothing else";
  const std::size_t returned = p.release();
  const std::size_t after = nvml_used(*drv);
  std::printf("[figure] release(): returned %zu bytes, NVML dropped %zu bytes\n", returned, before - after);
  EXPECT_GT(returned, 0u);
  EXPECT_EQ(before - after, returned);
  EXPECT_EQ(mapped_before - p.stats().mapped_bytes, returned);
  for (std::size_t i = 1; i < blocks.size(); i += 2) p.deallocate(blocks[i]);
  const std::size_t rest = p.release();
  EXPECT_EQ(nvml_used(*drv), start) << "everything went back: " << rest << " bytes in the second release";
}

// The pool's own driver figures for map and set access are the driver's measurements of those
// calls, each on its own (not one timing split in a fixed ratio).
TEST(PoolOnGpu, CountsMapAndSetAccessTimesAsTheDriverMeasuredThem) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  const driver_call_counts start = drv->call_counts();
  {
    pool p(drv, 0);
    std::vector<void*> blocks;
    for (std::size_t bytes : {KiB, 3 * MiB, 40 * MiB, 300 * MiB}) blocks.push_back(p.allocate(bytes));
    for (void* b : blocks) p.deallocate(b);
    p.release();
    driver_call_counts used = drv->call_counts();
    used -= start;
    const driver_call_counts mine = p.stats().driver;
    for (driver_call c : {driver_call::mem_map, driver_call::mem_set_access}) {
      SCOPED_TRACE(std::string(to_string(c)));
      EXPECT_GT(mine.of(c), 0u);
      EXPECT_EQ(mine.of(c), used.of(c)) << "this test is the driver's only user";
      EXPECT_NEAR(mine.us_of(c), used.us_of(c), 1e-6 * used.us_of(c) + 1e-3);
    }
    std::printf("[figure] pool's maps: %llu, cuMemMap %.1f us, cuMemSetAccess %.1f us in all\n",
                static_cast<unsigned long long>(mine.of(driver_call::mem_map)), mine.us_of(driver_call::mem_map),
                mine.us_of(driver_call::mem_set_access));
  }
}

// cuMemUnmap does not wait for the GPU (DESIGN 2a), so the pool must: work queued on a stream
// keeps writing into a block freed on that stream while release() and a request on another
// stream (which would steal its handles) run. The bytes it writes must land.
TEST(PoolOnGpu, NeverUnmapsMemoryQueuedWorkUses) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  gpu_test::stream_occupier busy;
  stream_t s = nullptr;
  stream_t other = nullptr;
  ASSERT_EQ(drv->stream_create(0, &s), driver_status::success);
  ASSERT_EQ(drv->stream_create(0, &other), driver_status::success);
  // The pool records events on every stream it has seen when it is destroyed, so the streams
  // must outlive it (a destroyed CUstream is freed memory to the driver): the pool lives in
  // this inner scope.
  {
    pool p(drv, 0);
    const std::size_t bytes = 256 * MiB;
    CUdeviceptr witness = 0;
    check(cu().cuMemAlloc(&witness, bytes), "cuMemAlloc");
    check(cu().cuMemsetD8(witness, 0, bytes), "cuMemsetD8");

    void* block = p.allocate(bytes, s);
    const auto cs = reinterpret_cast<CUstream>(s);
    busy.occupy(cs, 400);
    check(cu().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(block), 0x7e, bytes, cs), "cuMemsetD8Async");
    check(cu().cuMemcpyDtoDAsync(witness, reinterpret_cast<CUdeviceptr>(block), bytes, cs), "cuMemcpyDtoDAsync");
    p.deallocate(block, s);
    const bool busy_before = cu().cuStreamQuery(cs) == CUDA_ERROR_NOT_READY;
    const std::size_t returned = p.release();
    const bool busy_after_release = cu().cuStreamQuery(cs) == CUDA_ERROR_NOT_READY;
    // A request on another stream: the freed block's handles must not be unmapped under the queued work.
    void* elsewhere = p.allocate(2 * bytes, other);
    check(cu().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(elsewhere), 0x11, 2 * bytes, reinterpret_cast<CUstream>(other)),
          "cuMemsetD8Async");
    const CUresult finished = cu().cuStreamSynchronize(cs);
    ASSERT_EQ(finished, CUDA_SUCCESS) << detail::cuda_error_name(finished) << " (unmapped under queued work?)";
    check(cu().cuStreamSynchronize(reinterpret_cast<CUstream>(other)), "cuStreamSynchronize");
    std::printf("[figure] queued work (%s) busy before release: %s, after release: %s; release() returned %zu bytes\n",
                busy.method(), busy_before ? "yes" : "no", busy_after_release ? "yes" : "no", returned);
    EXPECT_TRUE(busy_before) << "the test needs the stream busy while the pool frees and releases";
    EXPECT_EQ(first_mismatch(witness, bytes, 0x7e), -1) << "the queued memset's bytes did not land";
    EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(elsewhere), 2 * bytes, 0x11), -1);
    p.deallocate(elsewhere, other);
    p.release();
    check(cu().cuMemFree(witness), "cuMemFree");
  }
  EXPECT_EQ(drv->stream_destroy(0, s), driver_status::success);
  EXPECT_EQ(drv->stream_destroy(0, other), driver_status::success);
}

TEST(PoolOnGpu, TakesMemoryParkedInTheAsyncPool) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  pool p(drv, 0);
  gpu_test::make_current(*drv);
  const std::size_t parked = park_in_async_pool(6 * GiB);
  const std::size_t free = device_free();
  const std::size_t ask = (free + 16 * GiB) / page * page;
  const auto trims_before = drv->call_counts().of(driver_call::async_pool_trim);
  void* big = p.allocate(ask);
  const std::size_t parked_after = async_pool_reserved();
  const auto trims = drv->call_counts().of(driver_call::async_pool_trim) - trims_before;
  std::printf("[figure] %.1f GiB parked in the cudaMallocAsync pool, %.1f GiB free; tidepool allocated %.1f GiB; "
              "pool trims by tidepool: %llu; out-of-memory recoveries: %llu; still parked after: %.1f GiB\n",
              gib(parked), gib(free), gib(ask), static_cast<unsigned long long>(trims),
              static_cast<unsigned long long>(p.stats().out_of_memory_recoveries), gib(parked_after));
  check(cu().cuMemsetD8(reinterpret_cast<CUdeviceptr>(big), 0x3c, ask), "cuMemsetD8");
  EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(big), 64 * MiB, 0x3c), -1);
  EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(big) + ask - 64 * MiB, 64 * MiB, 0x3c), -1);
  p.deallocate(big);
  p.release();
}

TEST(PoolOnGpu, ReclaimHookIsCalledAndItsMemoryReused) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  pool p(drv, 0);
  gpu_test::make_current(*drv);
  // A framework's cache, standing in for PyTorch's: plain allocations holding most of the device.
  std::vector<CUdeviceptr> cache;
  while (device_free() > 6 * GiB) {
    CUdeviceptr x = 0;
    if (cu().cuMemAlloc(&x, 4 * GiB) != CUDA_SUCCESS) break;
    cache.push_back(x);
  }
  int calls = 0;
  const int id = add_reclaim_hook([&](int device, std::size_t) -> std::size_t {
    ++calls;
    if (device != 0) return 0;
    std::size_t freed = 0;
    for (CUdeviceptr x : cache) {
      check(cu().cuMemFree(x), "cuMemFree");
      freed += 4 * GiB;
    }
    cache.clear();
    return freed;
  });
  const std::size_t free = device_free();
  const std::size_t ask = (free + 12 * GiB) / page * page;
  void* big = nullptr;
  EXPECT_NO_THROW(big = p.allocate(ask)) << "asked " << ask << " with " << free << " free and a hook to call";
  remove_reclaim_hook(id);
  std::printf("[figure] reclaim hook: %.1f GiB free, asked %.1f GiB; hook called %d time(s); recoveries %llu\n",
              gib(free), gib(ask), calls, static_cast<unsigned long long>(p.stats().out_of_memory_recoveries));
  EXPECT_EQ(calls, 1);
  EXPECT_GE(p.stats().out_of_memory_recoveries, 1u);
  if (big != nullptr) p.deallocate(big);
  p.release();
  for (CUdeviceptr x : cache) cu().cuMemFree(x);
}

TEST(PoolOnGpu, ReportsOutOfMemoryOnlyWhenNothingIsLeft) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  pool p(drv, 0);
  gpu_test::make_current(*drv);
  std::vector<CUdeviceptr> others;  // memory tidepool cannot reach: no hook stands for it
  while (device_free() > 6 * GiB) {
    CUdeviceptr x = 0;
    if (cu().cuMemAlloc(&x, 4 * GiB) != CUDA_SUCCESS) break;
    others.push_back(x);
  }
  const std::size_t free = device_free();
  void* small = p.allocate(GiB);
  try {
    (void)p.allocate(free + 4 * GiB);
    ADD_FAILURE() << "allocated more than the device had free";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.report().requested_bytes, free + 4 * GiB);
    EXPECT_GT(e.report().driver_free_bytes, 0u);
    EXPECT_LT(e.report().largest_possible_bytes, free + 4 * GiB);
    std::printf("[figure] out of memory report: %s\n", e.what());
  }
  // The pool is intact: what it held still works, and a fitting request succeeds.
  void* fits = p.allocate(GiB);
  check(cu().cuMemsetD8(reinterpret_cast<CUdeviceptr>(fits), 0x42, GiB), "cuMemsetD8");
  EXPECT_EQ(first_mismatch(reinterpret_cast<std::uintptr_t>(fits), 16 * MiB, 0x42), -1);
  p.deallocate(fits);
  p.deallocate(small);
  p.release();
  for (CUdeviceptr x : others) cu().cuMemFree(x);
}

// A pool call on a thread that had no current context leaves it with none: the primary context is
// pushed and popped around each driver call, never set.
TEST(PoolOnGpu, CallsLeaveAThreadWithoutAContextWithoutOne) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  pool p(drv, 0);
  std::thread([&] {
    CUcontext current = nullptr;
    check(cu().cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    ASSERT_EQ(current, nullptr) << "a new thread starts with no context";
    void* x = p.allocate(64 * MiB);
    p.deallocate(x);
    (void)p.available_bytes();
    (void)p.release();
    check(cu().cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    EXPECT_EQ(current, nullptr) << "a pool call left the primary context current";
  }).join();
}

// Streams destroyed with work still queued, then misses on another stream: the pool never names a
// destroyed stream (recording an event on one is a use after free in the driver). Half the rounds
// tell the pool (forget_stream) and free a block of the stream after its destruction.
TEST(PoolOnGpu, MissesAfterStreamsWithQueuedWorkWereDestroyed) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  gpu_test::stream_occupier occupier;
  pool p(drv, 0);
  stream_t other = nullptr;
  ASSERT_EQ(drv->stream_create(0, &other), driver_status::success);
  for (int round = 0; round < 20; ++round) {
    stream_t s = nullptr;
    ASSERT_EQ(drv->stream_create(0, &s), driver_status::success);
    void* x = p.allocate(8 * MiB, s);
    void* kept = p.allocate(4 * MiB, s);
    occupier.occupy(reinterpret_cast<CUstream>(s), 20);
    p.deallocate(x, s);
    const bool told = round % 2 == 0;
    if (!told) p.deallocate(kept, s);
    ASSERT_EQ(drv->stream_destroy(0, s), driver_status::success);
    if (told) {
      p.forget_stream(s);
      p.deallocate(kept, s);  // a garbage collector freeing after the destruction
    }
    void* big = p.allocate(static_cast<std::size_t>(64 + round) * MiB, other);  // a miss
    p.deallocate(big, other);
  }
  check(cu().cuCtxSynchronize(), "cuCtxSynchronize");
  EXPECT_EQ(p.stats().live_allocations, 0u);
  EXPECT_GT(p.release(), 0u);  // a device-wide wait: frees no event covered become safe too
  EXPECT_LE(p.stats().streams, 2u) << "the destroyed streams' slots were recycled";
  EXPECT_EQ(drv->stream_destroy(0, other), driver_status::success);
}

// CU_STREAM_PER_THREAD is each thread's own stream: a block freed there by one thread, with its
// work still running, does not go to another thread's per-thread stream.
TEST(PoolOnGpu, PerThreadDefaultStreamsAreDistinct) {
  TIDEPOOL_REQUIRE_GPU();
  auto drv = make_cuda_driver();
  gpu_test::make_current(*drv);
  gpu_test::stream_occupier occupier;  // outlives the work it queues
  pool p(drv, 0);
  const auto per_thread = reinterpret_cast<stream_t>(CU_STREAM_PER_THREAD);
  void* first = nullptr;
  std::thread([&] {
    gpu_test::make_current(*drv);
    first = p.allocate(2 * MiB, per_thread);
    occupier.occupy(CU_STREAM_PER_THREAD, 300);
    p.deallocate(first, per_thread);
  }).join();
  void* second = nullptr;
  std::thread([&] {
    second = p.allocate(2 * MiB, per_thread);
    p.deallocate(second, per_thread);
  }).join();
  EXPECT_NE(second, first) << "another thread's per-thread stream got a block still in use";
  check(cu().cuCtxSynchronize(), "cuCtxSynchronize");
}

}  // namespace
}  // namespace tidepool
