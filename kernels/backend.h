// Where an operation runs: the CPU, or the CUDA device its tensor lives on (made current for the
// operation's scope). Used by the ops layer's dispatch (ops.cpp, nn.cpp, quantized.cpp).
#pragma once

#include "runtime/cuda.h"
#include "runtime/tensor.h"

#if OCTET_WITH_CUDA
#include "kernels/cuda/cuda_ops.h"
// A call into kernels/cuda; compiled away in a CPU-only build, where no CUDA tensor can exist.
#define OCTET_CUDA_CALL(...) __VA_ARGS__
#else
#define OCTET_CUDA_CALL(...) OCTET_FAIL("octet was built without CUDA")
#endif

namespace octet::ops::detail {

class Backend {
 public:
  explicit Backend(const Tensor& t) : cuda_(t.device().is_cuda()), guard_(t.device()) {}
  bool cuda() const { return cuda_; }

 private:
  bool cuda_;
  octet::cuda::DeviceGuard guard_;
};

}  // namespace octet::ops::detail
