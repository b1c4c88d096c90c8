// vmm_calls_bench.cpp: what the CUDA virtual memory calls cost on this GPU (DESIGN 2a), and what
// the choice of handle size and release policy needs beyond it:
//   1. microseconds per cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease for
//      handles of 2, 20, 64, 512 MiB and 2 GiB;
//   2. one cuMemSetAccess over many mapped handles against one call per handle;
//   3. many live handles (does the cost per call grow with the number held?);
//   4. mixed sizes held at once;
//   5. the calls while another stream is busy (a long kernel, then long memsets): which wait;
//   6. growing by 10 GiB in handles of each size;
//   7. memory parked in the cudaMallocAsync pool: does cuMemCreate (and cuMemAlloc) take it back
//      by itself when the device is otherwise full?
//   8. does access survive cuMemUnmap + cuMemMap of a new handle at the same address (could a
//      handle split skip cuMemSetAccess for its pieces)?
//   9. the calls of one thread while another creates and releases handles (could a helper thread
//      take the driver calls off the allocating thread?);
//  10. one handle mapped at several addresses at once (aliases): do writes through one show
//      through the other, what a further mapping costs, whether the calls slow down with tens of
//      thousands of mappings in place, and whether kernels run as fast through an alias
//      (bench/analysis/best_fit_models.py's `alias` model asks this of the driver);
//  11. handles made exportable as POSIX file descriptors (what memory shared with another process
//      needs): do the calls cost more than for plain handles, and what an export and an import
//      of one cost (the import here is this process's own, which maps the same bytes);
//  12. part of a handle: does cuMemMap take a non-zero offset into a handle, or a size smaller
//      than the handle, and does cuMemUnmap take part of a mapping? (The pool could then give the
//      free granules of a handle that a live block pins to a request near the device's capacity,
//      docs/RESULTS.md, section 0, "Near the device's capacity"; CUDA 13's header says the offset
//      must be zero today.)
// Prints tables; exits 0 with a note where no GPU is present. Arguments, if any, are the numbers of
// the sections to run (`tidepool_vmm_calls_bench 10`); none runs every section.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_support.hpp"

namespace {

using tidepool::gpu_test::check;
using tidepool::gpu_test::cu;
using tidepool::detail::pinned_on;
using tidepool::detail::read_write_on;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

double us_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

template <class Call>
double timed_us(Call&& call) {
  const auto start = clock_type::now();
  call();
  return us_since(start);
}

struct summary {
  double median = 0;
  double mean = 0;
};

summary summarize(std::vector<double> v) {
  summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = v[v.size() / 2];
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

// Handles of one size, created and mapped back to back in one reserved range, each call timed.
struct handle_set {
  std::size_t size = 0;
  CUdeviceptr base = 0;
  std::vector<CUmemGenericAllocationHandle> handles;
  std::vector<double> create_us, map_us, access_us, unmap_us, release_us;

  bool exportable = false;  // section 11: made with POSIX file-descriptor handles requested

  handle_set(std::size_t handle_size, std::size_t count) : size(handle_size) {
    // Aligned to the granularity only: cuMemAddressReserve refuses an alignment that is not a
    // power of two (20 MiB), and mapping needs no more.
    check(cu().cuMemAddressReserve(&base, handle_size * count, 2 * MiB, 0, 0), "cuMemAddressReserve");
    handles.resize(count);
  }
  void create_and_map(std::size_t i) {
    CUmemAllocationProp prop = pinned_on(0);
    if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    const CUmemAccessDesc access = read_write_on(0);
    const CUdeviceptr at = base + i * size;
    create_us.push_back(timed_us([&] { check(cu().cuMemCreate(&handles[i], size, &prop, 0), "cuMemCreate"); }));
    map_us.push_back(timed_us([&] { check(cu().cuMemMap(at, size, 0, handles[i], 0), "cuMemMap"); }));
    access_us.push_back(timed_us([&] { check(cu().cuMemSetAccess(at, size, &access, 1), "cuMemSetAccess"); }));
  }
  void unmap_and_release(std::size_t i) {
    const CUdeviceptr at = base + i * size;
    unmap_us.push_back(timed_us([&] { check(cu().cuMemUnmap(at, size), "cuMemUnmap"); }));
    release_us.push_back(timed_us([&] { check(cu().cuMemRelease(handles[i]), "cuMemRelease"); }));
  }
  void free_range() { check(cu().cuMemAddressFree(base, size * handles.size()), "cuMemAddressFree"); }
};

void print_row(const std::string& label, const handle_set& s, bool use_median) {
  auto pick = [&](const std::vector<double>& v) {
    const summary x = summarize(v);
    return use_median ? x.median : x.mean;
  };
  std::printf("| %-10s | %9.1f | %7.1f | %14.1f | %10.1f | %12.1f |\n", label.c_str(), pick(s.create_us),
              pick(s.map_us), pick(s.access_us), pick(s.unmap_us), pick(s.release_us));
}

void per_size_costs() {
  std::printf("\n## 1. Microseconds per call by handle size (median; mean in the second table)\n\n");
  struct row {
    std::size_t size;
    std::size_t count;
    const char* label;
  };
  const row rows[] = {{2 * MiB, 200, "2 MiB"}, {20 * MiB, 200, "20 MiB"}, {64 * MiB, 200, "64 MiB"},
                      {512 * MiB, 20, "512 MiB"}, {2 * GiB, 20, "2 GiB"}};
  std::vector<handle_set> sets;
  for (const row& r : rows) {
    handle_set s(r.size, r.count);
    for (std::size_t i = 0; i < r.count; ++i) s.create_and_map(i);
    for (std::size_t i = 0; i < r.count; ++i) s.unmap_and_release(i);
    s.free_range();
    sets.push_back(std::move(s));
  }
  for (bool median : {true, false}) {
    std::printf("| handle     | cuMemCreate | cuMemMap | cuMemSetAccess | cuMemUnmap | cuMemRelease |  (%s, %s)\n",
                median ? "median" : "mean", "us");
    std::printf("|---|---|---|---|---|---|\n");
    for (std::size_t k = 0; k < sets.size(); ++k) {
      print_row(std::string(rows[k].label) + " x" + std::to_string(rows[k].count), sets[k], median);
    }
    std::printf("\n");
  }
}

void one_set_access_over_many() {
  std::printf("## 2. cuMemSetAccess: one call over 200 mapped 2 MiB handles vs one call per handle\n\n");
  const std::size_t count = 200;
  handle_set s(2 * MiB, count);
  const CUmemAllocationProp prop = pinned_on(0);
  for (std::size_t i = 0; i < count; ++i) {
    check(cu().cuMemCreate(&s.handles[i], s.size, &prop, 0), "cuMemCreate");
    check(cu().cuMemMap(s.base + i * s.size, s.size, 0, s.handles[i], 0), "cuMemMap");
  }
  const CUmemAccessDesc access = read_write_on(0);
  const double one_call = timed_us([&] { check(cu().cuMemSetAccess(s.base, s.size * count, &access, 1), "cuMemSetAccess"); });
  const double per_handle = timed_us([&] {
    for (std::size_t i = 0; i < count; ++i) check(cu().cuMemSetAccess(s.base + i * s.size, s.size, &access, 1), "cuMemSetAccess");
  });
  std::printf("one call over 400 MiB: %.0f us; 200 calls: %.0f us (%.1f us each)\n\n", one_call, per_handle,
              per_handle / count);
  // Unmapping the whole range at once, likewise.
  const double one_unmap = timed_us([&] { check(cu().cuMemUnmap(s.base, s.size * count), "cuMemUnmap"); });
  std::printf("one cuMemUnmap over the 200 handles: %.0f us\n\n", one_unmap);
  for (auto h : s.handles) check(cu().cuMemRelease(h), "cuMemRelease");
  s.free_range();
}

void many_handles() {
  std::printf("## 3. Many live handles: 8000 x 2 MiB (16 GiB), mean us per call by batch of 1000\n\n");
  const std::size_t count = 8000;
  const std::size_t batch = 1000;
  handle_set s(2 * MiB, count);
  for (std::size_t i = 0; i < count; ++i) s.create_and_map(i);
  // Release in a shuffled order, as a pool hands back scattered free handles.
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  for (std::size_t i : order) s.unmap_and_release(i);
  std::printf("| live handles before the batch | cuMemCreate | cuMemMap | cuMemSetAccess | cuMemUnmap (shuffled) | cuMemRelease |\n");
  std::printf("|---|---|---|---|---|---|\n");
  auto mean = [](const std::vector<double>& v, std::size_t from, std::size_t n) {
    return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(from + n), 0.0) /
           static_cast<double>(n);
  };
  for (std::size_t b = 0; b < count / batch; ++b) {
    std::printf("| %zu (create) / %zu (release) | %.1f | %.1f | %.1f | %.1f | %.1f |\n", b * batch, count - b * batch,
                mean(s.create_us, b * batch, batch), mean(s.map_us, b * batch, batch), mean(s.access_us, b * batch, batch),
                mean(s.unmap_us, b * batch, batch), mean(s.release_us, b * batch, batch));
  }
  s.free_range();
  std::printf("\n");
}

void mixed_sizes() {
  std::printf("## 4. Mixed sizes held at once: 600 handles of 2, 20 and 64 MiB in random order\n\n");
  const std::size_t sizes[] = {2 * MiB, 20 * MiB, 64 * MiB};
  std::mt19937_64 rng(7);
  std::vector<std::size_t> kinds(600);
  for (auto& k : kinds) k = rng() % 3;
  std::size_t range = 0;
  for (auto k : kinds) range += sizes[k];
  CUdeviceptr base = 0;
  check(cu().cuMemAddressReserve(&base, range, 2 * MiB, 0, 0), "cuMemAddressReserve");
  std::vector<std::vector<double>> create(3), map(3), access(3), unmap(3), release(3);
  std::vector<CUmemGenericAllocationHandle> handles(kinds.size());
  std::vector<CUdeviceptr> where(kinds.size());
  const CUmemAccessDesc rw = read_write_on(0);
  CUdeviceptr at = base;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    const std::size_t k = kinds[i];
    const CUmemAllocationProp prop = pinned_on(0);
    where[i] = at;
    create[k].push_back(timed_us([&] { check(cu().cuMemCreate(&handles[i], sizes[k], &prop, 0), "cuMemCreate"); }));
    map[k].push_back(timed_us([&] { check(cu().cuMemMap(at, sizes[k], 0, handles[i], 0), "cuMemMap"); }));
    access[k].push_back(timed_us([&] { check(cu().cuMemSetAccess(at, sizes[k], &rw, 1), "cuMemSetAccess"); }));
    at += sizes[k];
  }
  for (std::size_t i = kinds.size(); i-- > 0;) {
    const std::size_t k = kinds[i];
    unmap[k].push_back(timed_us([&] { check(cu().cuMemUnmap(where[i], sizes[k]), "cuMemUnmap"); }));
    release[k].push_back(timed_us([&] { check(cu().cuMemRelease(handles[i]), "cuMemRelease"); }));
  }
  check(cu().cuMemAddressFree(base, range), "cuMemAddressFree");
  std::printf("| handle | count | cuMemCreate | cuMemMap | cuMemSetAccess | cuMemUnmap | cuMemRelease | (median us)\n|---|---|---|---|---|---|---|\n");
  const char* labels[] = {"2 MiB", "20 MiB", "64 MiB"};
  for (std::size_t k = 0; k < 3; ++k) {
    std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f | %.1f |\n", labels[k], create[k].size(), summarize(create[k]).median,
                summarize(map[k]).median, summarize(access[k]).median, summarize(unmap[k]).median,
                summarize(release[k]).median);
  }
  std::printf("\n");
}

void calls_while_busy(tidepool::gpu_test::stream_occupier& occupier, const char* how, bool use_memset) {
  CUstream busy = nullptr;
  check(cu().cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const CUmemAllocationProp prop = pinned_on(0);
  const CUmemAccessDesc rw = read_write_on(0);
  CUdeviceptr range = 0;
  check(cu().cuMemAddressReserve(&range, 64 * MiB, 2 * MiB, 0, 0), "cuMemAddressReserve");
  CUdeviceptr plain = 0;
  check(cu().cuMemAlloc(&plain, 64 * MiB), "cuMemAlloc");
  CUdeviceptr big = 0;
  const std::size_t big_bytes = 32 * GiB;
  if (use_memset) check(cu().cuMemAlloc(&big, big_bytes), "cuMemAlloc (memset target)");
  check(cu().cuCtxSynchronize(), "sync");

  const auto queued = clock_type::now();
  if (use_memset) {
    for (int i = 0; i < 12; ++i) check(cu().cuMemsetD8Async(big, static_cast<unsigned char>(i), big_bytes, busy), "memset");
  } else {
    occupier.occupy(busy, 200);
  }
  CUmemGenericAllocationHandle h = 0;
  const double create = timed_us([&] { check(cu().cuMemCreate(&h, 64 * MiB, &prop, 0), "cuMemCreate"); });
  const double map = timed_us([&] { check(cu().cuMemMap(range, 64 * MiB, 0, h, 0), "cuMemMap"); });
  const double access = timed_us([&] { check(cu().cuMemSetAccess(range, 64 * MiB, &rw, 1), "cuMemSetAccess"); });
  const double unmap = timed_us([&] { check(cu().cuMemUnmap(range, 64 * MiB), "cuMemUnmap"); });
  const double release = timed_us([&] { check(cu().cuMemRelease(h), "cuMemRelease"); });
  const bool still_busy = cu().cuStreamQuery(busy) == CUDA_ERROR_NOT_READY;
  CUdeviceptr fresh = 0;
  const double alloc = timed_us([&] { check(cu().cuMemAlloc(&fresh, 64 * MiB), "cuMemAlloc"); });
  const double free_plain = timed_us([&] { check(cu().cuMemFree(plain), "cuMemFree"); });
  const double busy_ms = us_since(queued) / 1000.0;
  check(cu().cuStreamSynchronize(busy), "cuStreamSynchronize");
  const double total_ms = us_since(queued) / 1000.0;
  std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %.1f | %.0f (%.0f ms after queueing; work took %.0f ms) |\n", how,
              create, map, access, unmap, release, still_busy ? "yes" : "no", alloc, free_plain * 1.0, busy_ms, total_ms);
  check(cu().cuMemFree(fresh), "cuMemFree");
  if (big != 0) check(cu().cuMemFree(big), "cuMemFree");
  check(cu().cuMemAddressFree(range, 64 * MiB), "cuMemAddressFree");
  check(cu().cuStreamDestroy(busy), "cuStreamDestroy");
}

void growth_cost() {
  std::printf("## 6. Growing by 10 GiB (create + map + set access), then giving it all back (unmap + release)\n\n");
  std::printf("| handle | handles | grow ms | give back ms |\n|---|---|---|---|\n");
  for (std::size_t size : {2 * MiB, 20 * MiB, 64 * MiB, 512 * MiB, 2 * GiB}) {
    const std::size_t count = 10 * GiB / size;
    handle_set s(size, count);
    const double grow = timed_us([&] { for (std::size_t i = 0; i < count; ++i) s.create_and_map(i); });
    const double shrink = timed_us([&] { for (std::size_t i = 0; i < count; ++i) s.unmap_and_release(i); });
    s.free_range();
    std::printf("| %zu MiB | %zu | %.1f | %.1f |\n", size / MiB, count, grow / 1000.0, shrink / 1000.0);
  }
  std::printf("\n");
}

std::size_t free_bytes() {
  std::size_t free = 0;
  std::size_t total = 0;
  check(cu().cuMemGetInfo(&free, &total), "cuMemGetInfo");
  return free;
}

cuuint64_t reserved_in(CUmemoryPool pool) {
  cuuint64_t reserved = 0;
  check(cu().cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), "pool reserved");
  return reserved;
}

// Fills the default async pool (threshold raised) until `leave` bytes are free, frees it all
// into the pool, and returns the bytes parked there.
std::size_t park_in_async_pool(CUmemoryPool pool, std::size_t leave) {
  cuuint64_t keep = ~cuuint64_t{0};
  check(cu().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep), "threshold");
  std::vector<CUdeviceptr> blocks;
  while (free_bytes() > leave + 2 * GiB) {
    CUdeviceptr p = 0;
    if (cu().cuMemAllocAsync(&p, 2 * GiB, nullptr) != CUDA_SUCCESS) break;
    blocks.push_back(p);
    check(cu().cuCtxSynchronize(), "sync");
  }
  for (auto p : blocks) check(cu().cuMemFreeAsync(p, nullptr), "cuMemFreeAsync");
  check(cu().cuCtxSynchronize(), "sync");
  return static_cast<std::size_t>(reserved_in(pool));
}

void async_pool_reclaim() {
  std::printf("## 7. Memory parked in the cudaMallocAsync pool (release threshold raised): who takes it back?\n\n");
  CUmemoryPool pool = nullptr;
  check(cu().cuDeviceGetDefaultMemPool(&pool, 0), "cuDeviceGetDefaultMemPool");

  // cuMemCreate, 2 GiB handles, until it fails or has taken 24 GiB more than cuMemGetInfo reported free.
  {
    const std::size_t parked = park_in_async_pool(pool, 8 * GiB);
    const std::size_t free_before = free_bytes();
    const CUmemAllocationProp prop = pinned_on(0);
    std::vector<CUmemGenericAllocationHandle> handles;
    CUresult last = CUDA_SUCCESS;
    std::size_t taken = 0;
    double slowest_us = 0;
    while (taken < free_before + 24 * GiB) {
      CUmemGenericAllocationHandle h = 0;
      const auto start = clock_type::now();
      last = cu().cuMemCreate(&h, 2 * GiB, &prop, 0);
      slowest_us = std::max(slowest_us, us_since(start));
      if (last != CUDA_SUCCESS) break;
      handles.push_back(h);
      taken += 2 * GiB;
    }
    const std::size_t parked_after = static_cast<std::size_t>(reserved_in(pool));
    std::printf("cuMemCreate: %.1f GiB parked in the pool, %.1f GiB free by cuMemGetInfo; created %.1f GiB in 2 GiB handles "
                "(last result %s, slowest call %.0f us); pool reserved afterwards %.1f GiB\n",
                static_cast<double>(parked) / GiB, static_cast<double>(free_before) / GiB, static_cast<double>(taken) / GiB,
                tidepool::detail::cuda_error_name(last).c_str(), slowest_us, static_cast<double>(parked_after) / GiB);
    for (auto h : handles) check(cu().cuMemRelease(h), "cuMemRelease");
    cu().cuMemPoolTrimTo(pool, 0);
  }
  // The same with plain cuMemAlloc of one large block.
  {
    const std::size_t parked = park_in_async_pool(pool, 8 * GiB);
    const std::size_t free_before = free_bytes();
    const std::size_t ask = free_before + 24 * GiB;
    CUdeviceptr p = 0;
    const auto start = clock_type::now();
    const CUresult result = cu().cuMemAlloc(&p, ask);
    const double took = us_since(start);
    const std::size_t parked_after = static_cast<std::size_t>(reserved_in(pool));
    std::printf("cuMemAlloc: %.1f GiB parked, %.1f GiB free; one cuMemAlloc of %.1f GiB -> %s in %.0f us; pool reserved "
                "afterwards %.1f GiB\n",
                static_cast<double>(parked) / GiB, static_cast<double>(free_before) / GiB, static_cast<double>(ask) / GiB,
                tidepool::detail::cuda_error_name(result).c_str(), took, static_cast<double>(parked_after) / GiB);
    if (result == CUDA_SUCCESS) check(cu().cuMemFree(p), "cuMemFree");
    cu().cuMemPoolTrimTo(pool, 0);
  }
  std::printf("\n");
}

void access_after_remap() {
  std::printf("## 8. Access after cuMemUnmap + cuMemMap of a new handle at the same address\n\n");
  const CUmemAllocationProp prop = pinned_on(0);
  const CUmemAccessDesc access = read_write_on(0);
  CUdeviceptr at = 0;
  check(cu().cuMemAddressReserve(&at, 64 * MiB, 2 * MiB, 0, 0), "cuMemAddressReserve");
  CUmemGenericAllocationHandle first = 0;
  check(cu().cuMemCreate(&first, 64 * MiB, &prop, 0), "cuMemCreate");
  check(cu().cuMemMap(at, 64 * MiB, 0, first, 0), "cuMemMap");
  check(cu().cuMemSetAccess(at, 64 * MiB, &access, 1), "cuMemSetAccess");
  check(cu().cuMemsetD8(at, 1, 64 * MiB), "cuMemsetD8");
  check(cu().cuCtxSynchronize(), "sync");
  check(cu().cuMemUnmap(at, 64 * MiB), "cuMemUnmap");
  check(cu().cuMemRelease(first), "cuMemRelease");
  CUmemGenericAllocationHandle piece = 0;
  check(cu().cuMemCreate(&piece, 2 * MiB, &prop, 0), "cuMemCreate");
  check(cu().cuMemMap(at, 2 * MiB, 0, piece, 0), "cuMemMap");
  // The driver refuses the memset up front when the range has no access (no fault, no sticky error).
  const CUresult without = cu().cuMemsetD8(at, 2, 2 * MiB);
  check(cu().cuCtxSynchronize(), "sync");
  check(cu().cuMemSetAccess(at, 2 * MiB, &access, 1), "cuMemSetAccess");
  const CUresult with = cu().cuMemsetD8(at, 2, 2 * MiB);
  check(cu().cuCtxSynchronize(), "sync");
  std::printf("a new handle mapped where an accessible one was: memset without cuMemSetAccess: %s; after it: %s\n\n",
              without == CUDA_SUCCESS ? "succeeded (access survived)" : "refused (access does not survive)",
              with == CUDA_SUCCESS ? "succeeded" : "refused");
  check(cu().cuMemUnmap(at, 2 * MiB), "cuMemUnmap");
  check(cu().cuMemRelease(piece), "cuMemRelease");
  check(cu().cuMemAddressFree(at, 64 * MiB), "cuMemAddressFree");
}

// Mean microseconds of map + set access, and of unmap, over 500 pre-created 2 MiB handles.
std::pair<double, double> map_and_unmap_500() {
  const std::size_t count = 500;
  handle_set s(2 * MiB, count);
  const CUmemAllocationProp prop = pinned_on(0);
  const CUmemAccessDesc access = read_write_on(0);
  for (auto& h : s.handles) check(cu().cuMemCreate(&h, s.size, &prop, 0), "cuMemCreate");
  const double map = timed_us([&] {
    for (std::size_t i = 0; i < count; ++i) {
      check(cu().cuMemMap(s.base + i * s.size, s.size, 0, s.handles[i], 0), "cuMemMap");
      check(cu().cuMemSetAccess(s.base + i * s.size, s.size, &access, 1), "cuMemSetAccess");
    }
  });
  const double unmap = timed_us([&] {
    for (std::size_t i = 0; i < count; ++i) check(cu().cuMemUnmap(s.base + i * s.size, s.size), "cuMemUnmap");
  });
  for (auto h : s.handles) check(cu().cuMemRelease(h), "cuMemRelease");
  s.free_range();
  return {map / count, unmap / count};
}

void calls_beside_a_helper_thread() {
  std::printf("## 9. One thread's cuMemMap + cuMemSetAccess and cuMemUnmap (2 MiB, mean us over 500) while another\n"
              "##    thread creates and releases 64 MiB handles (back to back, or one pair a millisecond)\n\n");
  std::printf("| the other thread | map + set access | unmap | its create + release pairs |\n|---|---|---|---|\n");
  for (int pause_us : {-1, 0, 1000}) {  // -1: no other thread
    std::atomic<bool> stop{false};
    std::atomic<long> pairs{0};
    // Joined however the loop below ends (a failed call throws).
    struct joined_thread {
      std::atomic<bool>& stop;
      std::thread thread;
      ~joined_thread() {
        stop = true;
        if (thread.joinable()) thread.join();
      }
    } helper{stop, {}};
    CUcontext context = nullptr;
    check(cu().cuCtxGetCurrent(&context), "cuCtxGetCurrent");
    if (pause_us >= 0) {
      helper.thread = std::thread([&] {
        if (cu().cuCtxSetCurrent(context) != CUDA_SUCCESS) return;
        const CUmemAllocationProp prop = pinned_on(0);
        while (!stop.load()) {
          CUmemGenericAllocationHandle h = 0;
          if (cu().cuMemCreate(&h, 64 * MiB, &prop, 0) == CUDA_SUCCESS) {
            (void)cu().cuMemRelease(h);
            pairs.fetch_add(1);
          }
          if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
        }
      });
    }
    for (int rep = 0; rep < 3; ++rep) {
      const auto start_pairs = pairs.load();
      const auto [map, unmap] = map_and_unmap_500();
      std::printf("| %s | %.1f | %.1f | %ld |\n",
                  pause_us < 0 ? "none" : pause_us == 0 ? "back to back" : "one pair a ms", map, unmap,
                  pairs.load() - start_pairs);
    }
  }
  std::printf("\n");
}

// Microseconds to memset `bytes` at `at` (one memset, synchronized), the median of 5.
double memset_us(CUdeviceptr at, std::size_t bytes) {
  std::vector<double> v;
  for (int i = 0; i < 5; ++i) {
    v.push_back(timed_us([&] {
      check(cu().cuMemsetD8(at, static_cast<unsigned char>(i), bytes), "cuMemsetD8");
      check(cu().cuCtxSynchronize(), "sync");
    }));
  }
  return summarize(v).median;
}

void aliases() {
  std::printf("## 10. One handle mapped at several addresses at once (aliases)\n\n");
  const CUmemAllocationProp prop = pinned_on(0);
  const CUmemAccessDesc access = read_write_on(0);
  auto map = [&](CUdeviceptr at, std::size_t size, CUmemGenericAllocationHandle h) {
    check(cu().cuMemMap(at, size, 0, h, 0), "cuMemMap");
    check(cu().cuMemSetAccess(at, size, &access, 1), "cuMemSetAccess");
  };
  {
    // Bytes: written through one mapping, read through the other, both ways.
    const std::size_t size = 32 * MiB;
    CUdeviceptr base = 0;
    check(cu().cuMemAddressReserve(&base, 2 * size, 2 * MiB, 0, 0), "cuMemAddressReserve");
    CUmemGenericAllocationHandle h = 0;
    check(cu().cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
    map(base, size, h);
    map(base + size, size, h);
    check(cu().cuMemsetD8(base, 0x5a, size), "cuMemsetD8");
    check(cu().cuCtxSynchronize(), "sync");
    const std::int64_t second = tidepool::gpu_test::first_mismatch(base + size, size, 0x5a);
    check(cu().cuMemsetD8(base + size, 0x33, size), "cuMemsetD8");
    check(cu().cuCtxSynchronize(), "sync");
    const std::int64_t first = tidepool::gpu_test::first_mismatch(base, size, 0x33);
    // Unmapping one mapping leaves the other usable.
    check(cu().cuMemUnmap(base, size), "cuMemUnmap");
    check(cu().cuMemsetD8(base + size, 0x11, size), "cuMemsetD8");
    check(cu().cuCtxSynchronize(), "sync");
    const std::int64_t after_unmap = tidepool::gpu_test::first_mismatch(base + size, size, 0x11);
    std::printf("a 32 MiB handle at two addresses: written through the first, read through the second: %s; "
                "the other way: %s; the first unmapped, the second still %s\n\n",
                second < 0 ? "same bytes" : "DIFFERENT", first < 0 ? "same bytes" : "DIFFERENT",
                after_unmap < 0 ? "reads and writes" : "FAILS");
    check(cu().cuMemUnmap(base + size, size), "cuMemUnmap");
    check(cu().cuMemRelease(h), "cuMemRelease");
    check(cu().cuMemAddressFree(base, 2 * size), "cuMemAddressFree");
  }
  {
    // What a further mapping of a mapped handle costs, by size, against its first mapping.
    std::printf("| handle | first cuMemMap + cuMemSetAccess | a second mapping | a third | cuMemUnmap of an alias | "
                "memset of it, first mapping (us) | through an alias |\n|---|---|---|---|---|---|---|\n");
    for (std::size_t size : {2 * MiB, 32 * MiB, 64 * MiB, 1 * GiB}) {
      const std::size_t count = size >= GiB ? 4 : 64;
      CUdeviceptr base = 0;
      check(cu().cuMemAddressReserve(&base, 3 * size * count, 2 * MiB, 0, 0), "cuMemAddressReserve");
      std::vector<CUmemGenericAllocationHandle> hs(count);
      for (auto& h : hs) check(cu().cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
      std::vector<double> times[4];
      for (int copy = 0; copy < 3; ++copy) {
        for (std::size_t i = 0; i < count; ++i) {
          times[copy].push_back(timed_us([&] { map(base + (copy * count + i) * size, size, hs[i]); }));
        }
      }
      const double first_memset = memset_us(base, size);
      const double alias_memset = memset_us(base + count * size, size);
      for (int copy = 2; copy >= 0; --copy) {
        for (std::size_t i = 0; i < count; ++i) {
          const CUdeviceptr at = base + (copy * count + i) * size;
          const double t = timed_us([&] { check(cu().cuMemUnmap(at, size), "cuMemUnmap"); });
          if (copy > 0) times[3].push_back(t);
        }
      }
      for (auto h : hs) check(cu().cuMemRelease(h), "cuMemRelease");
      check(cu().cuMemAddressFree(base, 3 * size * count), "cuMemAddressFree");
      std::printf("| %zu MiB | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", size / MiB, summarize(times[0]).median,
                  summarize(times[1]).median, summarize(times[2]).median, summarize(times[3]).median, first_memset,
                  alias_memset);
    }
    std::printf("\n");
  }
  {
    // Many mappings in place: 256 handles of 2 MiB, each mapped 100 times (25,600 mappings); the
    // mean map + set access of each batch of 2,560 as the count grows, then the unmaps, and a new
    // handle's create + map with none and with all of them in place.
    const std::size_t size = 2 * MiB;
    const std::size_t handles = 256;
    const std::size_t copies = 100;
    CUdeviceptr base = 0;
    check(cu().cuMemAddressReserve(&base, size * handles * copies, 2 * MiB, 0, 0), "cuMemAddressReserve");
    // A new handle made and mapped beside them (the median of 20, each unmapped and released after).
    auto new_handle_us = [&] {
      std::vector<double> v;
      CUdeviceptr at = 0;
      check(cu().cuMemAddressReserve(&at, size, 2 * MiB, 0, 0), "cuMemAddressReserve");
      for (int i = 0; i < 20; ++i) {
        CUmemGenericAllocationHandle h = 0;
        v.push_back(timed_us([&] {
          check(cu().cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
          map(at, size, h);
        }));
        check(cu().cuMemUnmap(at, size), "cuMemUnmap");
        check(cu().cuMemRelease(h), "cuMemRelease");
      }
      check(cu().cuMemAddressFree(at, size), "cuMemAddressFree");
      return summarize(v).median;
    };
    const double with_none = new_handle_us();
    std::vector<CUmemGenericAllocationHandle> hs(handles);
    for (auto& h : hs) check(cu().cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
    std::printf("mappings in place before the batch -> mean us of map + set access (2 MiB aliases, batches of %zu):",
                handles * 10);
    for (std::size_t batch = 0; batch < copies / 10; ++batch) {
      const double t = timed_us([&] {
        for (std::size_t copy = batch * 10; copy < batch * 10 + 10; ++copy) {
          for (std::size_t i = 0; i < handles; ++i) map(base + (copy * handles + i) * size, size, hs[i]);
        }
      });
      std::printf(" %zu -> %.1f;", batch * 10 * handles, t / static_cast<double>(handles * 10));
    }
    const double with_many = new_handle_us();
    const double memset_alias = memset_us(base + (copies - 1) * handles * size, size * handles);
    const double unmap = timed_us([&] {
      for (std::size_t m = 0; m < handles * copies; ++m) check(cu().cuMemUnmap(base + m * size, size), "cuMemUnmap");
    });
    std::printf("\na new 2 MiB handle's create + map + set access (median of 20): %.1f us with no mappings in place, "
                "%.1f us with %zu; a memset of the last 512 MiB of aliases %.1f us; then unmapping them all: %.1f us "
                "each\n\n",
                with_none, with_many, handles * copies, memset_alias, unmap / static_cast<double>(handles * copies));
    for (auto h : hs) check(cu().cuMemRelease(h), "cuMemRelease");
    check(cu().cuMemAddressFree(base, size * handles * copies), "cuMemAddressFree");
  }
}

}  // namespace

void exportable_handles() {
  std::printf("## 11. Handles made exportable (POSIX file descriptors) against plain ones\n\n");
  std::printf("Medians over 5 interleaved rounds of 100 handles each (us):\n\n");
  std::printf("| handle     | cuMemCreate | cuMemMap | cuMemSetAccess | cuMemUnmap | cuMemRelease |  kind\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const std::size_t size : {2 * MiB, 24 * MiB}) {
    handle_set plain(size, 500);
    handle_set exportable(size, 500);
    exportable.exportable = true;
    for (std::size_t round = 0; round < 5; ++round) {
      for (handle_set* s : {&plain, &exportable}) {
        for (std::size_t i = round * 100; i < (round + 1) * 100; ++i) s->create_and_map(i);
        for (std::size_t i = round * 100; i < (round + 1) * 100; ++i) s->unmap_and_release(i);
      }
    }
    for (handle_set* s : {&plain, &exportable}) {
      print_row(std::to_string(size / MiB) + " MiB x500", *s, true);
      std::printf("  %s\n", s->exportable ? "exportable" : "plain");
      s->free_range();
    }
  }
  // One export and one import (this process's own), timed, and the bytes seen through both.
  const std::size_t size = 24 * MiB;
  CUmemAllocationProp prop = pinned_on(0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  const CUmemAccessDesc access = read_write_on(0);
  CUdeviceptr base = 0;
  check(cu().cuMemAddressReserve(&base, 2 * size, 2 * MiB, 0, 0), "cuMemAddressReserve");
  std::vector<double> export_us, import_us;
  bool same_bytes = true;
  for (int i = 0; i < 50; ++i) {
    CUmemGenericAllocationHandle h = 0;
    check(cu().cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
    check(cu().cuMemMap(base, size, 0, h, 0), "cuMemMap");
    check(cu().cuMemSetAccess(base, size, &access, 1), "cuMemSetAccess");
    int fd = -1;
    export_us.push_back(timed_us([&] {
      check(cu().cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export");
    }));
    CUmemGenericAllocationHandle imported = 0;
    void* shareable = reinterpret_cast<void*>(static_cast<std::intptr_t>(fd));  // NOLINT(performance-no-int-to-ptr)
    import_us.push_back(timed_us([&] {
      check(cu().cuMemImportFromShareableHandle(&imported, shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            "import");
    }));
    ::close(fd);
    check(cu().cuMemMap(base + size, size, 0, imported, 0), "cuMemMap");
    check(cu().cuMemSetAccess(base + size, size, &access, 1), "cuMemSetAccess");
    check(cu().cuMemsetD8(base, static_cast<unsigned char>(i + 1), size), "cuMemsetD8");
    check(cu().cuCtxSynchronize(), "sync");
    same_bytes = same_bytes && tidepool::gpu_test::first_mismatch(base + size, size, static_cast<unsigned char>(i + 1)) < 0;
    check(cu().cuMemUnmap(base + size, size), "cuMemUnmap");
    check(cu().cuMemRelease(imported), "cuMemRelease");
    check(cu().cuMemUnmap(base, size), "cuMemUnmap");
    check(cu().cuMemRelease(h), "cuMemRelease");
  }
  check(cu().cuMemAddressFree(base, 2 * size), "cuMemAddressFree");
  std::printf("\n24 MiB handle, 50 times: cuMemExportToShareableHandle %.1f us, cuMemImportFromShareableHandle "
              "%.1f us (medians); written through the handle, read through its import: %s\n\n",
              summarize(export_us).median, summarize(import_us).median, same_bytes ? "same bytes" : "DIFFERENT");
}

// Whether the driver takes part of a handle: a 24 MiB handle mapped whole, then its middle 8 MiB
// at a second address (non-zero offset), its first 8 MiB alone (a size short of the handle), and
// the whole mapping's last 8 MiB unmapped alone. Each result is the driver's own code; where a
// call succeeds, the bytes seen through it are checked against the whole mapping's.
void part_of_a_handle() {
  std::printf("## 12. Part of a handle: cuMemMap at a non-zero offset or short of the handle, cuMemUnmap of part\n\n");
  const CUmemAllocationProp prop = pinned_on(0);
  const CUmemAccessDesc access = read_write_on(0);
  const std::size_t size = 24 * MiB;
  const std::size_t part = 8 * MiB;
  CUdeviceptr whole = 0;
  CUdeviceptr second = 0;
  check(cu().cuMemAddressReserve(&whole, size, 2 * MiB, 0, 0), "cuMemAddressReserve");
  check(cu().cuMemAddressReserve(&second, size, 2 * MiB, 0, 0), "cuMemAddressReserve");
  CUmemGenericAllocationHandle h = 0;
  check(cu().cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
  check(cu().cuMemMap(whole, size, 0, h, 0), "cuMemMap");
  check(cu().cuMemSetAccess(whole, size, &access, 1), "cuMemSetAccess");
  check(cu().cuMemsetD8(whole, 0x11, part), "cuMemsetD8");
  check(cu().cuMemsetD8(whole + part, 0x22, part), "cuMemsetD8");
  check(cu().cuMemsetD8(whole + 2 * part, 0x33, part), "cuMemsetD8");
  check(cu().cuCtxSynchronize(), "sync");
  auto name = [](CUresult r) {
    const char* text = nullptr;
    return cu().cuGetErrorName(r, &text) == CUDA_SUCCESS && text != nullptr ? std::string(text)
                                                                             : std::to_string(static_cast<int>(r));
  };
  // A mapping that the driver took: are its bytes the handle's, at that offset?
  auto bytes_through = [&](CUdeviceptr at, std::size_t bytes, std::uint8_t expected) -> std::string {
    if (cu().cuMemSetAccess(at, bytes, &access, 1) != CUDA_SUCCESS) return "set access refused";
    return tidepool::gpu_test::first_mismatch(at, bytes, expected) < 0 ? "the handle's bytes at that offset"
                                                                       : "OTHER bytes";
  };
  const CUresult offset_map = cu().cuMemMap(second, part, part, h, 0);
  std::string offset_bytes = "-";
  if (offset_map == CUDA_SUCCESS) {
    offset_bytes = bytes_through(second, part, 0x22);
    check(cu().cuMemUnmap(second, part), "cuMemUnmap");
  }
  const CUresult short_map = cu().cuMemMap(second, part, 0, h, 0);
  std::string short_bytes = "-";
  if (short_map == CUDA_SUCCESS) {
    short_bytes = bytes_through(second, part, 0x11);
    check(cu().cuMemUnmap(second, part), "cuMemUnmap");
  }
  const CUresult part_unmap = cu().cuMemUnmap(whole + 2 * part, part);
  std::string rest = "-";
  if (part_unmap == CUDA_SUCCESS) {
    rest = tidepool::gpu_test::first_mismatch(whole, part, 0x11) < 0 ? "the rest still reads its bytes"
                                                                     : "the rest reads OTHER bytes";
  }
  (void)cu().cuCtxSynchronize();
  std::printf("| call | driver's answer | bytes |\n|---|---|---|\n");
  std::printf("| cuMemMap of 8 MiB at offset 8 MiB of a 24 MiB handle | %s | %s |\n", name(offset_map).c_str(),
              offset_bytes.c_str());
  std::printf("| cuMemMap of the first 8 MiB of a 24 MiB handle (offset 0) | %s | %s |\n", name(short_map).c_str(),
              short_bytes.c_str());
  std::printf("| cuMemUnmap of the last 8 MiB of a 24 MiB mapping | %s | %s |\n\n", name(part_unmap).c_str(),
              rest.c_str());
  // Whatever stayed mapped goes: the whole mapping if its part could not be unmapped, else the rest.
  if (part_unmap == CUDA_SUCCESS) {
    (void)cu().cuMemUnmap(whole, 2 * part);
  } else {
    check(cu().cuMemUnmap(whole, size), "cuMemUnmap");
  }
  check(cu().cuMemRelease(h), "cuMemRelease");
  check(cu().cuMemAddressFree(second, size), "cuMemAddressFree");
  check(cu().cuMemAddressFree(whole, size), "cuMemAddressFree");
}

int main(int argc, char** argv) {
  const tidepool::gpu_test::section_choice sections(argc, argv, 12);
  if (tidepool::gpu_test::say_if_no_gpu()) return 0;
  try {
    auto drv = tidepool::make_cuda_driver();
    tidepool::gpu_test::make_current(*drv);
    int version = tidepool::detail::cuda()->driver_version;
    CUdevice dev = 0;
    check(cu().cuDeviceGet(&dev, 0), "cuDeviceGet");
    char bus_id[64] = {};
    check(cu().cuDeviceGetPCIBusId(bus_id, sizeof bus_id, dev), "cuDeviceGetPCIBusId");
    const CUmemAllocationProp prop = pinned_on(0);
    std::size_t minimum = 0;
    std::size_t recommended = 0;
    check(cu().cuMemGetAllocationGranularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
    check(cu().cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
    std::printf("# CUDA virtual memory calls: driver CUDA %d, device 0 at %s, granularity minimum %zu KiB, recommended %zu KiB\n",
                version, bus_id, minimum / 1024, recommended / 1024);
    {
      // Warm the driver's paths once so the first measured call is not the first ever.
      handle_set warm(2 * MiB, 4);
      for (std::size_t i = 0; i < 4; ++i) warm.create_and_map(i);
      for (std::size_t i = 0; i < 4; ++i) warm.unmap_and_release(i);
      warm.free_range();
    }
    if (sections.wanted(1)) per_size_costs();
    if (sections.wanted(2)) one_set_access_over_many();
    if (sections.wanted(3)) many_handles();
    if (sections.wanted(4)) mixed_sizes();
    if (sections.wanted(5)) {
      std::printf("## 5. Calls (64 MiB handle, microseconds) while another stream is busy for about 200 ms\n\n");
      std::printf("| busy with | cuMemCreate | cuMemMap | cuMemSetAccess | cuMemUnmap | cuMemRelease | still busy after unmap+release | cuMemAlloc | cuMemFree of an unrelated plain allocation |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|\n");
      tidepool::gpu_test::stream_occupier occupier;
      calls_while_busy(occupier, occupier.method() == std::string("kernel") ? "spin kernel" : "memsets (no JIT)", false);
      calls_while_busy(occupier, "12 memsets of 32 GiB", true);
      std::printf("\n");
    }
    if (sections.wanted(6)) growth_cost();
    if (sections.wanted(7)) async_pool_reclaim();
    if (sections.wanted(8)) access_after_remap();
    if (sections.wanted(9)) calls_beside_a_helper_thread();
    if (sections.wanted(10)) aliases();
    if (sections.wanted(11)) exportable_handles();
    if (sections.wanted(12)) part_of_a_handle();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vmm_calls_bench failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
