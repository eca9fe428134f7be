#pragma once
/// @file
/// TANDEM_CUDA_TRY(call): runs a CUDA runtime call and throws
/// tandem::cuda_error naming the call, file and line when it fails.

#include <cuda_runtime_api.h>

#include <tandem/error.hpp>

#define TANDEM_CUDA_TRY(call)                                                                     \
  do {                                                                                            \
    const cudaError_t tandem_cuda_status_ = (call);                                               \
    if (tandem_cuda_status_ != cudaSuccess) {                                                     \
      (void)cudaGetLastError(); /* clear the sticky-free error so later calls are not blamed */  \
      throw ::tandem::cuda_error(#call, __FILE__, __LINE__, static_cast<int>(tandem_cuda_status_), \
                                 cudaGetErrorString(tandem_cuda_status_));                        \
    }                                                                                             \
  } while (0)
