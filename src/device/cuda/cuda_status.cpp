// cuda_status.cpp: CUresult -> driver_status. The pool branches on these few outcomes only; the
// exact CUresult is lost here on purpose (the cuda driver's callers never need more).
#include "device/cuda/cuda_status.hpp"

namespace tidepool::detail {

driver_status to_driver_status(CUresult result) noexcept {
  switch (result) {
    case CUDA_SUCCESS:
      return driver_status::success;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return driver_status::out_of_memory;
    case CUDA_ERROR_NOT_READY:
      return driver_status::not_ready;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_ALREADY_MAPPED:
    case CUDA_ERROR_NOT_MAPPED:
      return driver_status::invalid_value;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
      return driver_status::not_supported;
    default:
      return driver_status::error;
  }
}

}  // namespace tidepool::detail
