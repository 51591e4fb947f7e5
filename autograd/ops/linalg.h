// Differentiable high-precision matrix products (the FP8 linear comes with the modules).
#pragma once

#include "runtime/tensor.h"

namespace octet::autograd {

// a (..., K) · b (K, N) -> (..., N); leading dimensions of a fold into rows.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in) · wᵀ + bias: w (out, in), bias (out,) or undefined -> (..., out).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());

}  // namespace octet::autograd
