// FP8 per-tensor cast on the GPU: quantize (row-wise and/or column-wise in one pass, amax and
// scale_inv written by the same launch), the tiled transpose, and dequantize. The element rule is
// runtime/fp8.h, shared with the CPU (kernels/cpu/fp8_cast.cpp), so both produce the same bytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/fp4.h"
#include "runtime/fp8_scaling.h"

namespace octet::cuda {
namespace {

template <bool kE4M3>
__device__ __forceinline__ uint8_t cast_fp8(float v) {
  return kE4M3 ? to_e4m3(v) : to_e5m2(v);
}

// The cast's counts into the device words, and its scale into the slot's spread once (as
// CurrentScalingQuantizer::record_scale adds scale_inv on the CPU; a delayed slot's spread is
// never read). The spread goes first: block 0's thread 0 then touches the words the same way in
// every launch whatever its own counts, so the emulation build's page counts do not depend on the
// data.
__device__ __forceinline__ void flush_counts(const CastTally& tally, float scale,
                                             unsigned long long* stats) {
  if (stats == nullptr) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) add_scale_to_spread(stats, scale_inverse(scale));
  tally.flush(stats);
}

// Max-accumulates the block's max |x| into *amax (when asked for). Every thread must call it.
__device__ __forceinline__ void merge_amax(float local, float* amax) {
  if (amax == nullptr) return;  // uniform over the launch
  local = block_reduce(local, MaxOp(), 0.f);
  if (threadIdx.x == 0) atomic_merge_amax(amax, local);
}

// scale_inv[0] = 1 / scale (runtime/fp8_scaling.h), by one thread of the launch.
__device__ __forceinline__ void write_scale_inv(float scale, float* scale_inv) {
  if (scale_inv != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    *scale_inv = scale_inverse(scale);
  }
}

// One element of the cast: q = fp8(v * scale), |v| into the thread's max, the counts into its
// tally (when the launch counts).
template <bool kE4M3>
struct CastOne {
  __device__ CastOne(float s, bool counts) : scale(s), count(counts) {}
  float scale;
  bool count;
  float local = 0.f;
  CastTally tally;
  __device__ __forceinline__ uint8_t operator()(float v) {
    const float a = fabsf(v);
    local = a > local ? a : local;  // NaN compares false: ignored
    const float scaled = v * scale;
    const uint8_t q = cast_fp8<kE4M3>(scaled);
    if (count) tally.add_fp8(v, scaled, q, kE4M3 ? kE4M3Max : kE5M2Max);
    return q;
  }
};

// The cast's vector access: 16 bytes of input (4 f32 or 8 bf16) per load, their kCastVec FP8
// bytes in one store.
template <typename In>
constexpr int kCastVec = 16 / static_cast<int>(sizeof(In));

template <typename T, int N>
struct alignas(N * sizeof(T)) Pack {
  T v[N];
};

template <int N, typename T, typename I>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p, I i) {
  return *reinterpret_cast<const Pack<T, N>*>(p + i);
}
template <int N, typename T, typename I>
__device__ __forceinline__ void store_pack(T* p, I i, const Pack<T, N>& v) {
  *reinterpret_cast<Pack<T, N>*>(p + i) = v;
}

// Elements i .. i + N - 1 of x (i a multiple of N, x aligned) cast into N bytes.
template <int N, typename In, bool kE4M3, typename I>
__device__ __forceinline__ Pack<uint8_t, N> cast_pack(const In* x, I i, CastOne<kE4M3>& one) {
  const Pack<In, N> v = load_pack<N>(x, i);
  Pack<uint8_t, N> q;
  for (int k = 0; k < N; ++k) q.v[k] = one(load_in(v.v, k));
  return q;
}

// Row-wise only: q[i] = fp8(x[i] * scale[0]), a grid-stride loop over groups of kCastVec<In>
// elements when `vector` (x 16-byte aligned, rowwise kCastVec-byte aligned), then one element at a
// time for the n % kCastVec left (all of them when not `vector`).
template <typename In, bool kE4M3, typename I>
__global__ void quantize_rowwise_kernel(const In* x, const float* scale, uint8_t* rowwise,
                                        float* amax, I n, bool vector, unsigned long long* stats,
                                        float* scale_inv) {
  constexpr int kV = kCastVec<In>;
  CastOne<kE4M3> one(*scale, stats != nullptr);
  write_scale_inv(one.scale, scale_inv);
  const I first = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  I done = 0;
  if (vector) {
    const I groups = n / kV;
    for (I g = first; g < groups; g += stride) {
      store_pack<kV>(rowwise, g * kV, cast_pack<kV>(x, g * kV, one));
    }
    done = groups * kV;
  }
  for (I i = done + first; i < n; i += stride) rowwise[i] = one(load_in(x, i));
  flush_counts(one.tally, one.scale, stats);
  merge_amax(one.local, amax);
}

// One block per kTile x kTile tile of x: each element is cast once; its byte goes to the
// row-wise output directly and through shared memory to the column-wise output (cols, rows), so
// that both outputs are written along their rows. With `vector_rows` (x 16-byte aligned, cols a
// multiple of kCastVec<In>, rowwise kCastVec-byte aligned) a thread loads kCastVec elements of a
// row at once and stores their bytes at once; with `vector_cols` (rows a multiple of kColVec,
// columnwise kColVec-byte aligned) it stores kColVec column-wise bytes at once. Otherwise one
// element per access.
constexpr int kTile = 64;
constexpr int kTileThreads = 256;
constexpr int kTileLanes = kTileThreads / kTile;  // rows (then columns) per pass, one element each
constexpr int kTileStride = kTile + 4;            // bytes per shared row, a whole number of words
constexpr int kColVec = 8;

template <typename In, bool kE4M3>
__global__ void quantize_tile_kernel(const In* x, const float* scale, uint8_t* rowwise,
                                     uint8_t* columnwise, float* amax, int64_t rows, int64_t cols,
                                     int64_t col_tiles, bool vector_rows, bool vector_cols,
                                     unsigned long long* stats, float* scale_inv) {
  constexpr int kV = kCastVec<In>;
  // +4 bytes per row: a column read (one byte from each of 32 rows) then hits 32 banks. Words,
  // so that a thread's kV bytes go in as kV / 4 word stores.
  __shared__ uint32_t tile_words[kTile * kTileStride / 4];
  uint8_t* tile = reinterpret_cast<uint8_t*>(tile_words);
  const int64_t r0 = (blockIdx.x / col_tiles) * kTile;
  const int64_t c0 = (blockIdx.x % col_tiles) * kTile;
  CastOne<kE4M3> one(*scale, stats != nullptr);
  write_scale_inv(one.scale, scale_inv);
  if (vector_rows) {
    constexpr int kGroups = kTile / kV;  // groups of kV elements in a tile row
    const int gx = threadIdx.x % kGroups;
    const int64_t c = c0 + gx * kV;
    for (int rr = threadIdx.x / kGroups; rr < kTile; rr += kTileThreads / kGroups) {
      const int64_t r = r0 + rr;
      if (r < rows && c < cols) {  // cols % kV == 0: the whole group is inside
        const int64_t i = r * cols + c;
        const Pack<uint8_t, kV> q = cast_pack<kV>(x, i, one);
        if (rowwise != nullptr) store_pack<kV>(rowwise, i, q);
        for (int w = 0; w < kV / 4; ++w) {
          tile_words[(rr * kTileStride + gx * kV) / 4 + w] =
              q.v[4 * w] | (q.v[4 * w + 1] << 8) | (q.v[4 * w + 2] << 16) |
              (static_cast<uint32_t>(q.v[4 * w + 3]) << 24);
        }
      }
    }
  } else {
    const int tx = threadIdx.x % kTile;
    const int64_t c = c0 + tx;
    for (int rr = threadIdx.x / kTile; rr < kTile; rr += kTileLanes) {
      const int64_t r = r0 + rr;
      if (r < rows && c < cols) {
        const int64_t i = r * cols + c;
        const uint8_t q = one(load_in(x, i));
        if (rowwise != nullptr) rowwise[i] = q;
        tile[rr * kTileStride + tx] = q;
      }
    }
  }
  flush_counts(one.tally, one.scale, stats);
  __syncthreads();
  // Column-wise row c0 + cc holds x's column c0 + cc: bytes r0.. are consecutive there.
  if (vector_cols) {
    constexpr int kGroups = kTile / kColVec;  // groups of kColVec bytes in a column-wise row
    const int gx = threadIdx.x % kGroups;
    const int64_t r = r0 + gx * kColVec;
    for (int cc = threadIdx.x / kGroups; cc < kTile; cc += kTileThreads / kGroups) {
      const int64_t cw = c0 + cc;
      if (r < rows && cw < cols) {  // rows % kColVec == 0: the whole group is inside
        Pack<uint8_t, kColVec> q;
        for (int k = 0; k < kColVec; ++k) q.v[k] = tile[(gx * kColVec + k) * kTileStride + cc];
        store_pack<kColVec>(columnwise, cw * rows + r, q);
      }
    }
  } else {
    const int tx = threadIdx.x % kTile;
    const int64_t r = r0 + tx;
    for (int cc = threadIdx.x / kTile; cc < kTile; cc += kTileLanes) {
      const int64_t cw = c0 + cc;
      if (r < rows && cw < cols) columnwise[cw * rows + r] = tile[tx * kTileStride + cc];
    }
  }
  merge_amax(one.local, amax);
}

// Whether p is a multiple of `bytes` (host side).
bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename In, bool kE4M3>
void launch_quantize(const Tensor& x, const Tensor& scale, uint8_t* row, uint8_t* col, float* amax,
                     unsigned long long* stats, float* scale_inv) {
  constexpr int kV = kCastVec<In>;
  const In* px = static_cast<const In*>(x.data());
  const float* ps = scale.data_as<float>();
  const int64_t rows = x.rows(), cols = x.cols();
  const cudaStream_t stream = stream_of(x);
  const bool x_vector = aligned_to(px, 16);
  if (col == nullptr) {
    const int64_t n = x.numel();
    const bool vector = x_vector && aligned_to(row, kV);
    with_index_type(n, [&]<typename I>(I) {
      quantize_rowwise_kernel<In, kE4M3, I><<<blocks_for((n + kV - 1) / kV), kThreads, 0, stream>>>(
          px, ps, row, amax, static_cast<I>(n), vector, stats, scale_inv);
      OCTET_CUDA_LAUNCH_CHECK("quantize_rowwise_kernel");
    });
    return;
  }
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
  const int64_t tiles = (rows + kTile - 1) / kTile * col_tiles;
  OCTET_CHECK(tiles <= int64_t{0x7FFFFFFF}, "quantize_fp8: ", x, " has too many tiles");
  const bool vector_rows = x_vector && cols % kV == 0 && (row == nullptr || aligned_to(row, kV));
  const bool vector_cols = rows % kColVec == 0 && aligned_to(col, kColVec);
  quantize_tile_kernel<In, kE4M3><<<static_cast<unsigned>(tiles), kTileThreads, 0, stream>>>(
      px, ps, row, col, amax, rows, cols, col_tiles, vector_rows, vector_cols, stats, scale_inv);
  OCTET_CUDA_LAUNCH_CHECK("quantize_tile_kernel");
}

template <typename In>
void launch_quantize(const Tensor& x, const Tensor& scale, uint8_t* row, uint8_t* col, float* amax,
                     bool e4m3, unsigned long long* stats, float* scale_inv) {
  if (e4m3) {
    launch_quantize<In, true>(x, scale, row, col, amax, stats, scale_inv);
  } else {
    launch_quantize<In, false>(x, scale, row, col, amax, stats, scale_inv);
  }
}

// out (cols, rows) = in (rows, cols)ᵀ through a 32 x 33 shared tile: reads and writes both run
// along rows. Block (32, 8); blockIdx.x enumerates the tiles.
constexpr int kTransposeTile = 32;
constexpr int kTransposeLanes = 8;

template <typename T>
__global__ void transpose_kernel(const T* in, T* out, int64_t rows, int64_t cols,
                                 int64_t col_tiles) {
  __shared__ T tile[kTransposeTile][kTransposeTile + 1];
  const int64_t r0 = (blockIdx.x / col_tiles) * kTransposeTile;
  const int64_t c0 = (blockIdx.x % col_tiles) * kTransposeTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int rr = ty; rr < kTransposeTile; rr += kTransposeLanes) {
    const int64_t r = r0 + rr, c = c0 + tx;
    if (r < rows && c < cols) tile[rr][tx] = in[r * cols + c];
  }
  __syncthreads();
  for (int cc = ty; cc < kTransposeTile; cc += kTransposeLanes) {
    const int64_t c = c0 + cc, r = r0 + tx;
    if (r < rows && c < cols) out[c * rows + r] = tile[tx][cc];
  }
}

template <typename T>
void launch_transpose(const Tensor& x, Tensor& out) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t col_tiles = (cols + kTransposeTile - 1) / kTransposeTile;
  const int64_t tiles = (rows + kTransposeTile - 1) / kTransposeTile * col_tiles;
  OCTET_CHECK(tiles <= int64_t{0x7FFFFFFF}, "transpose_2d: ", x, " has too many tiles");
  transpose_kernel<T>
      <<<static_cast<unsigned>(tiles), dim3(kTransposeTile, kTransposeLanes), 0, stream_of(x)>>>(
          static_cast<const T*>(x.data()), static_cast<T*>(out.data()), rows, cols, col_tiles);
  OCTET_CUDA_LAUNCH_CHECK("transpose_kernel");
}

// out[i] = fp8 value of q[i] * scale_inv[0], stored as f32 or bf16 (RNE); kVec elements per
// access when `vector`.
template <bool kE4M3, typename I>
__global__ void dequantize_kernel(const uint8_t* q, const float* scale_inv, void* out, DType dout,
                                  I n, bool vector) {
  const float s = *scale_inv;
  // NaN codes keep the CPU's NaN bits (mul_keep_nan).
  auto one = [&](uint8_t b) { return mul_keep_nan(kE4M3 ? from_e4m3(b) : from_e5m2(b), s); };
  grid_stride_vec(
      n, vector,
      [&](I i) {
        const Vec<uint8_t> b = load_vec(q, i);
        float v[kVec];
        for (int k = 0; k < kVec; ++k) v[k] = one(b.v[k]);
        store_f32_vec(out, dout, i, v);
      },
      [&](I i) { store_f32(out, dout, i, one(q[i])); });
}

// One block scale per entry of rows [0, rows) step row_step, `blocks` per row, `stride` apart,
// into the spread (add_scale_to_spread's rule), summed per thread block first: the buckets in a
// shared histogram, the count, smallest and largest scale over the block, then one global atomic
// per touched bucket and per word (global atomics per scale would all hit the same few words).
// Integer sums and bit maxima, so the words are the same whatever the grid.
constexpr int kSpreadThreads = 256;  // a multiple of the warp: whole warps reduce
constexpr unsigned kSpreadMaxBlocks = 1024;

__device__ __forceinline__ unsigned long long larger(unsigned long long a, unsigned long long b) {
  return a > b ? a : b;
}

__global__ void block_scale_spread_kernel(const void* scales, SpreadScales kind, int64_t rows,
                                          int64_t row_step, int64_t blocks, int64_t stride,
                                          const float* amax, float nvfp4_e4m3_max,
                                          unsigned long long* stats) {
  __shared__ unsigned hist[DeviceCastStats::kNumBuckets];
  __shared__ unsigned long long block_count, block_min_inverted, block_max;
  for (int i = threadIdx.x; i < DeviceCastStats::kNumBuckets; i += blockDim.x) hist[i] = 0;
  if (threadIdx.x == 0) block_count = block_min_inverted = block_max = 0;
  __syncthreads();
  const int64_t sampled = (rows + row_step - 1) / row_step, n = sampled * blocks;
  const float global = kind == SpreadScales::kNVFP4 ? amax[0] / (nvfp4_e4m3_max * kE2M1Max) : 0.f;
  unsigned long long count = 0, min_inverted = 0, max_bits = 0;
  grid_stride_rows(n, blocks, [&](int64_t, int64_t k, int64_t b) {
    const int64_t at = k * row_step * stride + b;
    float s = 0.f;
    switch (kind) {
      case SpreadScales::kF32:
        s = static_cast<const float*>(scales)[at];
        break;
      case SpreadScales::kE8M0:
        s = from_e8m0(static_cast<const uint8_t*>(scales)[at]);
        break;
      case SpreadScales::kNVFP4: {
        const float f = from_e4m3(static_cast<const uint8_t*>(scales)[at]);
        if (f == 0.f) return;  // the layout's padding, as NVFP4Quantizer::cast skips it
        s = f * global;
        break;
      }
    }
    if (!counts_in_spread(s)) return;
    atomicAdd(&hist[spread_bucket_word(s)], 1u);
    ++count;
    const auto bits = static_cast<unsigned long long>(__float_as_uint(s));
    min_inverted = larger(min_inverted, ~bits);
    max_bits = larger(max_bits, bits);
  });
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    count += __shfl_down_sync(0xffffffffu, count, offset);
    min_inverted = larger(min_inverted, __shfl_down_sync(0xffffffffu, min_inverted, offset));
    max_bits = larger(max_bits, __shfl_down_sync(0xffffffffu, max_bits, offset));
  }
  if (threadIdx.x % kWarp == 0 && count != 0) {
    atomicAdd(&block_count, count);
    atomicMax(&block_min_inverted, min_inverted);
    atomicMax(&block_max, max_bits);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < DeviceCastStats::kNumBuckets; i += blockDim.x) {
    if (hist[i] != 0) {
      atomicAdd(stats + DeviceCastStats::kBuckets + i, static_cast<unsigned long long>(hist[i]));
    }
  }
  if (threadIdx.x == 0 && block_count != 0) {
    atomicAdd(stats + DeviceCastStats::kBlocks, block_count);
    atomicMax(stats + DeviceCastStats::kMinBitsInverted, block_min_inverted);
    atomicMax(stats + DeviceCastStats::kMaxBits, block_max);
  }
}

}  // namespace

void add_block_scale_spread(const Tensor& scales, SpreadScales kind, int64_t rows, int64_t row_step,
                            int64_t blocks, int64_t stride, const Tensor* amax,
                            FP8CastCounts* counts, float nvfp4_e4m3_max) {
  if (counts == nullptr || rows * blocks == 0) return;
  auto* stats = reinterpret_cast<unsigned long long*>(
      device_cast_stats(*counts, scales.device()).words.data_as<int64_t>());
  const int64_t n = (rows + row_step - 1) / row_step * blocks;
  const unsigned grid = std::min(blocks_for(n, kSpreadThreads), kSpreadMaxBlocks);
  block_scale_spread_kernel<<<grid, kSpreadThreads, 0, stream_of(scales)>>>(
      scales.data(), kind, rows, row_step, blocks, stride,
      amax != nullptr ? amax->data_as<float>() : nullptr, nvfp4_e4m3_max, stats);
  OCTET_CUDA_LAUNCH_CHECK("block_scale_spread_kernel");
}

void add_flat_block_scale_spread(const Tensor& scales, SpreadScales kind, FP8CastCounts* counts) {
  if (counts == nullptr || scales.numel() == 0) return;
  add_block_scale_spread(scales, kind, 1, 1, scales.numel(), scales.numel(), nullptr, counts);
}

void CudaBackend::quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise,
                               Tensor* columnwise, Tensor* amax, FP8CastCounts* counts,
                               Tensor* scale_inv) const {
  // The counts are kept on the device and read when a metrics log takes them.
  unsigned long long* stats = cast_stats_words(counts, x.device(), x.numel());
  if (x.numel() == 0) {
    if (scale_inv != nullptr) reciprocal(scale, *scale_inv);  // no cast to write it
    return;
  }
  const DType fp8 = rowwise ? rowwise->dtype() : columnwise->dtype();
  uint8_t* row = rowwise ? rowwise->data_as<uint8_t>() : nullptr;
  uint8_t* col = columnwise ? columnwise->data_as<uint8_t>() : nullptr;
  float* pa = amax ? amax->data_as<float>() : nullptr;
  float* pi = scale_inv ? scale_inv->data_as<float>() : nullptr;
  const bool e4m3 = fp8 == DType::kE4M3;
  if (x.dtype() == DType::kF32) {
    launch_quantize<float>(x, scale, row, col, pa, e4m3, stats, pi);
  } else {
    launch_quantize<uint16_t>(x, scale, row, col, pa, e4m3, stats, pi);
  }
}

void CudaBackend::transpose_2d(const Tensor& x, Tensor& out) const {
  if (x.numel() == 0) return;
  switch (x.element_size()) {
    case 1:
      return launch_transpose<uint8_t>(x, out);
    case 2:
      return launch_transpose<uint16_t>(x, out);
    case 4:
      return launch_transpose<uint32_t>(x, out);
    case 8:
      return launch_transpose<uint64_t>(x, out);
  }
  OCTET_FAIL("transpose_2d: unsupported element size ", x.element_size());
}

void CudaBackend::dequantize_fp8(const Tensor& data, const Tensor& scale_inv, Tensor& out) const {
  const int64_t n = data.numel();
  if (n == 0) return;
  const uint8_t* q = data.data_as<uint8_t>();
  const float* s = scale_inv.data_as<float>();
  const cudaStream_t stream = stream_of(data);
  const bool vector = vec_aligned(q, 1) && vec_aligned(out.data(), out.element_size());
  with_index_type(n, [&]<typename I>(I) {
    if (data.dtype() == DType::kE4M3) {
      dequantize_kernel<true, I><<<vec_blocks_for(n), kThreads, 0, stream>>>(
          q, s, out.data(), out.dtype(), static_cast<I>(n), vector);
    } else {
      dequantize_kernel<false, I><<<vec_blocks_for(n), kThreads, 0, stream>>>(
          q, s, out.data(), out.dtype(), static_cast<I>(n), vector);
    }
    OCTET_CUDA_LAUNCH_CHECK("dequantize_kernel");
  });
}

}  // namespace octet::cuda
