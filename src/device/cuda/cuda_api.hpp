// cuda_api.hpp: the CUDA driver API, loaded at run time.
//
// libcuda.so.1 is opened with dlopen, cuInit is called, and every entry point is then looked up
// with cuGetProcAddress (the CUDA 12+ form that reports whether the symbol was found), asking for
// the ABI that matches the cuda.h we were compiled against. Nothing links against libcuda, so the
// library loads on machines without a driver; cuda.h is included for its types only.
//
// The table is internal (tidepool::detail): the cuda driver, the GPU tests and the GPU benchmarks
// use it; the pool never does (it only sees tidepool::driver).
#pragma once

#include <cuda.h>

#include <string>

namespace tidepool::detail {

// Each entry: the name, the CUDA version whose ABI we ask for, and whether loading fails without
// it. Names such as cuMemAlloc are macros of cuda.h (cuMemAlloc_v2); the member takes the macro's
// name and type, while the lookup uses the plain name, as cuGetProcAddress wants.
#define TIDEPOOL_CUDA_FUNCTIONS(X)                    \
  X(cuDriverGetVersion, 12000, true)                  \
  X(cuGetErrorName, 12000, true)                      \
  X(cuDeviceGet, 12000, true)                         \
  X(cuDeviceGetCount, 12000, true)                    \
  X(cuDeviceGetAttribute, 12000, true)                \
  X(cuDeviceGetPCIBusId, 12000, true)                 \
  X(cuDeviceGetUuid, 12000, false)                    \
  X(cuDeviceTotalMem, 12000, true)                    \
  X(cuDevicePrimaryCtxRetain, 12000, true)            \
  X(cuDevicePrimaryCtxRelease, 12000, true)           \
  X(cuDevicePrimaryCtxGetState, 12000, true)          \
  X(cuCtxGetCurrent, 12000, true)                     \
  X(cuCtxSetCurrent, 12000, true)                     \
  X(cuCtxPushCurrent, 12000, true)                    \
  X(cuCtxPopCurrent, 12000, true)                     \
  X(cuCtxSynchronize, 12000, true)                    \
  X(cuMemAddressReserve, 12000, true)                 \
  X(cuMemAddressFree, 12000, true)                    \
  X(cuMemCreate, 12000, true)                         \
  X(cuMemRelease, 12000, true)                        \
  X(cuMemMap, 12000, true)                            \
  X(cuMemUnmap, 12000, true)                          \
  X(cuMemSetAccess, 12000, true)                      \
  X(cuMemGetAllocationGranularity, 12000, true)       \
  X(cuMemExportToShareableHandle, 12000, false)       \
  X(cuMemImportFromShareableHandle, 12000, false)     \
  X(cuIpcOpenMemHandle, 12000, false)                 \
  X(cuIpcCloseMemHandle, 12000, false)                \
  X(cuMemAlloc, 12000, true)                          \
  X(cuMemFree, 12000, true)                           \
  X(cuMemGetInfo, 12000, true)                        \
  X(cuMemsetD8, 12000, true)                          \
  X(cuMemsetD8Async, 12000, true)                     \
  X(cuMemcpyDtoH, 12000, true)                        \
  X(cuMemcpyHtoD, 12000, true)                        \
  X(cuMemcpyDtoDAsync, 12000, true)                   \
  X(cuMemcpyDtoHAsync, 12000, true)                   \
  X(cuMemcpyHtoDAsync, 12000, true)                   \
  X(cuMemHostAlloc, 12000, true)                      \
  X(cuMemFreeHost, 12000, true)                       \
  X(cuMemAllocAsync, 12000, true)                     \
  X(cuMemFreeAsync, 12000, true)                      \
  X(cuDeviceGetDefaultMemPool, 12000, true)           \
  X(cuDeviceGetMemPool, 12000, true)                  \
  X(cuMemPoolGetAttribute, 12000, true)               \
  X(cuMemPoolSetAttribute, 12000, true)               \
  X(cuMemPoolTrimTo, 12000, true)                     \
  X(cuStreamCreate, 12000, true)                      \
  X(cuStreamDestroy, 12000, true)                     \
  X(cuStreamSynchronize, 12000, true)                 \
  X(cuStreamQuery, 12000, true)                       \
  X(cuStreamWaitEvent, 12000, true)                   \
  X(cuStreamGetCtx, 12000, true)                      \
  X(cuStreamGetDevice, CUDA_VERSION, false)           \
  X(cuEventCreate, 12000, true)                       \
  X(cuEventDestroy, 12000, true)                      \
  X(cuEventRecord, 12000, true)                       \
  X(cuEventQuery, 12000, true)                        \
  X(cuEventSynchronize, 12000, true)                  \
  X(cuModuleLoadData, 12000, true)                    \
  X(cuModuleUnload, 12000, true)                      \
  X(cuModuleGetFunction, 12000, true)                 \
  X(cuLaunchKernel, 12000, true)                      \
  X(cuStreamGetCaptureInfo, 12030, false)             \
  X(cuThreadExchangeStreamCaptureMode, 12000, false)  \
  X(cuUserObjectCreate, 12000, false)                 \
  X(cuUserObjectRelease, 12000, false)                \
  X(cuGraphRetainUserObject, 12000, false)            \
  X(cuStreamBeginCapture, 12000, false)               \
  X(cuStreamEndCapture, 12000, false)                 \
  X(cuGraphInstantiateWithFlags, 12000, false)        \
  X(cuGraphLaunch, 12000, false)                      \
  X(cuGraphExecDestroy, 12000, false)                 \
  X(cuGraphDestroy, 12000, false)

/// The entry points of the CUDA driver this process loaded; members are null where not found.
struct cuda_api {
#define TIDEPOOL_CUDA_MEMBER(name, version, required) decltype(&::name) name = nullptr;
  TIDEPOOL_CUDA_FUNCTIONS(TIDEPOOL_CUDA_MEMBER)
#undef TIDEPOOL_CUDA_MEMBER
  /// The driver's CUDA version (e.g. 13000), from cuDriverGetVersion.
  int driver_version = 0;
};

/// The process's CUDA driver table, loaded on first use; nullptr when it could not be loaded
/// (cuda_load_failure() says why). Thread safe; the table never changes once loaded.
[[nodiscard]] const cuda_api* cuda();
/// Empty when cuda() is usable, else why libcuda.so.1 could not be loaded or initialised.
[[nodiscard]] const std::string& cuda_load_failure();
/// "CUDA_ERROR_OUT_OF_MEMORY (2)" for a CUresult; works without a loaded driver too.
[[nodiscard]] std::string cuda_error_name(CUresult result);

/// What cuMemCreate (and the granularity query) is asked for: pinned memory on `device`.
[[nodiscard]] inline CUmemAllocationProp pinned_on(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

/// What cuMemSetAccess is given: read and write access for `device`.
[[nodiscard]] inline CUmemAccessDesc read_write_on(CUdevice device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

}  // namespace tidepool::detail
