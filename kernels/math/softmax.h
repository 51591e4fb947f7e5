// Softmax / log-sum-exp helpers shared by the CPU and CUDA kernels: online (streaming) max and
// sum, as flash-attention style kernels keep them per row, and their combination.
#pragma once

#include <cmath>

#include "kernels/math/exp.h"
#include "runtime/macros.h"

namespace octet::math {

// Running max and sum of exp(x - max) over the values seen so far. Start: max = -inf, sum = 0.
struct OnlineSoftmax {
  float max = -INFINITY;
  float sum = 0.f;
};

// Combines two partial states; the smaller max's sum is rescaled, so nothing overflows.
OCTET_HD OnlineSoftmax online_softmax_merge(const OnlineSoftmax& a, const OnlineSoftmax& b) {
  const float m = a.max > b.max ? a.max : b.max;
  if (m == -INFINITY) return a;  // both empty (or all -inf): exp(-inf - -inf) would be NaN
  return {m, a.sum * exp_f32(a.max - m) + b.sum * exp_f32(b.max - m)};
}

OCTET_HD void online_softmax_push(OnlineSoftmax& s, float x) {
  s = online_softmax_merge(s, {x, 1.f});
}

// log(sum_i exp(x_i)) of the values the state has seen; -inf when it has seen none.
OCTET_HD float log_sum_exp(const OnlineSoftmax& s) { return s.max + std::log(s.sum); }

}  // namespace octet::math
