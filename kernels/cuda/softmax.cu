// Softmax over the last dimension and its backward on the GPU: one block per row, block
// reductions for the row max, the sum of exponentials and the dy . y dot product. The exp is
// kernels/math/exp.h, as on the CPU. Operands are f32 or bf16 (ActIn / ActOut).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/math/exp.h"

namespace octet::cuda {
namespace {

// A block's loop over one row's columns, kVec at a time when `vector` (the row's start and cols
// are multiples of kVec), 32-bit indices. Only for loops whose per-thread order does not matter
// (max, elementwise): the sums keep one column per step, so their rounding is unchanged.
template <typename Group, typename One>
__device__ __forceinline__ void row_loop(int cols, bool vector, Group&& group, One&& one) {
  int done = 0;
  if (vector) {
    const int groups = cols / kVec;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) group(g * kVec);
    done = groups * kVec;
  }
  for (int c = done + threadIdx.x; c < cols; c += blockDim.x) one(c);
}

__global__ void softmax_kernel(ActIn x, ActOut y, int64_t rows, int cols, bool vector) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const ActIn xr = x + r * cols;
    const ActOut yr = y + r * cols;
    float m = -INFINITY;
    // The max of a set, NaN skipped, whatever the order (a zero's sign in m cannot change any
    // x - m below).
    row_loop(
        cols, vector,
        [&](int c) {
          const Vec<float> v = xr.vec(c);
          for (int k = 0; k < kVec; ++k) m = fmaxf(m, v.v[k]);
        },
        [&](int c) { m = fmaxf(m, xr[c]); });
    // Shifting by the row max keeps every exp in (0, 1]: no overflow for any input. NaN entries
    // are skipped by the max (as on the CPU) and reach the sum, so the row becomes NaN.
    m = block_reduce(m, MaxOp(), -INFINITY);
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += math::exp_f32(xr[c] - m);
    const float inv = 1.f / block_reduce(s, SumOp(), 0.f);
    row_loop(
        cols, vector,
        [&](int c) {
          Vec<float> v = xr.vec(c);
          for (int k = 0; k < kVec; ++k) v.v[k] = math::exp_f32(v.v[k] - m) * inv;
          yr.set_vec(c, v);
        },
        [&](int c) { yr.set(c, math::exp_f32(xr[c] - m) * inv); });
  }
}

// dx = y * (dy - dot), dot = sum(dy * y): the Jacobian-vector product of softmax.
__global__ void softmax_backward_kernel(ActIn dy, ActIn y, ActOut dx, int64_t rows, int cols,
                                        bool vector) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const ActIn dyr = dy + r * cols;
    const ActIn yr = y + r * cols;
    const ActOut dxr = dx + r * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += dyr[c] * yr[c];
    const float dot = block_reduce(s, SumOp(), 0.f);
    row_loop(
        cols, vector,
        [&](int c) {
          const Vec<float> d = dyr.vec(c), v = yr.vec(c);
          Vec<float> out;
          for (int k = 0; k < kVec; ++k) out.v[k] = v.v[k] * (d.v[k] - dot);
          dxr.set_vec(c, out);
        },
        [&](int c) { dxr.set(c, yr[c] * (dyr[c] - dot)); });
  }
}

}  // namespace

void CudaBackend::softmax(const Tensor& x, Tensor& y) const {
  const int64_t rows = x.rows(), cols = x.cols();
  if (rows == 0 || cols == 0) return;
  OCTET_CHECK(cols <= int64_t{0x7FFFFFFF}, "softmax: rows of ", cols, " elements are too long");
  const bool vector = act_rows_vec_ok(x, cols) && act_rows_vec_ok(y, cols);
  softmax_kernel<<<row_blocks(rows), row_threads(cols), 0, stream_of(x)>>>(
      act_in(x), act_out(y), rows, static_cast<int>(cols), vector);
  OCTET_CUDA_LAUNCH_CHECK("softmax");
}

void CudaBackend::softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) const {
  const int64_t rows = y.rows(), cols = y.cols();
  if (rows == 0 || cols == 0) return;
  OCTET_CHECK(cols <= int64_t{0x7FFFFFFF}, "softmax_backward: rows of ", cols,
              " elements are too long");
  const bool vector =
      act_rows_vec_ok(dy, cols) && act_rows_vec_ok(y, cols) && act_rows_vec_ok(dx, cols);
  softmax_backward_kernel<<<row_blocks(rows), row_threads(cols), 0, stream_of(y)>>>(
      act_in(dy), act_in(y), act_out(dx), rows, static_cast<int>(cols), vector);
  OCTET_CUDA_LAUNCH_CHECK("softmax_backward");
}

}  // namespace octet::cuda
