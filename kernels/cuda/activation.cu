// Pointwise and gated activations, forward and backward, on the GPU: grid-stride loops over the
// elements with the math of kernels/math/activation.h, so the numbers match the CPU kernels.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/math/activation_kind.h"

namespace octet::cuda {
namespace {

using math::act;
using math::act_grad;
using ops::Activation;

template <Activation kAct>
__global__ void forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = act<kAct>(x[i]);
  }
}

template <Activation kAct>
__global__ void backward_kernel(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dx[i] = dy[i] * act_grad<kAct>(x[i]);
  }
}

// x (rows, 2h) = [a | g] per row -> y (rows, h) = act(a) * g. Element i of y is row i / h,
// column i % h.
template <Activation kAct>
__global__ void gated_forward_kernel(const float* x, float* y, int64_t rows, int64_t h) {
  const int64_t n = rows * h;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  if (first >= n) return;
  math::GridRowCol at = math::GridRowCol::start(first, stride, h);
  for (int64_t i = first; i < n; i += stride, at.advance()) {
    const int64_t r = at.row, j = at.col;
    const float* row = x + r * 2 * h;
    y[i] = act<kAct>(row[j]) * row[h + j];
  }
}

// dx (rows, 2h) = [dy * g * act'(a) | dy * act(a)].
template <Activation kAct>
__global__ void gated_backward_kernel(const float* dy, const float* x, float* dx, int64_t rows,
                                      int64_t h) {
  const int64_t n = rows * h;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  if (first >= n) return;
  math::GridRowCol at = math::GridRowCol::start(first, stride, h);
  for (int64_t i = first; i < n; i += stride, at.advance()) {
    const int64_t r = at.row, j = at.col;
    const float* row = x + r * 2 * h;
    float* drow = dx + r * 2 * h;
    const float a = row[j], g = row[h + j], d = dy[i];
    drow[j] = d * g * act_grad<kAct>(a);
    drow[h + j] = d * act<kAct>(a);
  }
}

}  // namespace

void activation(Activation a, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
  cudaStream_t stream = stream_of(x);
  math::dispatch_activation(a, [&]<Activation kAct>() {
    forward_kernel<kAct><<<blocks_for(n), kThreads, 0, stream>>>(px, py, n);
    OCTET_CUDA_LAUNCH_CHECK("activation");
  });
}

void activation_backward(Activation a, const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const float* pdy = dy.data_as<float>();
  const float* px = x.data_as<float>();
  float* pdx = dx.data_as<float>();
  cudaStream_t stream = stream_of(x);
  math::dispatch_activation(a, [&]<Activation kAct>() {
    backward_kernel<kAct><<<blocks_for(n), kThreads, 0, stream>>>(pdy, px, pdx, n);
    OCTET_CUDA_LAUNCH_CHECK("activation_backward");
  });
}

void gated_activation(Activation a, const Tensor& x, Tensor& y) {
  const int64_t rows = x.rows(), h = x.cols() / 2;
  if (rows * h == 0) return;
  const float* px = x.data_as<float>();  // (rows, 2h): [a | g]
  float* py = y.data_as<float>();        // (rows, h)
  cudaStream_t stream = stream_of(x);
  math::dispatch_activation(a, [&]<Activation kAct>() {
    gated_forward_kernel<kAct><<<blocks_for(rows * h), kThreads, 0, stream>>>(px, py, rows, h);
    OCTET_CUDA_LAUNCH_CHECK("gated_activation");
  });
}

void gated_activation_backward(Activation a, const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t rows = x.rows(), h = x.cols() / 2;
  if (rows * h == 0) return;
  const float* pdy = dy.data_as<float>();  // (rows, h)
  const float* px = x.data_as<float>();    // (rows, 2h)
  float* pdx = dx.data_as<float>();        // (rows, 2h)
  cudaStream_t stream = stream_of(x);
  math::dispatch_activation(a, [&]<Activation kAct>() {
    gated_backward_kernel<kAct>
        <<<blocks_for(rows * h), kThreads, 0, stream>>>(pdy, px, pdx, rows, h);
    OCTET_CUDA_LAUNCH_CHECK("gated_activation_backward");
  });
}

}  // namespace octet::cuda
