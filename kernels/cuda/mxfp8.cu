// MXFP8 block cast and expansion on the GPU, in the layouts of kernels/cpu/mxfp8_cpu.h. One warp
// per block of 32 values: lane k holds value k, the warp's max gives the block exponent
// e = to_e8m0(block_amax / fp8_max), and each lane casts fp8(x * 2^(127 - e)) with runtime/fp8.h,
// the CPU's exact operations, so the bytes and exponents are the CPU's.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/mxfp8_tensor.h"

namespace octet::cuda {
namespace {

static_assert(kMXFP8BlockSize == kWarp, "one warp per MXFP8 block");
constexpr int kBlock = kWarp;

// The block's exponent from one value per lane (lanes past the data pass 0), and the lane's
// byte (and in *scaled the value it cast, for the counts). Every lane of the warp must call it.
template <bool kE4M3>
__device__ __forceinline__ uint8_t cast_block_lane(float v, float fp8_max, uint8_t* exponent,
                                                   float* scaled_out) {
  const float a = fabsf(v);
  float m = a > 0.f ? a : 0.f;  // a NaN value does not count, as in the CPU's block_amax
  m = warp_reduce(m, MaxOp());  // every operand is a number here, so the max is exact
  const uint8_t e = to_e8m0(__fdiv_rn(m, fp8_max));
  // e <= 254 for every non-NaN amax, so 254 - e is a valid E8M0 code: 2^(127 - e).
  const float multiplier = from_e8m0(static_cast<uint8_t>(254 - e));
  *exponent = e;
  const float scaled = __fmul_rn(v, multiplier);
  *scaled_out = scaled;
  return kE4M3 ? to_e4m3(scaled) : to_e5m2(scaled);
}

// Row-wise: data (rows, cols), scales (rows, blocks); warp w casts block w % blocks of row
// w / blocks, so scales[w] is its exponent.
template <typename In, bool kE4M3>
__global__ void mxfp8_rowwise_kernel(const In* x, uint8_t* q, uint8_t* scales, int64_t rows,
                                     int64_t cols, int64_t blocks, float fp8_max,
                                     unsigned long long* stats) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = int64_t{gridDim.x} * warps_per_block;
  const int64_t total = rows * blocks;
  CastTally tally;
  // w is the same on every lane of a warp, so whole warps enter and leave the loop together.
  const int64_t first = blockIdx.x * warps_per_block + threadIdx.x / kWarp;
  if (first >= total) return;
  // (row, block) of warp w walked without a divide per step.
  math::GridRowCol at = math::GridRowCol::start(first, stride, blocks);
  for (int64_t w = first; w < total; w += stride, at.advance()) {
    const int64_t r = at.row, c = at.col * kBlock + lane;
    const bool inside = c < cols;
    const float v = inside ? load_in(x, r * cols + c) : 0.f;
    uint8_t e;
    float scaled;
    const uint8_t byte = cast_block_lane<kE4M3>(v, fp8_max, &e, &scaled);
    if (inside) q[r * cols + c] = byte;
    if (inside && stats != nullptr) tally.add_fp8(v, scaled, byte, fp8_max);
    if (lane == 0) scales[w] = e;
  }
  tally.flush(stats);
}

// Column-wise: data (cols, rows), scales (cols, row_blocks): the row-wise cast of xᵀ. A block
// (32, 8) loads 32 rows (one MX block) x 32 columns into shared memory transposed; warp y then
// casts columns y, y + 8, ..., lane k holding row k of the block.
constexpr int kColTile = 32;
constexpr int kLanes = 8;

template <typename In, bool kE4M3>
__global__ void mxfp8_columnwise_kernel(const In* x, uint8_t* q, uint8_t* scales, int64_t rows,
                                        int64_t cols, int64_t row_blocks, int64_t col_tiles,
                                        float fp8_max, unsigned long long* stats) {
  __shared__ float tile[kColTile][kBlock + 1];  // [column][row], padded against bank conflicts
  const int64_t b = blockIdx.x / col_tiles;
  const int64_t r0 = b * kBlock, c0 = (blockIdx.x % col_tiles) * kColTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int rr = ty; rr < kBlock; rr += kLanes) {
    const int64_t r = r0 + rr, c = c0 + tx;
    tile[tx][rr] = r < rows && c < cols ? load_in(x, r * cols + c) : 0.f;
  }
  __syncthreads();
  const int64_t r = r0 + tx;
  CastTally tally;
  for (int cc = ty; cc < kColTile; cc += kLanes) {
    const int64_t c = c0 + cc;
    if (c >= cols) break;  // the same for the whole warp: columns only grow with cc
    uint8_t e;
    float scaled;
    const float v = tile[cc][tx];
    const uint8_t byte = cast_block_lane<kE4M3>(v, fp8_max, &e, &scaled);
    if (r < rows) q[c * rows + r] = byte;
    if (r < rows && stats != nullptr) tally.add_fp8(v, scaled, byte, fp8_max);
    if (tx == 0) scales[c * row_blocks + b] = e;
  }
  tally.flush(stats);
}

// out (R, C) = fp8 value * 2^(e - 127) (exact in f32), stored as f32 or bf16.
template <bool kE4M3>
__global__ void dequantize_mxfp8_kernel(const uint8_t* q, const uint8_t* scales, void* out,
                                        DType dout, int64_t cols, int64_t blocks, int64_t n) {
  grid_stride_rows(n, cols, [&](int64_t i, int64_t r, int64_t c) {
    const float s = from_e8m0(scales[r * blocks + c / kBlock]);
    const float v = kE4M3 ? from_e4m3(q[i]) : from_e5m2(q[i]);
    store_f32(out, dout, i, mul_keep_nan(v, s));  // NaN codes keep the CPU's NaN bits
  });
}

template <typename In, bool kE4M3>
void launch_rowwise(const Tensor& x, Tensor& data, Tensor& scales, unsigned long long* stats) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  mxfp8_rowwise_kernel<In, kE4M3><<<blocks_for(rows * blocks * kWarp), kThreads, 0, stream_of(x)>>>(
      static_cast<const In*>(x.data()), data.data_as<uint8_t>(), scales.data_as<uint8_t>(), rows,
      cols, blocks, fp8_max(data.dtype()), stats);
  OCTET_CUDA_LAUNCH_CHECK("mxfp8_rowwise_kernel");
}

template <typename In, bool kE4M3>
void launch_columnwise(const Tensor& x, Tensor& data, Tensor& scales, unsigned long long* stats) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock;
  const int64_t col_tiles = (cols + kColTile - 1) / kColTile;
  const int64_t tiles = row_blocks * col_tiles;
  OCTET_CHECK(tiles <= int64_t{0x7FFFFFFF}, "quantize_mxfp8: ", x, " has too many tiles");
  mxfp8_columnwise_kernel<In, kE4M3>
      <<<static_cast<unsigned>(tiles), dim3(kColTile, kLanes), 0, stream_of(x)>>>(
          static_cast<const In*>(x.data()), data.data_as<uint8_t>(), scales.data_as<uint8_t>(),
          rows, cols, row_blocks, col_tiles, fp8_max(data.dtype()), stats);
  OCTET_CUDA_LAUNCH_CHECK("mxfp8_columnwise_kernel");
}

// Calls launch<In, kE4M3> for x's dtype (f32 or bf16) and data's format.
template <template <typename, bool> class Launch>
void dispatch(const Tensor& x, Tensor& data, Tensor& scales, FP8CastCounts* counts) {
  unsigned long long* s = cast_stats_words(counts, x.device(), x.numel());
  if (x.numel() == 0) return;
  const bool e4m3 = data.dtype() == DType::kE4M3;
  if (x.dtype() == DType::kF32) {
    e4m3 ? Launch<float, true>::run(x, data, scales, s)
         : Launch<float, false>::run(x, data, scales, s);
  } else {
    e4m3 ? Launch<uint16_t, true>::run(x, data, scales, s)
         : Launch<uint16_t, false>::run(x, data, scales, s);
  }
}

template <typename In, bool kE4M3>
struct Rowwise {
  static void run(const Tensor& x, Tensor& data, Tensor& scales, unsigned long long* stats) {
    launch_rowwise<In, kE4M3>(x, data, scales, stats);
  }
};

template <typename In, bool kE4M3>
struct Columnwise {
  static void run(const Tensor& x, Tensor& data, Tensor& scales, unsigned long long* stats) {
    launch_columnwise<In, kE4M3>(x, data, scales, stats);
  }
};

}  // namespace

void quantize_mxfp8_rowwise(const Tensor& x, Tensor& data, Tensor& scales, FP8CastCounts* counts) {
  dispatch<Rowwise>(x, data, scales, counts);
}

void quantize_mxfp8_columnwise(const Tensor& x, Tensor& data, Tensor& scales,
                               FP8CastCounts* counts) {
  dispatch<Columnwise>(x, data, scales, counts);
}

void dequantize_mxfp8(const Tensor& data, const Tensor& scales, Tensor& out) {
  const int64_t n = data.numel();
  if (n == 0) return;
  const int64_t cols = data.cols();
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const uint8_t* q = data.data_as<uint8_t>();
  const uint8_t* e = scales.data_as<uint8_t>();
  const cudaStream_t stream = stream_of(data);
  if (data.dtype() == DType::kE4M3) {
    dequantize_mxfp8_kernel<true>
        <<<blocks_for(n), kThreads, 0, stream>>>(q, e, out.data(), out.dtype(), cols, blocks, n);
  } else {
    dequantize_mxfp8_kernel<false>
        <<<blocks_for(n), kThreads, 0, stream>>>(q, e, out.data(), out.dtype(), cols, blocks, n);
  }
  OCTET_CUDA_LAUNCH_CHECK("dequantize_mxfp8_kernel");
}

}  // namespace octet::cuda
