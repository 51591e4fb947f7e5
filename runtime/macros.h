// Portability macros shared by host and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define OCTET_HD __host__ __device__ __forceinline__
#else
#define OCTET_HD inline
#endif
