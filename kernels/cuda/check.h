// Check macro for CUDA runtime calls: names the call and the error string.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/error.h"

#define OCTET_CUDA_CHECK(call)                                   \
  do {                                                           \
    const cudaError_t octet_status_ = (call);                    \
    OCTET_CHECK(octet_status_ == cudaSuccess, #call,             \
                " failed: ", cudaGetErrorString(octet_status_)); \
  } while (0)
