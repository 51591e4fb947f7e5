// Pointwise and gated activations, forward and backward, on the GPU: grid-stride loops over the
// elements (kVec at a time where the buffers allow) with the math of kernels/math/activation.h,
// so the numbers match the CPU kernels. Every operand is f32 or bf16 (ActIn / ActOut).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/math/activation_kind.h"

namespace octet::cuda {
namespace {

using math::act;
using math::act_grad;
using ops::Activation;

template <Activation kAct, typename I>
__global__ void forward_kernel(ActIn x, ActOut y, I n, bool vector) {
  grid_stride_vec(
      n, vector,
      [&](I i) {
        Vec<float> v = x.vec(i);
        for (int k = 0; k < kVec; ++k) v.v[k] = act<kAct>(v.v[k]);
        y.set_vec(i, v);
      },
      [&](I i) { y.set(i, act<kAct>(x[i])); });
}

template <Activation kAct, typename I>
__global__ void backward_kernel(ActIn dy, ActIn x, ActOut dx, I n, bool vector) {
  grid_stride_vec(
      n, vector,
      [&](I i) {
        const Vec<float> d = dy.vec(i), v = x.vec(i);
        Vec<float> out;
        for (int k = 0; k < kVec; ++k) out.v[k] = d.v[k] * act_grad<kAct>(v.v[k]);
        dx.set_vec(i, out);
      },
      [&](I i) { dx.set(i, dy[i] * act_grad<kAct>(x[i])); });
}

// x (rows, 2h) = [a | g] per row -> y (rows, h) = act(a) * g, kVec columns at a time when
// `vector` (h a multiple of kVec, buffers aligned): the (row, group) walk has h / kVec groups a
// row.
template <Activation kAct, typename I>
__global__ void gated_forward_kernel(ActIn x, ActOut y, I rows, I h, bool vector) {
  const I w = vector ? kVec : 1, n = rows * h / w;
  grid_stride_rows(n, h / w, [&](I i, I r, I c) {
    const ActIn row = x + static_cast<int64_t>(r * 2 * h);
    const I j = c * w;
    if (vector) {
      const Vec<float> a = row.vec(j), g = row.vec(h + j);
      Vec<float> out;
      for (int k = 0; k < kVec; ++k) out.v[k] = act<kAct>(a.v[k]) * g.v[k];
      y.set_vec(i * kVec, out);
    } else {
      y.set(i, act<kAct>(row[j]) * row[h + j]);
    }
  });
}

// dx (rows, 2h) = [dy * g * act'(a) | dy * act(a)].
template <Activation kAct, typename I>
__global__ void gated_backward_kernel(ActIn dy, ActIn x, ActOut dx, I rows, I h, bool vector) {
  const I w = vector ? kVec : 1, n = rows * h / w;
  grid_stride_rows(n, h / w, [&](I i, I r, I c) {
    const ActIn row = x + static_cast<int64_t>(r * 2 * h);
    const ActOut drow = dx + static_cast<int64_t>(r * 2 * h);
    const I j = c * w;
    if (vector) {
      const Vec<float> a = row.vec(j), g = row.vec(h + j), d = dy.vec(i * kVec);
      Vec<float> da, dg;
      for (int k = 0; k < kVec; ++k) {
        da.v[k] = d.v[k] * g.v[k] * act_grad<kAct>(a.v[k]);
        dg.v[k] = d.v[k] * act<kAct>(a.v[k]);
      }
      drow.set_vec(j, da);
      drow.set_vec(h + j, dg);
    } else {
      const float a = row[j], g = row[h + j], d = dy[i];
      drow.set(j, d * g * act_grad<kAct>(a));
      drow.set(h + j, d * act<kAct>(a));
    }
  });
}

}  // namespace

void CudaBackend::activation(Activation a, const Tensor& x, Tensor& y) const {
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_of(x);
  const bool vector = act_vec_ok(x) && act_vec_ok(y);
  with_index_type(n, [&]<typename I>(I) {
    math::dispatch_activation(a, [&]<Activation kAct>() {
      forward_kernel<kAct, I><<<vec_blocks_for(n), kThreads, 0, stream>>>(
          act_in(x), act_out(y), static_cast<I>(n), vector);
      OCTET_CUDA_LAUNCH_CHECK("activation");
    });
  });
}

void CudaBackend::activation_backward(Activation a, const Tensor& dy, const Tensor& x,
                                      Tensor& dx) const {
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_of(x);
  const bool vector = act_vec_ok(dy) && act_vec_ok(x) && act_vec_ok(dx);
  with_index_type(n, [&]<typename I>(I) {
    math::dispatch_activation(a, [&]<Activation kAct>() {
      backward_kernel<kAct, I><<<vec_blocks_for(n), kThreads, 0, stream>>>(
          act_in(dy), act_in(x), act_out(dx), static_cast<I>(n), vector);
      OCTET_CUDA_LAUNCH_CHECK("activation_backward");
    });
  });
}

void CudaBackend::gated_activation(Activation a, const Tensor& x, Tensor& y) const {
  const int64_t rows = x.rows(), h = x.cols() / 2;
  if (rows * h == 0) return;
  cudaStream_t stream = stream_of(x);  // x (rows, 2h): [a | g]; y (rows, h)
  const bool vector = h % kVec == 0 && act_vec_ok(x) && act_vec_ok(y);
  const int64_t n = rows * 2 * h;  // the largest index: of x
  const unsigned blocks = vector ? vec_blocks_for(rows * h) : blocks_for(rows * h);
  with_index_type(n, [&]<typename I>(I) {
    math::dispatch_activation(a, [&]<Activation kAct>() {
      gated_forward_kernel<kAct, I><<<blocks, kThreads, 0, stream>>>(
          act_in(x), act_out(y), static_cast<I>(rows), static_cast<I>(h), vector);
      OCTET_CUDA_LAUNCH_CHECK("gated_activation");
    });
  });
}

void CudaBackend::gated_activation_backward(Activation a, const Tensor& dy, const Tensor& x,
                                            Tensor& dx) const {
  const int64_t rows = x.rows(), h = x.cols() / 2;
  if (rows * h == 0) return;
  cudaStream_t stream = stream_of(x);  // dy (rows, h); x, dx (rows, 2h)
  const bool vector = h % kVec == 0 && act_vec_ok(dy) && act_vec_ok(x) && act_vec_ok(dx);
  const int64_t n = rows * 2 * h;  // the largest index: of x and dx
  const unsigned blocks = vector ? vec_blocks_for(rows * h) : blocks_for(rows * h);
  with_index_type(n, [&]<typename I>(I) {
    math::dispatch_activation(a, [&]<Activation kAct>() {
      gated_backward_kernel<kAct, I><<<blocks, kThreads, 0, stream>>>(
          act_in(dy), act_in(x), act_out(dx), static_cast<I>(rows), static_cast<I>(h), vector);
      OCTET_CUDA_LAUNCH_CHECK("gated_activation_backward");
    });
  });
}

}  // namespace octet::cuda
