// Row-wise FP8 (kernels/rowwise.h) on the GPU: one scale per row from the row's amax, and the
// inverse. The scale rule is runtime/fp8_scaling.h's and the element cast runtime/fp8.h's, so the
// bytes and scales are the CPU's (kernels/cpu/rowwise.cpp).
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/fp8_scaling.h"

namespace octet::cuda {
namespace {

struct RowCast {
  float fp8_max, amax_epsilon, inf_value;
  bool power_2;
};

// One thread block per row: the row's amax, its scale, then the cast of its values.
template <typename In, bool kE4M3>
__global__ void rowwise_kernel(const In* x, uint8_t* q, float* scale_inv, int64_t cols, RowCast p,
                               unsigned long long* stats) {
  const int64_t r = blockIdx.x;
  const In* xr = x + r * cols;
  float m = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float a = fabsf(load_in(xr, c));
    m = a > m ? a : m;  // a NaN compares false and never wins, as in the CPU's fmax
  }
  m = block_reduce(m, MaxOp(), 0.f);  // every operand is a number: the max is exact
  const float scale = blockwise_scale(m, p.fp8_max, p.amax_epsilon, p.power_2, p.inf_value);
  if (threadIdx.x == 0) scale_inv[r] = scale_inverse(scale);
  CastTally tally;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = load_in(xr, c);
    const float y = __fmul_rn(v, scale);
    const uint8_t b = kE4M3 ? to_e4m3(y) : to_e5m2(y);
    if (stats != nullptr) tally.add_fp8(v, y, b, kE4M3 ? kE4M3Max : kE5M2Max);
    q[r * cols + c] = b;
  }
  tally.flush_warp(stats);  // whole warps reach it
}

// out (rows, cols) = fp8 value * its row's scale_inv, f32 or bf16.
template <bool kE4M3>
__global__ void dequantize_rowwise_kernel(const uint8_t* q, const float* scale_inv, void* out,
                                          DType dout, int64_t cols, int64_t n) {
  grid_stride_rows(n, cols, [&](int64_t i, int64_t r, int64_t) {
    const float v = kE4M3 ? from_e4m3(q[i]) : from_e5m2(q[i]);
    store_f32(out, dout, i, mul_keep_nan(v, scale_inv[r]));  // NaN codes keep the CPU's bits
  });
}

template <typename In, bool kE4M3>
void launch_rowwise(const Tensor& x, const RowCast& p, Tensor& data, Tensor& scale_inv,
                    unsigned long long* stats) {
  OCTET_CHECK(x.rows() <= int64_t{0x7FFFFFFF}, "quantize_rowwise: ", x, " has too many rows");
  rowwise_kernel<In, kE4M3><<<static_cast<unsigned>(x.rows()), kThreads, 0, stream_of(x)>>>(
      static_cast<const In*>(x.data()), data.data_as<uint8_t>(), scale_inv.data_as<float>(),
      x.cols(), p, stats);
  OCTET_CUDA_LAUNCH_CHECK("rowwise_kernel");
}

}  // namespace

void CudaBackend::quantize_rowwise(const Tensor& x, const ops::RowwiseCast& cast, Tensor& data,
                                   Tensor& scale_inv, FP8CastCounts* counts) const {
  if (x.rows() == 0) return;  // a row of no values still gets its scale (1)
  unsigned long long* stats = cast_stats_words(counts, x.device(), x.numel());
  // The largest finite value of the input dtype: a scale that overflows becomes it.
  const float inf_value = x.dtype() == DType::kBF16 ? from_bf16(0x7F7Fu) : FLT_MAX;
  const RowCast p{cast.fp8_max, cast.amax_epsilon, inf_value, cast.power_2_scale};
  dispatch_fp8_cast(x.dtype(), data.dtype(), [&]<typename In, bool kE4M3>() {
    launch_rowwise<In, kE4M3>(x, p, data, scale_inv, stats);
  });
  add_flat_block_scale_spread(scale_inv, SpreadScales::kF32, counts);
}

void CudaBackend::dequantize_rowwise(const Tensor& data, const Tensor& scale_inv,
                                     Tensor& out) const {
  const int64_t n = data.numel();
  if (n == 0) return;
  const uint8_t* q = data.data_as<uint8_t>();
  const float* s = scale_inv.data_as<float>();
  const cudaStream_t stream = stream_of(data);
  if (data.dtype() == DType::kE4M3) {
    dequantize_rowwise_kernel<true>
        <<<blocks_for(n), kThreads, 0, stream>>>(q, s, out.data(), out.dtype(), data.cols(), n);
  } else {
    dequantize_rowwise_kernel<false>
        <<<blocks_for(n), kThreads, 0, stream>>>(q, s, out.data(), out.dtype(), data.cols(), n);
  }
  OCTET_CUDA_LAUNCH_CHECK("dequantize_rowwise_kernel");
}

}  // namespace octet::cuda
