// MXFP8 block cast and expansion on the GPU, in the layouts of kernels/mxfp8.h. One warp
// per block of 32 values: lane k holds value k, the warp's max gives the block exponent
// e = to_e8m0(block_amax / fp8_max), and each lane casts fp8(x * 2^(127 - e)) with runtime/fp8.h,
// the CPU's exact operations, so the bytes and exponents are the CPU's.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/mxfp8_tensor.h"

namespace octet::cuda {
namespace {

static_assert(kMXFP8BlockSize == kWarp, "one warp per MXFP8 block");
constexpr int kBlock = kWarp;

// A block's E8M0 exponent from its amax (a number: NaN values never count), and in *multiplier
// the power of two its values are cast after: e <= 254 for every such amax, so 254 - e is a valid
// E8M0 code, 2^(127 - e).
__device__ __forceinline__ uint8_t block_exponent(float amax, float fp8_max, float* multiplier) {
  const uint8_t e = to_e8m0(__fdiv_rn(amax, fp8_max));
  *multiplier = from_e8m0(static_cast<uint8_t>(254 - e));
  return e;
}

// One value's byte after the block's multiplier (in *scaled the value it cast, for the counts).
template <bool kE4M3>
__device__ __forceinline__ uint8_t cast_value(float v, float multiplier, float* scaled) {
  *scaled = __fmul_rn(v, multiplier);
  return kE4M3 ? to_e4m3(*scaled) : to_e5m2(*scaled);
}

// The block's exponent from one value per lane (lanes past the data pass 0), and the lane's
// byte (and in *scaled the value it cast, for the counts). Every lane of the warp must call it.
template <bool kE4M3>
__device__ __forceinline__ uint8_t cast_block_lane(float v, float fp8_max, uint8_t* exponent,
                                                   float* scaled_out) {
  const float a = fabsf(v);
  float m = a > 0.f ? a : 0.f;  // a NaN value does not count, as in the CPU's block_amax
  m = warp_reduce(m, MaxOp());  // every operand is a number here, so the max is exact
  float multiplier;
  *exponent = block_exponent(m, fp8_max, &multiplier);
  return cast_value<kE4M3>(v, multiplier, scaled_out);
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
  tally.flush_warp(stats);  // whole warps reach it
}

// Row-wise for rows of whole blocks (cols % 32 == 0) and buffers aligned for kVec values: the
// (row, block) pairs are then consecutive runs of 32 values, pair g at element 32 g, and each lane
// takes kVec of them, 8 lanes a block (their max over 3 shuffles), so a warp moves 4 blocks per
// access instead of one (one value a lane keeps too few bytes in flight).
// The exponent and bytes are cast_block_lane's: the same max, block_exponent and cast_value.
template <typename In, bool kE4M3>
__global__ void mxfp8_rowwise_vec_kernel(const In* x, uint8_t* q, uint8_t* scales, int64_t groups,
                                         float fp8_max, unsigned long long* stats) {
  constexpr int kLanesPerBlock = kBlock / kVec;
  constexpr int kGroupsPerWarp = kWarp / kLanesPerBlock;
  const int lane = threadIdx.x % kWarp, sub = lane % kLanesPerBlock;
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t step = int64_t{gridDim.x} * warps_per_block;
  CastTally tally;
  // w is the same on every lane of a warp: whole warps enter and leave the loop together.
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; w * kGroupsPerWarp < groups;
       w += step) {
    const int64_t g = w * kGroupsPerWarp + lane / kLanesPerBlock;
    const bool inside = g < groups;
    const int64_t i = g * kBlock + sub * kVec;
    float v[kVec] = {};
    if (inside) {
      const Vec<In> raw = load_vec(x, i);
      for (int k = 0; k < kVec; ++k) v[k] = load_in(raw.v, k);
    }
    float m = 0.f;
    for (int k = 0; k < kVec; ++k) {
      const float a = fabsf(v[k]);
      m = a > m ? a : m;  // a NaN never wins, as in the CPU's block_amax
    }
    for (int offset = kLanesPerBlock / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, m, offset);
      m = other > m ? other : m;  // every operand is a number: the max is exact
    }
    float multiplier;
    const uint8_t e = block_exponent(m, fp8_max, &multiplier);
    if (!inside) continue;
    Vec<uint8_t> out;
    for (int k = 0; k < kVec; ++k) {
      float scaled;
      out.v[k] = cast_value<kE4M3>(v[k], multiplier, &scaled);
      if (stats != nullptr) tally.add_fp8(v[k], scaled, out.v[k], fp8_max);
    }
    store_vec(q, i, out);
    if (sub == 0) scales[g] = e;
  }
  tally.flush_warp(stats);  // whole warps reach it
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
  tally.flush_warp(stats);  // whole warps reach it
}

// out (R, C) = fp8 value * 2^(e - 127) (exact in f32), stored as f32 or bf16; kVec elements
// per access when `vector` (kVec divides the 32-wide block, so a group has one scale).
template <bool kE4M3>
__global__ void dequantize_mxfp8_kernel(const uint8_t* q, const uint8_t* scales, void* out,
                                        DType dout, int64_t cols, int64_t blocks, int64_t n,
                                        bool vector) {
  static_assert(kBlock % kVec == 0);
  // NaN codes keep the CPU's NaN bits (mul_keep_nan).
  auto one = [&](uint8_t b, float s) {
    return mul_keep_nan(kE4M3 ? from_e4m3(b) : from_e5m2(b), s);
  };
  auto scale = [&](int64_t r, int64_t c) { return from_e8m0(scales[r * blocks + c / kBlock]); };
  grid_stride_row_groups(
      n, cols, vector,
      [&](int64_t i, int64_t r, int64_t c) {
        const float s = scale(r, c);
        const Vec<uint8_t> b = load_vec(q, i);
        float v[kVec];
        for (int k = 0; k < kVec; ++k) v[k] = one(b.v[k], s);
        store_f32_vec(out, dout, i, v);
      },
      [&](int64_t i, int64_t r, int64_t c) { store_f32(out, dout, i, one(q[i], scale(r, c))); });
}

template <typename In, bool kE4M3>
void launch_rowwise(const Tensor& x, Tensor& data, Tensor& scales, unsigned long long* stats) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  if (cols % kBlock == 0 && act_vec_ok(x) && vec_aligned(data.data(), 1)) {
    const int64_t groups = rows * blocks;
    mxfp8_rowwise_vec_kernel<In, kE4M3>
        <<<blocks_for(groups * (kBlock / kVec)), kThreads, 0, stream_of(x)>>>(
            static_cast<const In*>(x.data()), data.data_as<uint8_t>(), scales.data_as<uint8_t>(),
            groups, fp8_max(data.dtype()), stats);
    OCTET_CUDA_LAUNCH_CHECK("mxfp8_rowwise_vec_kernel");
    return;
  }
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
  dispatch_fp8_cast(x.dtype(), data.dtype(),
                    [&]<typename In, bool kE4M3>() { Launch<In, kE4M3>::run(x, data, scales, s); });
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

void CudaBackend::quantize_mxfp8_rowwise(const Tensor& x, Tensor& data, Tensor& scales,
                                         FP8CastCounts* counts) const {
  // Counts, and the spread of the block exponents, on the device (as in quantize_fp8).
  dispatch<Rowwise>(x, data, scales, counts);
  add_flat_block_scale_spread(scales, SpreadScales::kE8M0, counts);
}

void CudaBackend::quantize_mxfp8_columnwise(const Tensor& x, Tensor& data, Tensor& scales,
                                            FP8CastCounts* counts) const {
  dispatch<Columnwise>(x, data, scales, counts);
  add_flat_block_scale_spread(scales, SpreadScales::kE8M0, counts);
}

void CudaBackend::dequantize_mxfp8(const Tensor& data, const Tensor& scales, Tensor& out) const {
  const int64_t n = data.numel();
  if (n == 0) return;
  const int64_t cols = data.cols();
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const uint8_t* q = data.data_as<uint8_t>();
  const uint8_t* e = scales.data_as<uint8_t>();
  const cudaStream_t stream = stream_of(data);
  const bool vector = cols % kVec == 0 && vec_aligned(q, 1) && act_vec_ok(out);
  const unsigned grid = vector ? vec_blocks_for(n) : blocks_for(n);
  if (data.dtype() == DType::kE4M3) {
    dequantize_mxfp8_kernel<true>
        <<<grid, kThreads, 0, stream>>>(q, e, out.data(), out.dtype(), cols, blocks, n, vector);
  } else {
    dequantize_mxfp8_kernel<false>
        <<<grid, kThreads, 0, stream>>>(q, e, out.data(), out.dtype(), cols, blocks, n, vector);
  }
  OCTET_CUDA_LAUNCH_CHECK("dequantize_mxfp8_kernel");
}

}  // namespace octet::cuda
