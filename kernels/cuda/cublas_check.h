// Check macro for cuBLAS / cuBLASLt calls: names the call and the status.
#pragma once

#include <cublasLt.h>

#include "runtime/error.h"

#define OCTET_CUBLAS_CHECK(call)                                                         \
  do {                                                                                   \
    const cublasStatus_t octet_cublas_status_ = (call);                                  \
    OCTET_CHECK(octet_cublas_status_ == CUBLAS_STATUS_SUCCESS, #call,                    \
                " failed: ", cublasLtGetStatusString(octet_cublas_status_), " (status ", \
                static_cast<int>(octet_cublas_status_), ")");                            \
  } while (0)
