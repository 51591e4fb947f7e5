// Cross-entropy over logit rows on the GPU: one block per row computes the row's log-sum-exp with
// the online softmax of kernels/math/softmax.h (one pass over the logits) and its loss; a
// single-block kernel then sums the counted rows' losses in f64 and divides by the count, so the
// mean never leaves the device. The backward rebuilds softmax from the saved lse.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/math/exp.h"
#include "kernels/math/softmax.h"
#include "runtime/memory.h"

namespace octet::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kSumThreads = 1024;

// online_softmax_push with one exp where it can: when x <= max the merge's rescale factor is
// exp(0) = 1 exactly, so only exp(x - max) is new. A -inf x adds nothing (and would make
// -inf - -inf = NaN against an empty state); a NaN x lands in the sum and poisons the row, as on
// the CPU.
__device__ __forceinline__ void push(math::OnlineSoftmax& s, float x) {
  if (x > s.max) {
    s.sum = s.sum * math::exp_f32(s.max - x) + 1.f;  // exp(-inf) = 0 for the first value
    s.max = x;
  } else if (x != -INFINITY) {
    s.sum += math::exp_f32(x - s.max);
  }
}

// The block's online-softmax states merged (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result.
__device__ math::OnlineSoftmax block_merge(math::OnlineSoftmax s) {
  __shared__ float maxes[kWarp], sums[kWarp];
  __shared__ float result_max, result_sum;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const math::OnlineSoftmax other{__shfl_xor_sync(0xffffffffu, s.max, offset),
                                    __shfl_xor_sync(0xffffffffu, s.sum, offset)};
    s = math::online_softmax_merge(s, other);
  }
  __syncthreads();  // a previous call's readers are done
  if (lane == 0) {
    maxes[warp] = s.max;
    sums[warp] = s.sum;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / kWarp;
    math::OnlineSoftmax w;
    if (lane < warps) w = {maxes[lane], sums[lane]};
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const math::OnlineSoftmax other{__shfl_xor_sync(0xffffffffu, w.max, offset),
                                      __shfl_xor_sync(0xffffffffu, w.sum, offset)};
      w = math::online_softmax_merge(w, other);
    }
    if (lane == 0) {
      result_max = w.max;
      result_sum = w.sum;
    }
  }
  __syncthreads();
  return {result_max, result_sum};
}

// lse[r] of every row, and row_loss[r] = lse - logit[target] (0 on ignored rows) in f64.
template <typename Target>
__global__ void cross_entropy_rows_kernel(const float* logits, const Target* targets,
                                          int64_t ignore_index, int64_t rows, int64_t cols,
                                          float* lse, double* row_loss) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * cols;
    math::OnlineSoftmax s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) push(s, xr[c]);
    s = block_merge(s);
    if (threadIdx.x == 0) {
      const float l = math::log_sum_exp(s);
      lse[r] = l;
      const int64_t t = static_cast<int64_t>(targets[r]);
      row_loss[r] = t != ignore_index ? static_cast<double>(l) - xr[t] : 0.0;
    }
  }
}

// loss[0] = sum(row_loss) / count (0 when count is 0), one block.
__global__ void mean_loss_kernel(const double* row_loss, int64_t rows, int64_t count, float* loss) {
  __shared__ double partial[kSumThreads];
  double s = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += row_loss[r];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    loss[0] = count > 0 ? static_cast<float>(partial[0] / static_cast<double>(count)) : 0.f;
  }
}

// dlogits = g * (softmax - onehot) = g * exp(x - lse) - g at the target; 0 on ignored rows and
// everywhere when g is 0.
template <typename Target>
__global__ void cross_entropy_backward_kernel(float g, const float* logits, const Target* targets,
                                              const float* lse, int64_t ignore_index, int64_t rows,
                                              int64_t cols, float* dlogits) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t t = static_cast<int64_t>(targets[r]);
    if (t == ignore_index || g == 0.f) {
      dlogits[i] = 0.f;
      continue;
    }
    float v = g * math::exp_f32(logits[i] - lse[r]);
    if (c == t) v -= g;
    dlogits[i] = v;
  }
}

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, int64_t count,
                   Tensor& loss, Tensor& lse) {
  const int64_t rows = logits.rows(), cols = logits.cols();
  cudaStream_t stream = stream_of(logits);
  Tensor row_loss;  // (N,) f64, held as (N, 2) f32 bytes: octet has no f64 dtype
  double* prow = nullptr;
  if (rows > 0) {
    {
      MemTagScope tag(MemTag::kWorkspace);
      row_loss = Tensor::empty({rows, 2}, DType::kF32, logits.device());
    }
    prow = static_cast<double*>(row_loss.data());
    const float* px = logits.data_as<float>();  // (N, V)
    if (targets.dtype() == DType::kI32) {
      cross_entropy_rows_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(
          px, targets.data_as<int32_t>(), ignore_index, rows, cols, lse.data_as<float>(), prow);
    } else {
      cross_entropy_rows_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(
          px, targets.data_as<int64_t>(), ignore_index, rows, cols, lse.data_as<float>(), prow);
    }
    OCTET_CUDA_LAUNCH_CHECK("cross_entropy");
  }
  mean_loss_kernel<<<1, kSumThreads, 0, stream>>>(prow, rows, count, loss.data_as<float>());
  OCTET_CUDA_LAUNCH_CHECK("cross_entropy_mean");
}

void cross_entropy_backward(float grad_per_row, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, int64_t ignore_index, Tensor& dlogits) {
  const int64_t rows = logits.rows(), cols = logits.cols();
  if (rows * cols == 0) return;
  const unsigned blocks = blocks_for(rows * cols);
  cudaStream_t stream = stream_of(logits);
  const float* px = logits.data_as<float>();  // (N, V)
  float* pd = dlogits.data_as<float>();       // (N, V)
  if (targets.dtype() == DType::kI32) {
    cross_entropy_backward_kernel<<<blocks, kThreads, 0, stream>>>(
        grad_per_row, px, targets.data_as<int32_t>(), lse.data_as<float>(), ignore_index, rows,
        cols, pd);
  } else {
    cross_entropy_backward_kernel<<<blocks, kThreads, 0, stream>>>(
        grad_per_row, px, targets.data_as<int64_t>(), lse.data_as<float>(), ignore_index, rows,
        cols, pd);
  }
  OCTET_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

}  // namespace octet::cuda
