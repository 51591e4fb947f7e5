// Differentiable shape operations: reshape/view (share storage), transpose of the last two
// dimensions (a copy), slice of the leading dimension (shares storage).
#pragma once

#include "runtime/tensor.h"

namespace octet::autograd {

Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 allowed
inline Tensor view(const Tensor& x, const Shape& shape) { return reshape(x, shape); }
Tensor transpose(const Tensor& x);                          // (..., R, C) -> (..., C, R)
Tensor slice(const Tensor& x, int64_t begin, int64_t end);  // rows [begin, end) of dim 0

}  // namespace octet::autograd
