// Vectorised primitives on one contiguous row of f32, shared by the softmax, attention and
// cross-entropy kernels. A reduction's order depends on the row and the build only, never on the
// thread count.
#pragma once

#include <cstdint>

namespace octet::cpu::rowops {

// Rows per parallel chunk for row-wise kernels: about `elements` elements each, at least one row.
inline int64_t row_grain(int64_t cols, int64_t elements = 8192) {
  return cols >= elements ? 1 : elements / (cols > 0 ? cols : 1);
}

float max(const float* x, int64_t n);  // -inf for n = 0; NaN entries are skipped
float dot(const float* a, const float* b, int64_t n);
float sum_exp(const float* x, float shift, int64_t n);                // sum exp(x - shift)
float exp_store(const float* x, float shift, float* out, int64_t n);  // out = exp(x - shift); sum
void scale(float* x, float s, int64_t n);                             // x *= s

}  // namespace octet::cpu::rowops
