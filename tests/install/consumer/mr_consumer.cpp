// tests/install/consumer/mr_consumer.cpp: tidepool::memory_resource from an installed tidepool,
// built by the host compiler with CCCL's headers: CCCL's concept accepts it, and both spellings
// allocate from the process's pool (run with TIDEPOOL_DEVICE=sim). Prints "key value" lines.
#include <tidepool/memory_resource.hpp>

#include <cstdio>
#include <exception>

#if CCCL_VERSION >= 3001000
static_assert(cuda::mr::resource_with<tidepool::memory_resource, cuda::mr::device_accessible>);
#else
static_assert(cuda::mr::async_resource_with<tidepool::memory_resource, cuda::mr::device_accessible>);
#endif

int main() try {
  tidepool::memory_resource mr{0};
  const cuda::stream_ref stream{static_cast<cudaStream_t>(nullptr)};
  void* a = mr.allocate(stream, 1 << 20);          // CCCL 3.1 / RMM 26.06
  void* b = mr.allocate_async(1 << 20, 256, stream);  // CCCL 3.0
  mr.deallocate(stream, a, 1 << 20);
  mr.deallocate_async(b, 1 << 20, 256, stream);
  const tidepool::pool_stats s = mr.get_pool().stats();
  std::printf("cccl %d\nallocations %llu\nlive %zu\n", CCCL_VERSION, static_cast<unsigned long long>(s.allocations),
              s.live_allocations);
  return s.allocations == 2 && s.live_allocations == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mr_consumer: %s\n", e.what());
  return 1;
}
