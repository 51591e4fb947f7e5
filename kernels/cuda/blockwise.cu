// Blockwise FP8 (TE's Float8BlockScaling) on the GPU, in the layouts of runtime/blockwise_tensor.h:
// the 1x128 / 128x128 block cast, its expansion, the scale transpose, and the GEMM: cuBLASLt's
// block-scaled FP8 GEMM where it runs (gemm.cu), else the CPU's documented fallback (both
// operands expanded to f32, one f32 GEMM). The scale rule is
// runtime/fp8_scaling.h's and the element cast runtime/fp8.h's, so the bytes and scales are the
// CPU's (kernels/cpu/blockwise.cpp).
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/blockwise_tensor.h"
#include "runtime/fp8_scaling.h"

namespace octet::cuda {
namespace {

constexpr int kBlock = static_cast<int>(kFP8BlockLen);
constexpr int kPerLane = kBlock / kWarp;  // 1D: each lane of a block's warp holds 4 values
static_assert(kBlock % kWarp == 0, "a 1x128 block is whole warps' worth of values");

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The largest finite value of the input dtype: a block scale that overflows becomes it.
float value_for_inf(DType input) { return input == DType::kBF16 ? from_bf16(0x7F7Fu) : FLT_MAX; }

struct CastParams {
  float fp8_max, amax_epsilon, inf_value;
  bool power_2;
};

__device__ __forceinline__ float block_scale(float amax, const CastParams& p) {
  return blockwise_scale(amax, p.fp8_max, p.amax_epsilon, p.power_2, p.inf_value);
}

// The cast of one value, counted into `tally` when the launch counts.
template <bool kE4M3>
__device__ __forceinline__ uint8_t cast_one(float v, float scale, CastTally& tally, bool count) {
  const float y = __fmul_rn(v, scale);
  const uint8_t q = kE4M3 ? to_e4m3(y) : to_e5m2(y);
  if (count) tally.add_fp8(v, y, q, kE4M3 ? kE4M3Max : kE5M2Max);
  return q;
}

// 1D: one warp per block of 128 values of a row; warp w casts block w % col_blocks of row
// w / col_blocks. scale_inv is [col block][row] with row stride `stride`.
template <typename In, bool kE4M3>
__global__ void blockwise_1d_kernel(const In* x, uint8_t* q, float* scale_inv, int64_t rows,
                                    int64_t cols, int64_t col_blocks, int64_t stride, CastParams p,
                                    unsigned long long* stats) {
  const int lane = threadIdx.x % kWarp;
  CastTally tally;
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t step = int64_t{gridDim.x} * warps_per_block;
  const int64_t total = rows * col_blocks;
  // w is the same on every lane of a warp: whole warps enter and leave the loop together.
  const int64_t first = blockIdx.x * warps_per_block + threadIdx.x / kWarp;
  if (first >= total) return;
  // (row, column block) of warp w walked without a divide per step.
  math::GridRowCol at = math::GridRowCol::start(first, step, col_blocks);
  for (int64_t w = first; w < total; w += step, at.advance()) {
    const int64_t r = at.row, cb = at.col;
    float v[kPerLane];
    float m = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t c = cb * kBlock + k * kWarp + lane;
      v[k] = c < cols ? load_in(x, r * cols + c) : 0.f;
      const float a = fabsf(v[k]);
      m = a > m ? a : m;  // a NaN compares false and never wins, as in the CPU's fmax
    }
    m = warp_reduce(m, MaxOp());  // every operand is a number: the max is exact
    const float scale = block_scale(m, p);
    if (lane == 0) scale_inv[cb * stride + r] = scale_inverse(scale);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t c = cb * kBlock + k * kWarp + lane;
      if (c < cols) q[r * cols + c] = cast_one<kE4M3>(v[k], scale, tally, stats != nullptr);
    }
  }
  tally.flush_warp(stats);  // whole warps reach it
}

// An FP8 cast's input element as f32 (f32, or bf16 bits).
template <typename In>
__device__ __forceinline__ float in_value(In raw) {
  return load_in(&raw, 0);
}

// The tile of the both-ways cast in shared memory: 128 rows of 128 inputs, each row padded by 4
// bytes so that a warp reading down a column meets 32 different banks.
template <typename In>
constexpr int kTileStride = kBlock + static_cast<int>(4 / sizeof(In));
template <typename In>
constexpr size_t kTileBytes = size_t{kBlock} * kTileStride<In> * sizeof(In);

// 1D both ways from one read: one thread block per 128x128 tile of x (tile t: row band
// t / col_blocks, column block t % col_blocks). Each warp loads whole tile rows, casts their
// row-wise blocks from registers and keeps the values in shared memory; after the barrier each
// warp casts whole tile columns from there: the blocks of x's transpose. Values past the edge
// are 0 in the tile and in every amax. Row-wise: data (rows, cols), scale_inv [col block][row]
// with row stride row_stride; column-wise: data (cols, rows), scale_inv [row block][col] with
// row stride col_stride.
template <typename In, bool kE4M3>
__global__ void blockwise_both_kernel(const In* x, uint8_t* row_q, float* row_s, uint8_t* col_q,
                                      float* col_s, int64_t rows, int64_t cols, int64_t col_blocks,
                                      int64_t row_stride, int64_t col_stride, CastParams p,
                                      unsigned long long* stats) {
  extern __shared__ __align__(16) unsigned char tile_bytes[];
  In* tile = reinterpret_cast<In*>(tile_bytes);  // (128, kTileStride<In>)
  constexpr int kStride = kTileStride<In>;
  const int64_t rb = blockIdx.x / col_blocks, cb = blockIdx.x % col_blocks;
  const int64_t r0 = rb * kBlock, c0 = cb * kBlock;
  const int nr = static_cast<int>(rows - r0 < kBlock ? rows - r0 : kBlock);
  const int nc = static_cast<int>(cols - c0 < kBlock ? cols - c0 : kBlock);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const bool count = stats != nullptr;
  CastTally tally;
  // Row-wise: tile row tr is warp tr % warps's; lane holds columns lane + 32 k.
  for (int tr = warp; tr < kBlock; tr += warps) {
    In raw[kPerLane];
    float v[kPerLane];
    float m = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int c = k * kWarp + lane;
      raw[k] = tr < nr && c < nc ? x[(r0 + tr) * cols + c0 + c] : In{0};
      tile[tr * kStride + c] = raw[k];
      v[k] = in_value(raw[k]);
      const float a = fabsf(v[k]);
      m = a > m ? a : m;  // a NaN compares false and never wins
    }
    if (tr >= nr) continue;  // the same on every lane
    m = warp_reduce(m, MaxOp());
    const float scale = block_scale(m, p);
    if (lane == 0) row_s[cb * row_stride + r0 + tr] = scale_inverse(scale);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int c = k * kWarp + lane;
      if (c < nc) row_q[(r0 + tr) * cols + c0 + c] = cast_one<kE4M3>(v[k], scale, tally, count);
    }
  }
  __syncthreads();
  // Column-wise: tile column tc is warp tc % warps's; lane holds rows lane + 32 k.
  for (int tc = warp; tc < nc; tc += warps) {
    float v[kPerLane];
    float m = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      v[k] = in_value(tile[(k * kWarp + lane) * kStride + tc]);
      const float a = fabsf(v[k]);
      m = a > m ? a : m;
    }
    m = warp_reduce(m, MaxOp());
    const float scale = block_scale(m, p);
    if (lane == 0) col_s[rb * col_stride + c0 + tc] = scale_inverse(scale);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int r = k * kWarp + lane;
      if (r < nr) col_q[(c0 + tc) * rows + r0 + r] = cast_one<kE4M3>(v[k], scale, tally, count);
    }
  }
  tally.flush_warp(stats);  // whole warps reach it
}

// 2D: one thread block per 128x128 tile (tile t: row band t / col_blocks, column block
// t % col_blocks); scale_inv is [row block][col block] with row stride `stride`.
template <typename In, bool kE4M3>
__global__ void blockwise_2d_kernel(const In* x, uint8_t* q, float* scale_inv, int64_t rows,
                                    int64_t cols, int64_t col_blocks, int64_t stride, CastParams p,
                                    unsigned long long* stats) {
  const int64_t rb = blockIdx.x / col_blocks, cb = blockIdx.x % col_blocks;
  const int64_t r0 = rb * kBlock, c0 = cb * kBlock;
  const int64_t nr = rows - r0 < kBlock ? rows - r0 : kBlock;
  const int64_t nc = cols - c0 < kBlock ? cols - c0 : kBlock;
  // Thread t takes column t % kBlock of rows t / kBlock, + blockDim.x / kBlock, ... of the tile
  // (constant shifts; blockDim.x is a multiple of kBlock). The max is exact in any order.
  static_assert(kThreads % kBlock == 0, "the 2D launch has whole tile rows of threads");
  const int tc = threadIdx.x % kBlock, tr = threadIdx.x / kBlock, lanes = blockDim.x / kBlock;
  const bool in_tile = tc < nc;
  float m = 0.f;
  for (int64_t rr = tr; in_tile && rr < nr; rr += lanes) {
    const float a = fabsf(load_in(x, (r0 + rr) * cols + c0 + tc));
    m = a > m ? a : m;
  }
  m = block_reduce(m, MaxOp(), 0.f);
  const float scale = block_scale(m, p);
  if (threadIdx.x == 0) scale_inv[rb * stride + cb] = scale_inverse(scale);
  CastTally tally;
  for (int64_t rr = tr; in_tile && rr < nr; rr += lanes) {
    const int64_t at = (r0 + rr) * cols + c0 + tc;
    q[at] = cast_one<kE4M3>(load_in(x, at), scale, tally, stats != nullptr);
  }
  tally.flush_warp(stats);  // whole warps reach it
}

// out (rows, cols) = fp8 value * its block's scale_inv, f32 or bf16.
template <bool kE4M3>
__global__ void dequantize_blockwise_kernel(const uint8_t* q, const float* scale_inv, void* out,
                                            DType dout, int64_t cols, int64_t stride, bool two_d,
                                            int64_t n) {
  grid_stride_rows(n, cols, [&](int64_t i, int64_t r, int64_t c) {
    const int64_t kb = c / kBlock;
    const float s = scale_inv[two_d ? (r / kBlock) * stride + kb : kb * stride + r];
    const float v = kE4M3 ? from_e4m3(q[i]) : from_e5m2(q[i]);
    store_f32(out, dout, i, mul_keep_nan(v, s));  // NaN codes keep the CPU's NaN bits
  });
}

// dst[c][r] = src[r][c] for r < rows, c < cols, element size es (dst zeroed before).
__global__ void transpose_scales_kernel(const uint8_t* src, uint8_t* dst, int64_t rows,
                                        int64_t cols, int64_t src_stride, int64_t dst_stride,
                                        int64_t es) {
  // One thread per element (r, c), its es bytes in a loop.
  grid_stride_rows(rows * cols, cols, [&](int64_t, int64_t r, int64_t c) {
    for (int64_t byte = 0; byte < es; ++byte) {
      dst[(c * dst_stride + r) * es + byte] = src[(r * src_stride + c) * es + byte];
    }
  });
}

template <typename In, bool kE4M3>
void launch_quantize(const Tensor& x, const ops::BlockwiseCast& cast, Tensor& data,
                     Tensor& scale_inv, unsigned long long* stats) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t col_blocks = ceil_div(cols, kBlock);
  const int64_t stride = scale_inv.size(1);
  const CastParams p{cast.fp8_max, cast.amax_epsilon, value_for_inf(x.dtype()), cast.power_2_scale};
  const cudaStream_t stream = stream_of(x);
  const auto* in = static_cast<const In*>(x.data());
  uint8_t* q = data.data_as<uint8_t>();
  float* s = scale_inv.data_as<float>();
  if (cast.blocks == BlockScaling::k1D) {
    blockwise_1d_kernel<In, kE4M3><<<blocks_for(rows * col_blocks * kWarp), kThreads, 0, stream>>>(
        in, q, s, rows, cols, col_blocks, stride, p, stats);
    OCTET_CUDA_LAUNCH_CHECK("blockwise_1d_kernel");
    return;
  }
  const int64_t tiles = ceil_div(rows, kBlock) * col_blocks;
  OCTET_CHECK(tiles <= int64_t{0x7FFFFFFF}, "quantize_blockwise: ", x, " has too many tiles");
  blockwise_2d_kernel<In, kE4M3><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      in, q, s, rows, cols, col_blocks, stride, p, stats);
  OCTET_CUDA_LAUNCH_CHECK("blockwise_2d_kernel");
}

template <typename In, bool kE4M3>
void launch_quantize_both(const Tensor& x, const ops::BlockwiseCast& cast, Tensor& rowwise,
                          Tensor& rowwise_scale_inv, Tensor& columnwise,
                          Tensor& columnwise_scale_inv, unsigned long long* stats) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t col_blocks = ceil_div(cols, kBlock);
  const int64_t tiles = ceil_div(rows, kBlock) * col_blocks;
  OCTET_CHECK(tiles <= int64_t{0x7FFFFFFF}, "quantize_blockwise_both: ", x, " has too many tiles");
  const CastParams p{cast.fp8_max, cast.amax_epsilon, value_for_inf(x.dtype()), cast.power_2_scale};
  constexpr size_t smem = kTileBytes<In>;
  if constexpr (smem > 48 * 1024) {  // f32: above the default, the kernel opts in
    OCTET_CUDA_CHECK(cudaFuncSetAttribute(blockwise_both_kernel<In, kE4M3>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  }
  blockwise_both_kernel<In, kE4M3><<<static_cast<unsigned>(tiles), kThreads, smem, stream_of(x)>>>(
      static_cast<const In*>(x.data()), rowwise.data_as<uint8_t>(),
      rowwise_scale_inv.data_as<float>(), columnwise.data_as<uint8_t>(),
      columnwise_scale_inv.data_as<float>(), rows, cols, col_blocks, rowwise_scale_inv.size(1),
      columnwise_scale_inv.size(1), p, stats);
  OCTET_CUDA_LAUNCH_CHECK("blockwise_both_kernel");
}

}  // namespace

void CudaBackend::quantize_blockwise_both(const Tensor& x, const ops::BlockwiseCast& cast,
                                          Tensor& rowwise, Tensor& rowwise_scale_inv,
                                          Tensor& columnwise, Tensor& columnwise_scale_inv,
                                          FP8CastCounts* counts) const {
  // Each element is cast twice, once per direction, as by two quantize_blockwise calls.
  unsigned long long* stats = cast_stats_words(counts, x.device(), 2 * x.numel());
  const cudaStream_t stream = stream_of(x);
  OCTET_CUDA_CHECK(
      cudaMemsetAsync(rowwise_scale_inv.data(), 0, rowwise_scale_inv.nbytes(), stream));
  OCTET_CUDA_CHECK(
      cudaMemsetAsync(columnwise_scale_inv.data(), 0, columnwise_scale_inv.nbytes(), stream));
  if (x.numel() == 0) return;
  dispatch_fp8_cast(x.dtype(), rowwise.dtype(), [&]<typename In, bool kE4M3>() {
    launch_quantize_both<In, kE4M3>(x, cast, rowwise, rowwise_scale_inv, columnwise,
                                    columnwise_scale_inv, stats);
  });
  add_flat_block_scale_spread(rowwise_scale_inv, SpreadScales::kF32, counts);
  add_flat_block_scale_spread(columnwise_scale_inv, SpreadScales::kF32, counts);
}

void CudaBackend::quantize_blockwise(const Tensor& x, const ops::BlockwiseCast& cast, Tensor& data,
                                     Tensor& scale_inv, FP8CastCounts* counts) const {
  unsigned long long* stats = cast_stats_words(counts, x.device(), x.numel());
  const cudaStream_t stream = stream_of(x);
  // The layout's padding stays 0; the kernels write every real block's scale.
  OCTET_CUDA_CHECK(cudaMemsetAsync(scale_inv.data(), 0, scale_inv.nbytes(), stream));
  if (x.numel() == 0) return;
  dispatch_fp8_cast(x.dtype(), data.dtype(), [&]<typename In, bool kE4M3>() {
    launch_quantize<In, kE4M3>(x, cast, data, scale_inv, stats);
  });
  // Counts, and the spread of the block scales, on the device (as in quantize_fp8).
  add_flat_block_scale_spread(scale_inv, SpreadScales::kF32, counts);
}

void CudaBackend::dequantize_blockwise(const Tensor& data, const Tensor& scale_inv,
                                       BlockScaling blocks, Tensor& out) const {
  const int64_t n = data.numel();
  if (n == 0) return;
  const int64_t cols = data.cols(), stride = scale_inv.size(1);
  const bool two_d = blocks == BlockScaling::k2D;
  const uint8_t* q = data.data_as<uint8_t>();
  const float* s = scale_inv.data_as<float>();
  const cudaStream_t stream = stream_of(data);
  if (data.dtype() == DType::kE4M3) {
    dequantize_blockwise_kernel<true><<<blocks_for(n), kThreads, 0, stream>>>(
        q, s, out.data(), out.dtype(), cols, stride, two_d, n);
  } else {
    dequantize_blockwise_kernel<false><<<blocks_for(n), kThreads, 0, stream>>>(
        q, s, out.data(), out.dtype(), cols, stride, two_d, n);
  }
  OCTET_CUDA_LAUNCH_CHECK("dequantize_blockwise_kernel");
}

// cuBLASLt's native block-scaled FP8 GEMM where gemm_block_scaled takes it, else both operands
// expanded to f32 on the device and one f32 GEMM. OCTET_CUBLASLT_BLOCK_SCALING=0 forces the
// expansion.
void CudaBackend::blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                                 const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,
                                 Tensor& out, const Tensor* bias,
                                 ops::Accumulate accumulate) const {
  // Natively where cuBLASLt's block scale modes take it (Hopper, cuBLAS 12.9+; gemm.cu has the
  // documented rules), reading the scale_inv tensors in place: their layout is cuBLASLt's.
  const char* env = std::getenv("OCTET_CUBLASLT_BLOCK_SCALING");
  const bool forced_fallback = env != nullptr && env[0] == '0';
  if (!forced_fallback && gemm_block_scaled(a, a_scale_inv, a_blocks, b, b_scale_inv, b_blocks, out,
                                            bias, accumulate)) {
    return;
  }
  if (forced_fallback) note_blockwise_fallback();
  // Else the CPU's fallback: each operand expanded to f32 with its block scales (exact for
  // power-of-two scales), then one f32 GEMM, whose accumulation is the only rounding.
  Tensor ax, bx;
  {
    MemTagScope workspace(MemTag::kWorkspace);
    ax = Tensor::empty(a.shape(), DType::kF32, a.device());
    bx = Tensor::empty(b.shape(), DType::kF32, b.device());
  }
  dequantize_blockwise(a, a_scale_inv, a_blocks, ax);
  dequantize_blockwise(b, b_scale_inv, b_blocks, bx);
  gemm(ax, ops::Transpose::kNo, bx, ops::Transpose::kYes, out,
       {.accumulate = accumulate, .bias = bias});
}

void CudaBackend::transpose_scales(const Tensor& src, int64_t rows, int64_t cols,
                                   Tensor& dst) const {
  const cudaStream_t stream = stream_of(src);
  OCTET_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, dst.nbytes(), stream));
  const int64_t es = static_cast<int64_t>(src.element_size());
  const int64_t n = rows * cols;
  if (n == 0) return;
  transpose_scales_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(src.data()), static_cast<uint8_t*>(dst.data()), rows, cols,
      src.size(1), dst.size(1), es);
  OCTET_CUDA_LAUNCH_CHECK("transpose_scales_kernel");
}

}  // namespace octet::cuda
