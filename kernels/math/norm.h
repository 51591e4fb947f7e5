// LayerNorm / RMSNorm statistics and gradient helpers shared by the CPU and CUDA kernels: Welford
// merging for tree reductions, the corrected two-pass variance and the per-element input gradient.
#pragma once

#include <cmath>

#include "runtime/macros.h"

namespace octet::math {

// Running count, mean and sum of squared deviations (Welford); stays accurate when the mean is
// large against the spread, where E[x^2] - E[x]^2 cancels catastrophically.
struct WelfordStats {
  float count = 0.f;
  float mean = 0.f;
  float m2 = 0.f;
};

OCTET_HD void welford_push(WelfordStats& s, float x) {
  s.count += 1.f;
  const float d = x - s.mean;
  s.mean += d / s.count;
  s.m2 += d * (x - s.mean);
}

// Chan et al.'s pairwise combination: how per-thread or per-lane partial statistics meet.
OCTET_HD WelfordStats welford_merge(const WelfordStats& a, const WelfordStats& b) {
  const float count = a.count + b.count;
  if (count == 0.f) return a;
  const float d = b.mean - a.mean;
  const float wb = b.count / count;
  return {count, a.mean + d * wb, a.m2 + b.m2 + d * d * a.count * wb};
}

// Population variance from the second pass over deviations d_i = x_i - mean: sum_sq = sum d^2,
// sum = sum d. The sum term removes the first-order error of a rounded mean (Chan, Golub and
// LeVeque's corrected two-pass algorithm).
OCTET_HD float corrected_variance(float sum_sq, float sum, float n) {
  const float v = (sum_sq - sum * sum / n) / n;
  return v > 0.f ? v : 0.f;
}

OCTET_HD float rsqrt_eps(float variance, float eps) { return 1.f / std::sqrt(variance + eps); }

// dL/dx_i of y = xhat * scale (+ beta) where xhat = (x - mean) * rsigma, given g_i = dy_i *
// scale_i: rsigma * (g_i - mean(g) - xhat_i * mean(g * xhat)). RMSNorm passes mean_g = 0 (no mean
// is subtracted in its forward).
OCTET_HD float norm_input_grad(float g, float xhat, float mean_g, float mean_gx, float rsigma) {
  return rsigma * (g - mean_g - xhat * mean_gx);
}

}  // namespace octet::math
