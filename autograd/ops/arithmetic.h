// Differentiable arithmetic: add/sub/mul/div (b the same shape as a, or a row broadcast over a's
// last dimension, e.g. a bias), scale, sum and mean.
#pragma once

#include "runtime/tensor.h"

namespace octet::autograd {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);
Tensor sum(const Tensor& x);   // (1,)
Tensor mean(const Tensor& x);  // (1,)

}  // namespace octet::autograd
