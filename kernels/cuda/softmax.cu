// Softmax over the last dimension and its backward on the GPU: one block per row, block
// reductions for the row max, the sum of exponentials and the dy . y dot product. The exp is
// kernels/math/exp.h, as on the CPU.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/math/exp.h"

namespace octet::cuda {
namespace {

__global__ void softmax_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    // Shifting by the row max keeps every exp in (0, 1]: no overflow for any input. NaN entries
    // are skipped by the max (as on the CPU) and reach the sum, so the row becomes NaN.
    m = block_reduce(m, MaxOp(), -INFINITY);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += math::exp_f32(xr[c] - m);
    const float inv = 1.f / block_reduce(s, SumOp(), 0.f);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      yr[c] = math::exp_f32(xr[c] - m) * inv;
    }
  }
}

// dx = y * (dy - dot), dot = sum(dy * y): the Jacobian-vector product of softmax.
__global__ void softmax_backward_kernel(const float* dy, const float* y, float* dx, int64_t rows,
                                        int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t o = r * cols;
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += dy[o + c] * y[o + c];
    const float dot = block_reduce(s, SumOp(), 0.f);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      dx[o + c] = y[o + c] * (dy[o + c] - dot);
    }
  }
}

}  // namespace

void softmax(const Tensor& x, Tensor& y) {
  const int64_t rows = x.rows(), cols = x.cols();
  if (rows == 0 || cols == 0) return;
  softmax_kernel<<<row_blocks(rows), row_threads(cols), 0, stream_of(x)>>>(
      x.data_as<float>(), y.data_as<float>(), rows, cols);
  OCTET_CUDA_LAUNCH_CHECK("softmax");
}

void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  const int64_t rows = y.rows(), cols = y.cols();
  if (rows == 0 || cols == 0) return;
  softmax_backward_kernel<<<row_blocks(rows), row_threads(cols), 0, stream_of(y)>>>(
      dy.data_as<float>(), y.data_as<float>(), dx.data_as<float>(), rows, cols);
  OCTET_CUDA_LAUNCH_CHECK("softmax_backward");
}

}  // namespace octet::cuda
