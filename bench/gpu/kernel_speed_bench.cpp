// kernel_speed_bench.cpp: does the way memory is mapped change how fast kernels run on it?
//   1. a random 4-byte gather and a memset over footprints of 4 to 96 GiB, the memory from one
//      cuMemAlloc against handles of 2 MiB, 24 MiB (the largest that growth makes), 512 MiB and
//      2 GiB mapped side by side: does the GPU's address translation make small handles slower
//      where a program touches much memory (docs/RESULTS.md section 0 says which loop asked)?
//   2. the same gather while the host makes handles elsewhere (create, map, set access: what
//      growth does during a first training step) or gives them back (unmap, release): do the
//      calls slow kernels already running, beyond the host time they take?
// Times are host clock around a synchronised launch (section 1: median of 7) or a launch polled
// to completion between the calls (section 2: median of 9 launches). Prints tables; exits 0 with
// a note where no GPU is present. Arguments, if any, are the sections to run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
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

double ms_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Each thread reads `iters` 4-byte words at addresses spread uniformly over the footprint (a
// 64-bit LCG, mapped to [0, words) by a high multiply) and stores their sum, so that every load
// counts and nearly every one lands on a different 2 MiB page.
const char* const gather_ptx = R"(
.version 7.0
.target sm_52
.address_size 64
.visible .entry tidepool_gather(.param .u64 base, .param .u64 words, .param .u32 iters, .param .u64 out)
{
  .reg .pred %p;
  .reg .b32 %r<10>;
  .reg .b64 %rd<14>;
  ld.param.u64 %rd1, [base];
  ld.param.u64 %rd2, [words];
  ld.param.u32 %r1, [iters];
  ld.param.u64 %rd3, [out];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  cvt.u64.u32 %rd4, %r5;
  add.u64 %rd5, %rd4, 1;
  mov.u64 %rd10, 2654435761;
  mul.lo.u64 %rd5, %rd5, %rd10;
  mov.u64 %rd11, 6364136223846793005;
  mov.u64 %rd12, 1442695040888963407;
  mov.u32 %r6, 0;
  mov.u32 %r7, 0;
LOOP:
  setp.ge.u32 %p, %r7, %r1;
  @%p bra DONE;
  mad.lo.u64 %rd5, %rd5, %rd11, %rd12;
  mul.hi.u64 %rd6, %rd5, %rd2;
  shl.b64 %rd7, %rd6, 2;
  add.u64 %rd8, %rd1, %rd7;
  ld.global.u32 %r8, [%rd8];
  add.u32 %r6, %r6, %r8;
  add.u32 %r7, %r7, 1;
  bra LOOP;
DONE:
  shl.b64 %rd9, %rd4, 2;
  add.u64 %rd13, %rd3, %rd9;
  st.global.u32 [%rd13], %r6;
  ret;
}
)";

class gather_kernel {
 public:
  gather_kernel() {
    check(cu().cuModuleLoadData(&module_, gather_ptx), "cuModuleLoadData (gather)");
    check(cu().cuModuleGetFunction(&function_, module_, "tidepool_gather"), "cuModuleGetFunction");
    check(cu().cuMemAlloc(&out_, threads * sizeof(std::uint32_t)), "cuMemAlloc (gather sums)");
  }
  ~gather_kernel() {
    cu().cuMemFree(out_);
    cu().cuModuleUnload(module_);
  }
  gather_kernel(const gather_kernel&) = delete;
  gather_kernel& operator=(const gather_kernel&) = delete;

  /// Queues one gather over [base, base + bytes) on the null stream.
  void launch(CUdeviceptr base, std::size_t bytes) {
    std::uint64_t words = bytes / 4;
    std::uint32_t iters = loads_per_thread;
    CUdeviceptr b = base;
    CUdeviceptr o = out_;
    void* params[] = {&b, &words, &iters, &o};
    check(cu().cuLaunchKernel(function_, blocks, 1, 1, threads_per_block, 1, 1, 0, nullptr, params, nullptr),
          "cuLaunchKernel (gather)");
  }

  static constexpr unsigned blocks = 1056;  // 8 per SM of an H200
  static constexpr unsigned threads_per_block = 256;
  static constexpr std::size_t threads = std::size_t{blocks} * threads_per_block;
  static constexpr unsigned loads_per_thread = 256;

 private:
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  CUdeviceptr out_ = 0;
};

// `bytes` of device memory at one address: one cuMemAlloc (handle_size 0) or handles of
// `handle_size` mapped side by side in one reserved range.
class mapped_memory {
 public:
  mapped_memory(std::size_t bytes, std::size_t handle_size) : bytes_(bytes), handle_size_(handle_size) {
    if (handle_size == 0) {
      check(cu().cuMemAlloc(&base_, bytes), "cuMemAlloc");
      return;
    }
    const CUmemAllocationProp prop = pinned_on(0);
    const CUmemAccessDesc access = read_write_on(0);
    // Aligned to the handle where that is a power of two (cuMemAddressReserve refuses others).
    const std::size_t alignment = (handle_size & (handle_size - 1)) == 0 ? handle_size : 2 * MiB;
    check(cu().cuMemAddressReserve(&base_, bytes, alignment, 0, 0), "cuMemAddressReserve");
    handles_.resize(bytes / handle_size);
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      check(cu().cuMemCreate(&handles_[i], handle_size, &prop, 0), "cuMemCreate");
      check(cu().cuMemMap(base_ + i * handle_size, handle_size, 0, handles_[i], 0), "cuMemMap");
      check(cu().cuMemSetAccess(base_ + i * handle_size, handle_size, &access, 1), "cuMemSetAccess");
    }
  }
  ~mapped_memory() {
    if (handle_size_ == 0) {
      cu().cuMemFree(base_);
      return;
    }
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      cu().cuMemUnmap(base_ + i * handle_size_, handle_size_);
      cu().cuMemRelease(handles_[i]);
    }
    cu().cuMemAddressFree(base_, bytes_);
  }
  mapped_memory(const mapped_memory&) = delete;
  mapped_memory& operator=(const mapped_memory&) = delete;

  [[nodiscard]] CUdeviceptr base() const { return base_; }

 private:
  std::size_t bytes_;
  std::size_t handle_size_;
  CUdeviceptr base_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
};

std::string mapping_name(std::size_t handle_size) {
  if (handle_size == 0) return "one cuMemAlloc";
  return handle_size >= GiB ? std::to_string(handle_size / GiB) + " GiB handles"
                            : std::to_string(handle_size / MiB) + " MiB handles";
}

void speed_by_mapping() {
  std::printf("## 1. Kernels over memory mapped in handles of each size (median ms of 7)\n\n");
  std::printf("| footprint | mapping | random gather of %zu M words | memset of all of it | GB/s |\n"
              "|---|---|---|---|---|\n",
              gather_kernel::threads * gather_kernel::loads_per_thread >> 20);
  gather_kernel gather;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  check(cu().cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
  for (std::size_t footprint : {4 * GiB, 16 * GiB, 64 * GiB, 96 * GiB}) {
    if (footprint + 4 * GiB > free_bytes) {
      std::printf("| %zu GiB | (skipped: %zu GiB free) | | | |\n", footprint / GiB, free_bytes / GiB);
      continue;
    }
    for (std::size_t handle_size : {std::size_t{0}, 2 * MiB, 24 * MiB, 512 * MiB, 2 * GiB}) {
      const std::size_t unit = handle_size == 0 ? 2 * MiB : handle_size;
      const std::size_t bytes = footprint / unit * unit;
      mapped_memory memory(bytes, handle_size);
      check(cu().cuMemsetD8(memory.base(), 1, bytes), "cuMemsetD8");
      check(cu().cuCtxSynchronize(), "sync");
      std::vector<double> gathers;
      std::vector<double> memsets;
      for (int i = 0; i < 8; ++i) {  // the first of each is a warm-up
        auto start = clock_type::now();
        gather.launch(memory.base(), bytes);
        check(cu().cuCtxSynchronize(), "sync");
        if (i > 0) gathers.push_back(ms_since(start));
        start = clock_type::now();
        check(cu().cuMemsetD8Async(memory.base(), static_cast<unsigned char>(i), bytes, nullptr), "cuMemsetD8Async");
        check(cu().cuCtxSynchronize(), "sync");
        if (i > 0) memsets.push_back(ms_since(start));
      }
      const double memset_ms = median(memsets);
      std::printf("| %zu GiB | %s | %.2f | %.2f | %.0f |\n", footprint / GiB, mapping_name(handle_size).c_str(),
                  median(gathers), memset_ms, static_cast<double>(bytes) / (memset_ms * 1e6));
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

// The gather over `memory` launched `runs` times; between launch and completion the host runs
// `call` (one handle made or given back per call) until the kernel is done. Returns the median ms
// per launch, and adds the calls made and their host ms to `calls` / `call_ms`.
template <class Call>
double gather_beside(gather_kernel& gather, CUdeviceptr base, std::size_t bytes, CUevent done, int runs, Call&& call,
                     std::size_t& calls, double& call_ms) {
  std::vector<double> per_launch;
  for (int r = 0; r < runs; ++r) {
    check(cu().cuCtxSynchronize(), "sync");
    const auto start = clock_type::now();
    gather.launch(base, bytes);
    check(cu().cuEventRecord(done, nullptr), "cuEventRecord");
    while (cu().cuEventQuery(done) == CUDA_ERROR_NOT_READY) {
      const auto t = clock_type::now();
      if (!call()) continue;
      call_ms += ms_since(t);
      ++calls;
    }
    per_launch.push_back(ms_since(start));
  }
  return median(per_launch);
}

void speed_beside_calls() {
  std::printf("## 2. The gather (16 GiB in 24 MiB handles) while the host makes or gives back 24 MiB handles "
              "elsewhere\n\n");
  std::printf("| the host meanwhile | gather ms (median of 9) | calls' handles | host us per handle |\n"
              "|---|---|---|---|\n");
  gather_kernel gather;
  const std::size_t bytes = 16 * GiB / (24 * MiB) * (24 * MiB);  // whole handles: the gather reads all of it
  mapped_memory memory(bytes, 24 * MiB);
  CUevent done = nullptr;
  check(cu().cuEventCreate(&done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  const CUmemAllocationProp prop = pinned_on(0);
  const CUmemAccessDesc access = read_write_on(0);
  const std::size_t handle = 24 * MiB;
  const std::size_t room_handles = 1024;  // 24 GiB of addresses: more than a run of launches uses
  CUdeviceptr room = 0;
  check(cu().cuMemAddressReserve(&room, handle * room_handles, 2 * MiB, 0, 0), "cuMemAddressReserve");
  std::vector<CUmemGenericAllocationHandle> made;
  auto make_one = [&] {
    if (made.size() == room_handles) return false;
    CUmemGenericAllocationHandle h = 0;
    check(cu().cuMemCreate(&h, handle, &prop, 0), "cuMemCreate");
    const CUdeviceptr at = room + made.size() * handle;
    check(cu().cuMemMap(at, handle, 0, h, 0), "cuMemMap");
    check(cu().cuMemSetAccess(at, handle, &access, 1), "cuMemSetAccess");
    made.push_back(h);
    return true;
  };
  auto give_one_back = [&] {
    if (made.empty()) return false;
    const CUdeviceptr at = room + (made.size() - 1) * handle;
    check(cu().cuMemUnmap(at, handle), "cuMemUnmap");
    check(cu().cuMemRelease(made.back()), "cuMemRelease");
    made.pop_back();
    return true;
  };
  auto nothing = [] { return false; };
  for (int round = 0; round < 2; ++round) {  // the second round's figures say how much they move
    std::size_t calls = 0;
    double call_ms = 0;
    const double idle = gather_beside(gather, memory.base(), bytes, done, 9, nothing, calls, call_ms);
    std::printf("| nothing (round %d) | %.2f | | |\n", round + 1, idle);
    calls = 0;
    call_ms = 0;
    const double growing = gather_beside(gather, memory.base(), bytes, done, 9, make_one, calls, call_ms);
    std::printf("| create + map + set access (round %d) | %.2f | %zu | %.1f |\n", round + 1, growing, calls,
                calls ? 1e3 * call_ms / static_cast<double>(calls) : 0.0);
    calls = 0;
    call_ms = 0;
    const double shrinking = gather_beside(gather, memory.base(), bytes, done, 9, give_one_back, calls, call_ms);
    std::printf("| unmap + release (round %d) | %.2f | %zu | %.1f |\n", round + 1, shrinking, calls,
                calls ? 1e3 * call_ms / static_cast<double>(calls) : 0.0);
    while (give_one_back()) {
    }
    std::fflush(stdout);
  }
  // The same calls with the GPU idle, for their host cost alone.
  double idle_make_ms = 0;
  double idle_release_ms = 0;
  const std::size_t n = 200;
  auto start = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) make_one();
  idle_make_ms = ms_since(start);
  start = clock_type::now();
  while (give_one_back()) {
  }
  idle_release_ms = ms_since(start);
  std::printf("| (GPU idle) create + map + set access | | %zu | %.1f |\n"
              "| (GPU idle) unmap + release | | %zu | %.1f |\n\n",
              n, 1e3 * idle_make_ms / static_cast<double>(n), n, 1e3 * idle_release_ms / static_cast<double>(n));
  check(cu().cuMemAddressFree(room, handle * room_handles), "cuMemAddressFree");
  check(cu().cuEventDestroy(done), "cuEventDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  const tidepool::gpu_test::section_choice sections(argc, argv, 2);
  if (tidepool::gpu_test::say_if_no_gpu()) return 0;
  try {
    auto drv = tidepool::make_cuda_driver();
    tidepool::gpu_test::make_current(*drv);
    std::printf("# Kernel speed by mapping: driver CUDA %d\n\n", tidepool::detail::cuda()->driver_version);
    if (sections.wanted(1)) speed_by_mapping();
    if (sections.wanted(2)) speed_beside_calls();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_speed_bench failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
