// Cross-entropy over logit rows on the GPU: one block per row computes the row's log-sum-exp with
// the online softmax of kernels/math/softmax.h (one pass over the logits) and its loss; a
// single-block kernel then sums the counted rows' losses in f64 and divides by the count, so the
// mean never leaves the device, nor does the count of rows. The backward rebuilds softmax from
// the saved lse and reads dloss and the count on the device. Targets are checked on the device
// (runtime/cuda.h's deferred checks): a bad one makes its row's loss NaN and its gradient 0.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/math/exp.h"
#include "kernels/math/softmax.h"
#include "runtime/memory.h"

namespace octet::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kSumThreads = 1024;

// The CPU's message (kernels/nn.cpp) for a bad target of `op`.
int32_t register_target_check(const char* op) {
  return octet::cuda::register_device_check([op](const DeviceCheckRecord& r) {
    return std::string(op) + ": target " + std::to_string(r.value) + " at row " +
           std::to_string(r.position) + " is out of range for " + std::to_string(r.limit) +
           " classes (and is not ignore_index " + std::to_string(r.extra) + ")";
  });
}
const int32_t kForwardTargets = register_target_check("cross_entropy");
const int32_t kBackwardTargets = register_target_check("cross_entropy_backward");

__device__ __forceinline__ bool bad_target(int64_t t, int64_t ignore_index, int64_t cols) {
  return t != ignore_index && (t < 0 || t >= cols);
}

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
__global__ void cross_entropy_rows_kernel(ActIn logits, const Target* targets, int64_t ignore_index,
                                          int64_t rows, int64_t cols, float* lse, double* row_loss,
                                          DeviceCheckRecord* check) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const ActIn xr = logits + r * cols;
    math::OnlineSoftmax s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) push(s, xr[c]);
    s = block_merge(s);
    if (threadIdx.x == 0) {
      const float l = math::log_sum_exp(s);
      lse[r] = l;
      const int64_t t = static_cast<int64_t>(targets[r]);
      if (bad_target(t, ignore_index, cols)) {
        report_bad_value(check, r);
        row_loss[r] = NAN;
      } else {
        row_loss[r] = t != ignore_index ? static_cast<double>(l) - xr[t] : 0.0;
      }
    }
  }
}

// loss[0] = sum(row_loss) / count (0 when count is 0) and counted[0] = count, the rows whose
// target is not ignore_index; one block.
template <typename Target>
__global__ void mean_loss_kernel(const double* row_loss, const Target* targets,
                                 int64_t ignore_index, int64_t rows, float* loss,
                                 int64_t* counted) {
  __shared__ double partial[kSumThreads];
  __shared__ int64_t partial_count[kSumThreads];
  double s = 0.0;
  int64_t count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    s += row_loss[r];
    count += static_cast<int64_t>(targets[r]) != ignore_index ? 1 : 0;
  }
  partial[threadIdx.x] = s;
  partial_count[threadIdx.x] = count;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      partial[threadIdx.x] += partial[threadIdx.x + half];
      partial_count[threadIdx.x] += partial_count[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int64_t n = partial_count[0];
    loss[0] = n > 0 ? static_cast<float>(partial[0] / static_cast<double>(n)) : 0.f;
    counted[0] = n;
  }
}

// dlogits = g * (softmax - onehot) = g * exp(x - lse) - g at the target, with g = dloss / count
// as the CPU computes it (f64 divide, rounded to f32); 0 on ignored rows and everywhere when g is
// 0.
template <typename Target>
__global__ void cross_entropy_backward_kernel(const float* dloss, const int64_t* counted,
                                              ActIn logits, const Target* targets, const float* lse,
                                              int64_t ignore_index, int64_t rows, int64_t cols,
                                              ActOut dlogits, bool vector,
                                              DeviceCheckRecord* check) {
  const int64_t count = counted[0];
  const float g =
      count > 0 ? static_cast<float>(static_cast<double>(dloss[0]) / static_cast<double>(count))
                : 0.f;
  // Whether row r gets a gradient; a bad target is reported once, at its row's column 0.
  auto row_counts = [&](int64_t r, int64_t c, int64_t& t) {
    t = static_cast<int64_t>(targets[r]);
    const bool bad = bad_target(t, ignore_index, cols);
    if (bad && c == 0) report_bad_value(check, r);
    return !(bad || t == ignore_index || g == 0.f);
  };
  auto one = [&](float logit, float row_lse, int64_t c, int64_t t) {
    float v = g * math::exp_f32(logit - row_lse);
    if (c == t) v -= g;
    return v;
  };
  grid_stride_row_groups(
      rows * cols, cols, vector,
      [&](int64_t i, int64_t r, int64_t c) {
        int64_t t;
        Vec<float> d{};
        if (row_counts(r, c, t)) {
          const Vec<float> x = logits.vec(i);
          const float l = lse[r];
          for (int k = 0; k < kVec; ++k) d.v[k] = one(x.v[k], l, c + k, t);
        }
        dlogits.set_vec(i, d);
      },
      [&](int64_t i, int64_t r, int64_t c) {
        int64_t t;
        dlogits.set(i, row_counts(r, c, t) ? one(logits[i], lse[r], c, t) : 0.f);
      });
}

template <typename Target>
void launch_cross_entropy(const Tensor& logits, const Target* targets, int64_t ignore_index,
                          Tensor& loss, Tensor& lse, Tensor& counted, cudaStream_t stream) {
  const int64_t rows = logits.rows(), cols = logits.cols();
  Tensor row_loss;  // (N,) f64, held as (N, 2) f32 bytes: octet has no f64 dtype
  double* prow = nullptr;
  DeviceCheckRecord* check = octet::cuda::device_check_record(logits.device());
  if (rows > 0) {
    {
      MemTagScope tag(MemTag::kWorkspace);
      row_loss = Tensor::empty({rows, 2}, DType::kF32, logits.device());
    }
    prow = static_cast<double*>(row_loss.data());
    cross_entropy_rows_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(
        act_in(logits), targets, ignore_index, rows, cols, lse.data_as<float>(), prow, check);
    OCTET_CUDA_LAUNCH_CHECK("cross_entropy");
    finish_check(check, targets, kForwardTargets, cols, ignore_index, stream);
  }
  mean_loss_kernel<<<1, kSumThreads, 0, stream>>>(
      prow, targets, ignore_index, rows, loss.data_as<float>(), counted.data_as<int64_t>());
  OCTET_CUDA_LAUNCH_CHECK("cross_entropy_mean");
}

template <typename Target>
void launch_cross_entropy_backward(const Tensor& dloss, const Tensor& counted, const Tensor& logits,
                                   const Target* targets, const Tensor& lse, int64_t ignore_index,
                                   Tensor& dlogits, cudaStream_t stream) {
  const int64_t rows = logits.rows(), cols = logits.cols();
  DeviceCheckRecord* check = octet::cuda::device_check_record(logits.device());
  const bool vector = act_rows_vec_ok(logits, cols) && act_vec_ok(dlogits);
  const unsigned blocks = vector ? vec_blocks_for(rows * cols) : blocks_for(rows * cols);
  cross_entropy_backward_kernel<<<blocks, kThreads, 0, stream>>>(
      dloss.data_as<float>(), counted.data_as<int64_t>(), act_in(logits), targets,
      lse.data_as<float>(), ignore_index, rows, cols, act_out(dlogits), vector, check);
  OCTET_CUDA_LAUNCH_CHECK("cross_entropy_backward");
  finish_check(check, targets, kBackwardTargets, cols, ignore_index, stream);
}

}  // namespace

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                Tensor& loss, Tensor& lse, Tensor& counted) const {
  cudaStream_t stream = stream_of(logits);
  if (targets.dtype() == DType::kI32) {
    launch_cross_entropy(logits, targets.data_as<int32_t>(), ignore_index, loss, lse, counted,
                         stream);
  } else {
    launch_cross_entropy(logits, targets.data_as<int64_t>(), ignore_index, loss, lse, counted,
                         stream);
  }
}

void CudaBackend::cross_entropy_backward(const Tensor& dloss, const Tensor& counted,
                                         const Tensor& logits, const Tensor& targets,
                                         const Tensor& lse, int64_t ignore_index,
                                         Tensor& dlogits) const {
  if (logits.numel() == 0) return;
  cudaStream_t stream = stream_of(logits);
  if (targets.dtype() == DType::kI32) {
    launch_cross_entropy_backward(dloss, counted, logits, targets.data_as<int32_t>(), lse,
                                  ignore_index, dlogits, stream);
  } else {
    launch_cross_entropy_backward(dloss, counted, logits, targets.data_as<int64_t>(), lse,
                                  ignore_index, dlogits, stream);
  }
}

}  // namespace octet::cuda
