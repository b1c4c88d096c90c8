// gpu_support.hpp: what the GPU tests and benchmarks need beyond tidepool::driver: the loaded
// driver table with the primary context current, filling and checking device bytes, a benchmark's
// section arguments and its note where there is no GPU, and keeping a stream busy for a set time
// (a spin kernel JIT-compiled from PTX, so no nvcc is needed; long memsets where the JIT is
// missing).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/cuda/cuda_api.hpp"
#include "device/cuda/cuda_driver.hpp"
#include "tidepool/driver.hpp"

namespace tidepool::gpu_test {

/// Throws std::runtime_error naming `what` when a driver call failed.
inline void check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) throw std::runtime_error(std::string(what) + ": " + detail::cuda_error_name(result));
}

/// The loaded driver table (only call after TIDEPOOL_REQUIRE_GPU()).
inline const detail::cuda_api& cu() { return *detail::cuda(); }

/// Opens device 0's primary context through `drv` and makes it current on this thread.
inline void make_current(driver& drv, int device = 0) {
  if (drv.open_context(device) != driver_status::success) throw std::runtime_error("open_context failed");
  auto& cuda = dynamic_cast<detail::cuda_driver&>(drv);
  check(cu().cuCtxSetCurrent(cuda.primary_context(device)), "cuCtxSetCurrent");
}

/// Copies `bytes` at `address` back and returns the first offset whose byte is not `value`, or
/// -1 when every byte is `value`.
inline std::int64_t first_mismatch(std::uintptr_t address, std::size_t bytes, std::uint8_t value) {
  constexpr std::size_t chunk = std::size_t{64} << 20;
  std::vector<std::uint8_t> host(std::min(bytes, chunk));
  for (std::size_t done = 0; done < bytes; done += chunk) {
    const std::size_t n = std::min(chunk, bytes - done);
    check(cu().cuMemcpyDtoH(host.data(), static_cast<CUdeviceptr>(address + done), n), "cuMemcpyDtoH");
    for (std::size_t i = 0; i < n; ++i) {
      if (host[i] != value) return static_cast<std::int64_t>(done + i);
    }
  }
  return -1;
}

/// The sections a GPU benchmark was asked to run: its arguments, each a number from 1 to
/// `sections` (none given: every section). Anything else prints a usage line and exits with 2.
class section_choice {
 public:
  section_choice(int argc, char** argv, int sections) {
    for (int i = 1; i < argc; ++i) {
      const int section = std::atoi(argv[i]);
      if (section < 1 || section > sections) {
        std::fprintf(stderr, "usage: %s [SECTION 1-%d]...\n", argv[0], sections);
        std::exit(2);
      }
      chosen_.push_back(section);
    }
  }
  /// Whether `section` is to run.
  [[nodiscard]] bool wanted(int section) const {
    return chosen_.empty() || std::find(chosen_.begin(), chosen_.end(), section) != chosen_.end();
  }

 private:
  std::vector<int> chosen_;
};

/// Prints "no GPU: <why>" and returns true where no CUDA driver can be used (a benchmark then
/// exits 0: nothing to measure on this machine).
inline bool say_if_no_gpu() {
  const std::string reason = cuda_driver_unavailable_reason();
  if (reason.empty()) return false;
  std::printf("no GPU: %s\n", reason.c_str());
  return true;
}

/// Keeps a stream busy for a given time: a one-thread kernel spinning on %globaltimer, loaded
/// from PTX by the driver's JIT; where that fails, repeated memsets over a large buffer.
class stream_occupier {
 public:
  stream_occupier() {
    static const char* ptx = R"(
.version 7.0
.target sm_52
.address_size 64
.visible .entry tidepool_spin(.param .u64 duration_ns)
{
  .reg .pred %p;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [duration_ns];
  mov.u64 %rd2, %globaltimer;
  add.u64 %rd1, %rd1, %rd2;
SPIN:
  mov.u64 %rd3, %globaltimer;
  setp.lt.u64 %p, %rd3, %rd1;
  @%p bra SPIN;
  ret;
}
)";
    if (cu().cuModuleLoadData(&module_, ptx) == CUDA_SUCCESS &&
        cu().cuModuleGetFunction(&spin_, module_, "tidepool_spin") == CUDA_SUCCESS) {
      return;
    }
    spin_ = nullptr;
    check(cu().cuMemAlloc(&scratch_, scratch_bytes), "cuMemAlloc (memset fallback buffer)");
  }
  ~stream_occupier() {
    if (module_ != nullptr) cu().cuModuleUnload(module_);
    if (scratch_ != 0) cu().cuMemFree(scratch_);
  }
  stream_occupier(const stream_occupier&) = delete;
  stream_occupier& operator=(const stream_occupier&) = delete;

  /// Queues about `milliseconds` of work on `stream`.
  void occupy(CUstream stream, std::uint64_t milliseconds) {
    if (spin_ != nullptr) {
      std::uint64_t duration_ns = milliseconds * 1'000'000;
      void* params[] = {&duration_ns};
      check(cu().cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
      return;
    }
    // About 4 ms per 16 GiB memset on an H200 (3-4 TB/s of writes).
    for (std::uint64_t i = 0; i < milliseconds / 4 + 1; ++i) {
      check(cu().cuMemsetD8Async(scratch_, static_cast<unsigned char>(i), scratch_bytes, stream), "cuMemsetD8Async");
    }
  }
  /// "kernel" or "memset": what occupies the stream.
  [[nodiscard]] const char* method() const { return spin_ != nullptr ? "kernel" : "memset"; }

 private:
  static constexpr std::size_t scratch_bytes = std::size_t{16} << 30;
  CUmodule module_ = nullptr;
  CUfunction spin_ = nullptr;
  CUdeviceptr scratch_ = 0;
};

}  // namespace tidepool::gpu_test
