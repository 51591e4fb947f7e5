// Pointwise and gated activations, forward and backward, on the GPU: grid-stride loops over the
// elements (kVec at a time where the buffers allow) with the math of kernels/math/activation.h,
// so the numbers match the CPU kernels.
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

template <Activation kAct, typename I>
__global__ void forward_kernel(const float* x, float* y, I n, bool vector) {
  grid_stride_vec(
      n, vector,
      [&](I i) {
        Vec<float> v = load_vec(x, i);
        for (int k = 0; k < kVec; ++k) v.v[k] = act<kAct>(v.v[k]);
        store_vec(y, i, v);
      },
      [&](I i) { y[i] = act<kAct>(x[i]); });
}

template <Activation kAct, typename I>
__global__ void backward_kernel(const float* dy, const float* x, float* dx, I n, bool vector) {
  grid_stride_vec(
      n, vector,
      [&](I i) {
        const Vec<float> d = load_vec(dy, i), v = load_vec(x, i);
        Vec<float> out;
        for (int k = 0; k < kVec; ++k) out.v[k] = d.v[k] * act_grad<kAct>(v.v[k]);
        store_vec(dx, i, out);
      },
      [&](I i) { dx[i] = dy[i] * act_grad<kAct>(x[i]); });
}

// x (rows, 2h) = [a | g] per row -> y (rows, h) = act(a) * g, kVec columns at a time when
// `vector` (h a multiple of kVec, buffers aligned): the (row, group) walk has h / kVec groups a
// row.
template <Activation kAct, typename I>
__global__ void gated_forward_kernel(const float* x, float* y, I rows, I h, bool vector) {
  const I w = vector ? kVec : 1, n = rows * h / w;
  const I first = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  if (first >= n) return;
  auto at = math::BasicGridRowCol<I>::start(first, stride, h / w);
  for (I i = first; i < n; i += stride, at.advance()) {
    const float* row = x + at.row * 2 * h;
    const I j = at.col * w;
    if (vector) {
      const Vec<float> a = load_vec(row, j), g = load_vec(row, h + j);
      Vec<float> out;
      for (int k = 0; k < kVec; ++k) out.v[k] = act<kAct>(a.v[k]) * g.v[k];
      store_vec(y, i * kVec, out);
    } else {
      y[i] = act<kAct>(row[j]) * row[h + j];
    }
  }
}

// dx (rows, 2h) = [dy * g * act'(a) | dy * act(a)].
template <Activation kAct, typename I>
__global__ void gated_backward_kernel(const float* dy, const float* x, float* dx, I rows, I h,
                                      bool vector) {
  const I w = vector ? kVec : 1, n = rows * h / w;
  const I first = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  if (first >= n) return;
  auto at = math::BasicGridRowCol<I>::start(first, stride, h / w);
  for (I i = first; i < n; i += stride, at.advance()) {
    const float* row = x + at.row * 2 * h;
    float* drow = dx + at.row * 2 * h;
    const I j = at.col * w;
    if (vector) {
      const Vec<float> a = load_vec(row, j), g = load_vec(row, h + j), d = load_vec(dy, i * kVec);
      Vec<float> da, dg;
      for (int k = 0; k < kVec; ++k) {
        da.v[k] = d.v[k] * g.v[k] * act_grad<kAct>(a.v[k]);
        dg.v[k] = d.v[k] * act<kAct>(a.v[k]);
      }
      store_vec(drow, j, da);
      store_vec(drow, h + j, dg);
    } else {
      const float a = row[j], g = row[h + j], d = dy[i];
      drow[j] = d * g * act_grad<kAct>(a);
      drow[h + j] = d * act<kAct>(a);
    }
  }
}

bool vec_ok(const void* p) { return vec_aligned(p, sizeof(float)); }

}  // namespace

void activation(Activation a, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
  cudaStream_t stream = stream_of(x);
  const bool vector = vec_ok(px) && vec_ok(py);
  with_index_type(n, [&]<typename I>(I) {
    math::dispatch_activation(a, [&]<Activation kAct>() {
      forward_kernel<kAct, I>
          <<<vec_blocks_for(n), kThreads, 0, stream>>>(px, py, static_cast<I>(n), vector);
      OCTET_CUDA_LAUNCH_CHECK("activation");
    });
  });
}

void activation_backward(Activation a, const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const float* pdy = dy.data_as<float>();
  const float* px = x.data_as<float>();
  float* pdx = dx.data_as<float>();
  cudaStream_t stream = stream_of(x);
  const bool vector = vec_ok(pdy) && vec_ok(px) && vec_ok(pdx);
  with_index_type(n, [&]<typename I>(I) {
    math::dispatch_activation(a, [&]<Activation kAct>() {
      backward_kernel<kAct, I>
          <<<vec_blocks_for(n), kThreads, 0, stream>>>(pdy, px, pdx, static_cast<I>(n), vector);
      OCTET_CUDA_LAUNCH_CHECK("activation_backward");
    });
  });
}

void gated_activation(Activation a, const Tensor& x, Tensor& y) {
  const int64_t rows = x.rows(), h = x.cols() / 2;
  if (rows * h == 0) return;
  const float* px = x.data_as<float>();  // (rows, 2h): [a | g]
  float* py = y.data_as<float>();        // (rows, h)
  cudaStream_t stream = stream_of(x);
  const bool vector = h % kVec == 0 && vec_ok(px) && vec_ok(py);
  const int64_t n = rows * 2 * h;  // the largest index: of x
  const unsigned blocks = vector ? vec_blocks_for(rows * h) : blocks_for(rows * h);
  with_index_type(n, [&]<typename I>(I) {
    math::dispatch_activation(a, [&]<Activation kAct>() {
      gated_forward_kernel<kAct, I><<<blocks, kThreads, 0, stream>>>(px, py, static_cast<I>(rows),
                                                                     static_cast<I>(h), vector);
      OCTET_CUDA_LAUNCH_CHECK("gated_activation");
    });
  });
}

void gated_activation_backward(Activation a, const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t rows = x.rows(), h = x.cols() / 2;
  if (rows * h == 0) return;
  const float* pdy = dy.data_as<float>();  // (rows, h)
  const float* px = x.data_as<float>();    // (rows, 2h)
  float* pdx = dx.data_as<float>();        // (rows, 2h)
  cudaStream_t stream = stream_of(x);
  const bool vector = h % kVec == 0 && vec_ok(pdy) && vec_ok(px) && vec_ok(pdx);
  const int64_t n = rows * 2 * h;  // the largest index: of x and dx
  const unsigned blocks = vector ? vec_blocks_for(rows * h) : blocks_for(rows * h);
  with_index_type(n, [&]<typename I>(I) {
    math::dispatch_activation(a, [&]<Activation kAct>() {
      gated_backward_kernel<kAct, I><<<blocks, kThreads, 0, stream>>>(
          pdy, px, pdx, static_cast<I>(rows), static_cast<I>(h), vector);
      OCTET_CUDA_LAUNCH_CHECK("gated_activation_backward");
    });
  });
}

}  // namespace octet::cuda
