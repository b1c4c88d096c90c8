# CCCL (cuda::mr, cuda::stream_ref), for the tests of include/tidepool/memory_resource.hpp. The
# CUDA toolkit ships it under include/cccl (CUDA 13; CCCL 3.0 there); a CCCL of its own may be
# given with -DTIDEPOOL_CCCL_INCLUDE_DIR=. Sets TIDEPOOL_CCCL_FOUND and, when found,
# TIDEPOOL_CCCL_INCLUDE_DIRS (CCCL's folder and the toolkit's, which holds cuda_runtime_api.h that
# cuda::stream_ref includes). Headers only: nothing links the CUDA runtime.
set(tidepool_cccl_hints "")
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
  list(APPEND tidepool_cccl_hints "${dir}/cccl" "${dir}")
endforeach()
find_path(TIDEPOOL_CCCL_INCLUDE_DIR NAMES cuda/memory_resource cuda/stream_ref
          HINTS ${tidepool_cccl_hints} PATHS /usr/local/cuda/include/cccl
          DOC "CCCL's include folder (holding cuda/memory_resource)")
find_path(TIDEPOOL_CUDA_RUNTIME_INCLUDE_DIR NAMES cuda_runtime_api.h
          HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/local/cuda/include
          DOC "the folder holding cuda_runtime_api.h")
if(TIDEPOOL_CCCL_INCLUDE_DIR AND TIDEPOOL_CUDA_RUNTIME_INCLUDE_DIR)
  set(TIDEPOOL_CCCL_FOUND TRUE)
  set(TIDEPOOL_CCCL_INCLUDE_DIRS ${TIDEPOOL_CCCL_INCLUDE_DIR} ${TIDEPOOL_CUDA_RUNTIME_INCLUDE_DIR})
  message(STATUS "CCCL for tidepool::memory_resource's tests: ${TIDEPOOL_CCCL_INCLUDE_DIR}")
else()
  set(TIDEPOOL_CCCL_FOUND FALSE)
  message(STATUS "CCCL not found: tidepool::memory_resource's tests will report themselves skipped")
endif()
