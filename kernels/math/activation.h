// Pointwise activations and their derivatives, shared by the CPU and CUDA kernels so both
// backends compute the same numbers. One exp per call; no libm tanh.
#pragma once

#include "kernels/math/exp.h"
#include "runtime/macros.h"

namespace octet::math {

inline constexpr float kSqrt2OverPi = 0.79788456080286536f;
inline constexpr float kGeluCubic = 0.044715f;

// 1 - sigmoid from the two forms that are accurate on each side: 1 - s cancels when s is near 1,
// e * s is inf * 0 when e overflows (s = 0).
OCTET_HD float one_minus_sigmoid(float s, float e) { return s > 0.5f ? e * s : 1.f - s; }

// GELU, tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Since
// 0.5 (1 + tanh(u)) = sigmoid(2u), this is x * sigmoid(2u): one exp and no cancellation.
OCTET_HD float gelu_tanh(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return x / (1.f + exp_f32(-2.f * u));
}

// d/dx: s + x * (1 - tanh^2(u)) / 2 * u' with s = sigmoid(2u), and (1 - tanh^2(u)) / 2 =
// 2 s (1 - s).
OCTET_HD float gelu_tanh_grad(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float e = exp_f32(-2.f * u);
  const float s = 1.f / (1.f + e);
  const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
  return s + 2.f * x * s * one_minus_sigmoid(s, e) * du;
}

OCTET_HD float relu(float x) { return x > 0.f ? x : 0.f; }
// 0 at x = 0 (and for NaN), as PyTorch's threshold_backward.
OCTET_HD float relu_grad(float x) { return x > 0.f ? 1.f : 0.f; }

// relu(x)^2 (TE's srelu).
OCTET_HD float squared_relu(float x) {
  const float r = relu(x);
  return r * r;
}
OCTET_HD float squared_relu_grad(float x) { return 2.f * relu(x); }

// x * sigmoid(x) (swish).
OCTET_HD float silu(float x) { return x / (1.f + exp_f32(-x)); }
// d/dx: s + x s (1 - s).
OCTET_HD float silu_grad(float x) {
  const float e = exp_f32(-x);
  const float s = 1.f / (1.f + e);
  return s * (1.f + x * one_minus_sigmoid(s, e));
}

}  // namespace octet::math
