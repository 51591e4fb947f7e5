// test::reference_cast, in its own file so that only it includes the CUDA header.
#include "runtime/dtype.h"
#include "runtime/fp4.h"
#include "runtime/fp8.h"

#if OCTET_HAVE_CUDA_HEADERS
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#endif

namespace octet::test {

uint8_t reference_cast(float v, DType dtype) {
#if OCTET_HAVE_CUDA_HEADERS
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, dtype == DType::kE4M3 ? __NV_E4M3 : __NV_E5M2);
#else
  return dtype == DType::kE4M3 ? to_e4m3(v) : to_e5m2(v);
#endif
}

uint8_t reference_e2m1(float v) {
#if OCTET_HAVE_CUDA_HEADERS
  return static_cast<uint8_t>(__nv_cvt_float_to_fp4(v, __NV_E2M1, cudaRoundNearest));
#else
  return to_e2m1(v);
#endif
}

}  // namespace octet::test
