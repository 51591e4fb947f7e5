// Row primitives (kernels/cpu/row_ops.h). `omp simd` reductions let GCC keep vector partial sums
// without -ffast-math (their order is fixed by the build, not by the thread count); the exp is
// kernels/math/exp.h.
#include "kernels/cpu/row_ops.h"

#include <cmath>

#include "kernels/cpu/simd.h"
#include "kernels/math/exp.h"

namespace octet::cpu::rowops {

OCTET_VECTOR_CLONES
float max(const float* x, int64_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

OCTET_VECTOR_CLONES
float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

OCTET_VECTOR_CLONES
float sum_exp(const float* x, float shift, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += math::exp_f32(x[i] - shift);
  return s;
}

OCTET_VECTOR_CLONES
float exp_store(const float* x, float shift, float* out, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const float e = math::exp_f32(x[i] - shift);
    out[i] = e;
    s += e;
  }
  return s;
}

OCTET_VECTOR_CLONES
void scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace octet::cpu::rowops
