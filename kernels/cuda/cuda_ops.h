// CUDA implementations behind kernels/ops.h (compiled only when nvcc is found).
#pragma once

#include "runtime/tensor.h"

namespace octet::cuda {

void quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                  Tensor* amax);

}  // namespace octet::cuda
