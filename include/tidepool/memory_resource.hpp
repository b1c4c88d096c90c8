// tidepool/memory_resource.hpp: tidepool as a cuda::mr memory resource, for CCCL and RMM.
//
//   #include <tidepool/memory_resource.hpp>       // needs CCCL's headers on the include path
//   tidepool::memory_resource mr{/*device=*/0};   // the process's pool of device 0 (device_pool)
//   void* p = mr.allocate(cuda::stream_ref{stream}, bytes);   // RMM 26.06+ / CCCL 3.1+ form
//   mr.deallocate(cuda::stream_ref{stream}, p, bytes);
//   void* q = mr.allocate_async(bytes, 256, cuda::stream_ref{stream});  // CCCL 3.0 form
//   mr.deallocate_async(q, bytes, 256, cuda::stream_ref{stream});
//
// Header only, over the public C++ API (pool.hpp, process.hpp): any C++20 compiler will do, nvcc
// is not needed. CCCL's interface changed in 3.1 (stream first, `allocate_sync` for the
// synchronous calls); this class has both spellings, so it satisfies
// cuda::mr::async_resource_with<memory_resource, cuda::mr::device_accessible> of CCCL 3.0 (the
// CUDA 13.0 toolkit's) and cuda::mr::resource_with<...> of CCCL 3.1 and later, which RMM 26.06
// and later take. One class, copyable: copies share the pool they were made with and compare equal.
//
// Streams: the stream-ordered forms allocate and free on the given stream, as pool::allocate and
// pool::deallocate do. The synchronous forms (CCCL 3.0 `allocate`/`deallocate`, `allocate_sync`/
// `deallocate_sync`) use the legacy default stream; deallocating through them says that no work
// still uses the memory.
//
// Alignment: tidepool aligns every allocation to 256 bytes (cuda::mr's default alignment, and
// RMM's). An alignment that is a power of two up to 256 is honoured; any other is refused with
// tidepool::error (error_code::invalid_argument) before anything is allocated. For more, wrap the
// resource in RMM's aligned_resource_adaptor. `bytes` and `alignment` of a deallocation are not
// needed: the pool knows each allocation's size.
//
// Errors: allocations throw tidepool::error on bad input and tidepool::out_of_memory (a
// std::bad_alloc) when nothing can be reclaimed. A bad deallocation (a double free, a foreign
// pointer) leaves the pool as it was. Every deallocation CCCL or RMM calls from a noexcept
// function is noexcept here (`deallocate` in both spellings, `deallocate_sync`) and reports the
// refusal on stderr, since an exception there would end the program; `deallocate_async` (CCCL
// 3.0, not called from noexcept code) throws tidepool::error.
//
// With CCCL 3.0, cuda::mr sits behind LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE: this
// header defines it before including <cuda/memory_resource>, so include this header first, or
// define the macro for the whole program.
#pragma once

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif

#if !__has_include(<cuda/memory_resource>)
#error "tidepool/memory_resource.hpp needs CCCL: add <CUDA toolkit>/include/cccl (and <CUDA toolkit>/include) to the include path"
#endif

#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>

#include "tidepool/errors.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/process.hpp"

namespace tidepool {

/// A cuda::mr resource over a tidepool pool (see the top of this file).
class memory_resource {
 public:
  /// The alignment every allocation has; the largest one allocate() accepts.
  static constexpr std::size_t guaranteed_alignment = 256;

  /// The process's pool of `device` (tidepool::device_pool, created on first use).
  explicit memory_resource(int device = 0) : pool_(&device_pool(device)) {}
  /// A pool the program owns; it must outlive the resource and every copy of it.
  explicit memory_resource(pool& p) noexcept : pool_(&p) {}

  // --- CCCL 3.1+ / RMM 26.06+: stream-ordered allocate/deallocate, synchronous *_sync ---

  [[nodiscard]] void* allocate(::cuda::stream_ref stream, std::size_t bytes,
                               std::size_t alignment = guaranteed_alignment) {
    check_alignment(alignment);
    return pool_->allocate(bytes, stream.get());
  }
  void deallocate(::cuda::stream_ref stream, void* ptr, std::size_t /*bytes*/,
                  std::size_t /*alignment*/ = guaranteed_alignment) noexcept {
    deallocate_noexcept(ptr, stream.get());
  }
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = guaranteed_alignment) {
    check_alignment(alignment);
    return pool_->allocate(bytes, nullptr);
  }
  void deallocate_sync(void* ptr, std::size_t /*bytes*/,
                       std::size_t /*alignment*/ = guaranteed_alignment) noexcept {
    deallocate_noexcept(ptr, nullptr);
  }

  // --- CCCL 3.0 (the CUDA 13.0 toolkit): allocate/deallocate synchronous, *_async stream-ordered ---

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = guaranteed_alignment) {
    return allocate_sync(bytes, alignment);
  }
  // noexcept: CCCL 3.0's resource_ref calls it from a noexcept function.
  void deallocate(void* ptr, std::size_t /*bytes*/, std::size_t /*alignment*/ = guaranteed_alignment) noexcept {
    deallocate_noexcept(ptr, nullptr);
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) {
    return allocate(stream, bytes, alignment);
  }
  void deallocate_async(void* ptr, std::size_t /*bytes*/, std::size_t /*alignment*/, ::cuda::stream_ref stream) {
    pool_->deallocate(ptr, stream.get());
  }

  /// The pool behind the resource.
  [[nodiscard]] tidepool::pool& get_pool() const noexcept { return *pool_; }

  /// Equal when they allocate from the same pool (memory from one may be freed by the other).
  [[nodiscard]] bool operator==(const memory_resource& other) const noexcept { return pool_ == other.pool_; }
  [[nodiscard]] bool operator!=(const memory_resource& other) const noexcept { return pool_ != other.pool_; }

  /// tidepool's memory is device memory.
  friend void get_property(const memory_resource&, ::cuda::mr::device_accessible) noexcept {}

 private:
  static void check_alignment(std::size_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > guaranteed_alignment) {
      throw error(error_code::invalid_argument,
                  "tidepool::memory_resource: alignment " + std::to_string(alignment) +
                      " is not supported: tidepool aligns every allocation to 256 bytes; ask for a "
                      "power of two up to 256 (or wrap the resource in an aligning adaptor)");
    }
  }

  // The noexcept deallocations cannot throw: the pool refuses a bad pointer before changing
  // anything, and the refusal is printed rather than lost.
  void deallocate_noexcept(void* ptr, stream_t stream) noexcept {
    try {
      pool_->deallocate(ptr, stream);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tidepool::memory_resource: deallocate refused: %s\n", e.what());
    }
  }

  tidepool::pool* pool_;
};

}  // namespace tidepool
