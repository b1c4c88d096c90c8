// cudaMallocAsync behind PyTorch's pluggable-allocator interface, for the GPU benchmarks only.
//
// PyTorch can run cudaMallocAsync natively (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) or,
// through this library, behind torch.cuda.memory.CUDAPluggableAllocator, the interface tidepool's
// Python package uses. The same allocator both ways: what a program pays for the interface alone,
// with no pool of tidepool's in the path (bench/gpu/torch_call_cost.py and the training
// benchmark's `async` / `pluggable-async` runs; docs/RESULTS.md).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>

extern "C" {

// PyTorch's pluggable alloc function: the device is current (PyTorch sets it before the call).
__attribute__((visibility("default"))) void* tidepool_bench_async_alloc(std::size_t size, int device,
                                                                         cudaStream_t stream) {
  void* p = nullptr;
  const cudaError_t status = cudaMallocAsync(&p, size, stream);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // PyTorch reports a null result as out of memory
    std::fprintf(stderr, "pluggable_async: cudaMallocAsync(%zu) on device %d: %s\n", size, device,
                 cudaGetErrorString(status));
    return nullptr;
  }
  return p;
}

__attribute__((visibility("default"))) void tidepool_bench_async_free(void* p, std::size_t /*size*/, int device,
                                                                       cudaStream_t stream) {
  const cudaError_t status = cudaFreeAsync(p, stream);
  if (status != cudaSuccess) {
    std::fprintf(stderr, "pluggable_async: cudaFreeAsync on device %d: %s\n", device, cudaGetErrorString(status));
  }
}

}  // extern "C"
