// The interface's defaults (every op says it is not supported), the tables, and the lookup of a
// device's table. A backend defines what it implements; what it does not is an error, never a
// silent fallback to another backend.
#include "kernels/backend.h"

#include "kernels/cpu/cpu_backend.h"
#if OCTET_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

// The defaults name every parameter (the list does) and use none.
#pragma GCC diagnostic ignored "-Wunused-parameter"

namespace octet::ops::detail {

void Backend::unsupported(const char* op) const {
  OCTET_FAIL("not supported on ", name(), ": ", op);
}

#define OCTET_BACKEND_UNSUPPORTED_(ret, op, params) \
  ret Backend::op params const { unsupported(#op); }
OCTET_BACKEND_OPS(OCTET_BACKEND_UNSUPPORTED_)
#undef OCTET_BACKEND_UNSUPPORTED_

const Backend& cpu_backend() {
  static const cpu::CpuBackend table;
  return table;
}

#if OCTET_WITH_CUDA
const Backend& cuda_backend() {
  static const cuda::CudaBackend table;
  return table;
}
#endif

const Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu_backend();
#if OCTET_WITH_CUDA
  return cuda_backend();
#else
  OCTET_FAIL("not supported on cuda: octet was built without CUDA (", device, " requested)");
#endif
}

}  // namespace octet::ops::detail
