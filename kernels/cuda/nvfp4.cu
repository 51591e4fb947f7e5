// NVFP4 (TE's NVFP4BlockScaling) on the GPU, in the layouts of runtime/nvfp4_tensor.h: the
// 16-point random Hadamard transform, the two-level cast (tensor amax, E4M3 scale per 1x16 block
// or 16x16 tile, E2M1 values to nearest or stochastically from the CPU's Philox stream), the tile
// transpose and the expansion the GEMM multiplies. Every step is the CPU's operation on the same
// values (kernels/cpu/nvfp4.cpp, runtime/fp8_scaling.h, runtime/fp4.h), so the bytes are the CPU's.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/math/quartet2.h"
#include "runtime/fp4.h"
#include "runtime/fp8_scaling.h"
#include "runtime/nvfp4_tensor.h"
#include "runtime/philox.h"

namespace octet::cuda {
namespace {

constexpr int kBlock = static_cast<int>(kNVFP4BlockLen);

// TE's fixed sign vector of the transform (bit i set: sign i is -1), as on the CPU.
constexpr uint32_t kHadamardSigns = 0xD7E8u;

// The transform's coefficient +-1/4 that multiplies x[i] into y[j]: forward diag(s) H / 4,
// inverse H diag(s) / 4, H the Sylvester matrix of order 16 ((-1)^popcount(i & j)).
__device__ __forceinline__ double hadamard_coefficient(int i, int j, bool inverse) {
  uint32_t v = static_cast<uint32_t>(i & j);
  v ^= v >> 2;
  v ^= v >> 1;
  const bool h_negative = (v & 1u) != 0u;
  const bool s_negative = ((kHadamardSigns >> (inverse ? j : i)) & 1u) != 0u;
  return h_negative != s_negative ? -0.25 : 0.25;
}

// One thread per output value j of group g: the CPU's sum of 16 terms x[i] * (+-1/4) in f64, in
// the order of i (each product is exact), rounded once: to bf16 values forward, to f32 inverse.
// A NaN result gets the bits x86 gives it (the GPU's arithmetic returns its canonical NaN): the
// first NaN term, quieted, or the default NaN 0xFFC00000 of an inf - inf.
template <typename In>
__global__ void hadamard16_kernel(const In* x, float* y, bool inverse, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t g = k - k % kBlock;
    const int j = static_cast<int>(k % kBlock);
    double sum = 0.0;
    bool nan = false;
    uint32_t nan_bits = 0u;
    for (int i = 0; i < kBlock; ++i) {
      const float xi = load_in(x, g + i);
      const double term = __dmul_rn(static_cast<double>(xi), hadamard_coefficient(i, j, inverse));
      sum = __dadd_rn(sum, term);
      if (!nan && isnan(sum)) {
        nan = true;
        nan_bits = isnan(xi) ? __float_as_uint(xi) | 0x00400000u : 0xFFC00000u;
      }
    }
    const float f = nan ? __uint_as_float(nan_bits) : static_cast<float>(sum);
    y[k] = inverse ? f : from_bf16(to_bf16(f));
  }
}

// Draws first .. first + 15 of the stream of `seed` (a Philox block serves four in a row), as
// the CPU's block_draws takes them.
__device__ __forceinline__ void block_draws(uint64_t seed, uint64_t first, uint32_t* bits) {
  int i = 0;
  while (i < kBlock) {
    const uint64_t index = first + static_cast<uint64_t>(i);
    const octet::detail::PhiloxBlock words = octet::detail::philox_block(index / 4, seed);
    for (uint64_t w = index % 4; w < 4 && i < kBlock; ++w) bits[i++] = words.w[w];
  }
}

struct CastParams {
  bool tiles_2d, stochastic;
  uint64_t seed, offset;
  bool vector;  // the values 16-byte and the codes 8-byte aligned: a block in 4 loads, 1 store
  bool four_over_six, squared_error;
  float e4m3_max;
};

// 4over6's choice for thread (tx, ty)'s block x (runtime/fp8_scaling.h): both candidates' errors
// summed in element order, a tile's over its 16 rows through `err` (every thread of the thread
// block calls this: it synchronises under 2D tiles); the kept candidate's scale code.
__device__ uint8_t four_over_six_choice(const float* x, bool inside, float block_amax,
                                        float tensor_amax, const NVFP4GlobalScale& global,
                                        const CastParams& p, int tx, int ty,
                                        float (*err)[kBlock][kBlock]) {
  const NVFP4ScalePair pair = nvfp4_4over6_scales(block_amax, global.encode);
  const uint8_t codes[2] = {pair.map4, pair.map6};
  float e[2] = {0.f, 0.f};
  if (inside) {
    for (int k = 0; k < 2; ++k) {
      const float enc = nvfp4_block_encode(codes[k], global.decode);
      const float s = from_e4m3(codes[k]);
      for (int i = 0; i < kBlock; ++i) {
        const float v = from_e2m1(to_e2m1(__fmul_rn(x[i], enc)));
        e[k] += nvfp4_4over6_term(v, s, tensor_amax, p.e4m3_max, x[i], p.squared_error);
      }
    }
  }
  if (p.tiles_2d) {
    err[0][ty][tx] = e[0];
    err[1][ty][tx] = e[1];
    __syncthreads();
    for (int k = 0; k < 2; ++k) {
      float rows[kBlock];
      for (int rr = 0; rr < kBlock; ++rr) rows[rr] = err[k][rr][tx];
      e[k] = nvfp4_4over6_tile_sum(rows);
    }
  }
  return e[0] < e[1] ? pair.map4 : pair.map6;  // a tie keeps map6
}

// A (16, 16) thread block covers 16 rows (a tile's band) and 16 consecutive column blocks:
// thread (tx, ty) casts block cb = blockIdx.x * 16 + tx of row r = blockIdx.y * 16 + ty. Under 2D
// tiles the tile's amax is the max of its 16 rows' block amaxes (exact in any order). The block's
// 16 values are read once, into registers, with 16-byte loads where aligned, and the counts leave
// with one atomic per warp: nearly every thread has a value flushed to 0, so per-thread atomics
// would all hit the same two words.
__global__ void nvfp4_cast_kernel(const float* v, const float* amax, uint8_t* q, uint8_t* sf,
                                  int64_t cols, int64_t blocks, int64_t stride, CastParams p,
                                  unsigned long long* stats) {
  __shared__ float row_amax[kBlock][kBlock];     // [row in band][column block in group]
  __shared__ float tile_err[2][kBlock][kBlock];  // 4over6 under 2D tiles: [candidate][row][block]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t cb = blockIdx.x * int64_t{kBlock} + tx;
  const int64_t r = blockIdx.y * int64_t{kBlock} + ty;
  const bool inside = cb < blocks;
  const int64_t first = r * cols + cb * kBlock;
  float x[kBlock];
  float m = 0.f;
  if (inside) {
    if (p.vector) {
      for (int i = 0; i < kBlock; i += kVec) {
        const Vec<float> f = load_vec(v, first + i);
        for (int k = 0; k < kVec; ++k) x[i + k] = f.v[k];
      }
    } else {
      for (int i = 0; i < kBlock; ++i) x[i] = v[first + i];
    }
    for (int i = 0; i < kBlock; ++i) {
      const float a = fabsf(x[i]);
      m = a > m ? a : m;  // a NaN compares false and never wins
    }
  }
  if (p.tiles_2d) {
    row_amax[ty][tx] = m;
    __syncthreads();
    for (int rr = 0; rr < kBlock; ++rr) {
      const float o = row_amax[rr][tx];
      m = o > m ? o : m;
    }
  }
  // No return before the end: every lane of a warp takes part in flush_warp.
  CastTally tally;
  const NVFP4GlobalScale global = nvfp4_global_scale(amax[0], p.e4m3_max);
  const uint8_t code =
      p.four_over_six ? four_over_six_choice(x, inside, m, amax[0], global, p, tx, ty, tile_err)
                      : nvfp4_block_scale(m, global.multiplier);
  if (inside) {
    const float enc = nvfp4_block_encode(code, global.decode);
    sf[r * stride + cb] = code;  // a tile's 16 rows carry its one scale
    uint32_t bits[kBlock];
    // Element (r, c)'s draw is offset + r * cols + c, as on the CPU.
    if (p.stochastic)
      block_draws(p.seed, p.offset + static_cast<uint64_t>(r * cols + cb * kBlock), bits);
    uint8_t* out = q + r * (cols / 2) + cb * (kBlock / 2);
    Vec<uint16_t> packed;  // the block's 8 bytes of codes
    static_assert(sizeof(packed) == kBlock / 2);
    auto* bytes = reinterpret_cast<uint8_t*>(&packed);
    for (int i = 0; i < kBlock; i += 2) {
      const float y0 = __fmul_rn(x[i], enc), y1 = __fmul_rn(x[i + 1], enc);
      const uint8_t c0 = p.stochastic ? e2m1_stochastic(y0, bits[i]) : to_e2m1(y0);
      const uint8_t c1 = p.stochastic ? e2m1_stochastic(y1, bits[i + 1]) : to_e2m1(y1);
      bytes[i / 2] = pack_e2m1(c0, c1);
      if (stats != nullptr) {  // the CPU's encode_block rules: a NaN casts to code 7, never 0
        tally.add(x[i], y0, c0 & 0x7u, kE2M1Max);
        tally.add(x[i + 1], y1, c1 & 0x7u, kE2M1Max);
      }
    }
    if (p.vector) {
      *reinterpret_cast<Vec<uint16_t>*>(out) = packed;
    } else {
      for (int i = 0; i < kBlock / 2; ++i) out[i] = bytes[i];
    }
  }
  tally.flush_warp(stats);
}

// out (rows, cols) = e2m1 value * its block's E4M3 scale, times amax / 2688 folded into the scale
// as TE does (RN(RN(sf * amax) * RN(1 / 2688)); 1536 = 6 * e4m3_max under the 256 bound) when
// amax is given; kVec values (two code bytes, one scale: kVec divides the 16-wide block) per
// access when `vector`.
__global__ void expand_nvfp4_kernel(const uint8_t* q, const uint8_t* sf, const float* amax,
                                    float e4m3_max, void* out, DType dout, int64_t cols,
                                    int64_t stride, int64_t n, bool vector) {
  static_assert(kBlock % kVec == 0 && kVec % 2 == 0);
  const float inv_divisor = __fdiv_rn(1.f, kE2M1Max * e4m3_max);
  const int64_t half = cols / 2;  // bytes a row
  auto scale = [&](int64_t r, int64_t c) {
    const float s = from_e4m3(sf[r * stride + c / kBlock]);
    return amax != nullptr ? mul_keep_nan(mul_keep_nan(s, amax[0]), inv_divisor) : s;
  };
  grid_stride_row_groups(
      n, cols, vector,
      [&](int64_t i, int64_t r, int64_t c) {
        const float s = scale(r, c);
        float v[kVec];
        for (int k = 0; k < kVec; k += 2) {
          const uint8_t byte = q[r * half + (c + k) / 2];
          v[k] = mul_keep_nan(from_e2m1(byte & 0xFu), s);
          v[k + 1] = mul_keep_nan(from_e2m1(byte >> 4), s);
        }
        store_f32_vec(out, dout, i, v);
      },
      [&](int64_t i, int64_t r, int64_t c) {
        const uint8_t byte = q[r * half + c / 2];
        const uint8_t code = (c & 1) ? byte >> 4 : byte & 0xFu;
        store_f32(out, dout, i, mul_keep_nan(from_e2m1(code), scale(r, c)));
      });
}

// One thread per output byte (c, rp) of the nibble transpose: rows 2rp (low) and 2rp + 1 (high)
// of column c.
__global__ void transpose_nibbles_kernel(const uint8_t* q, uint8_t* oq, int64_t rows, int64_t cols,
                                         int64_t n) {
  const int64_t half = cols / 2;  // bytes a row of q
  grid_stride_rows(n, rows / 2, [&](int64_t i, int64_t c, int64_t rp) {
    const int64_t r = 2 * rp;
    const int shift = (c & 1) ? 4 : 0;
    const uint8_t lo = (q[r * half + c / 2] >> shift) & 0xFu;
    const uint8_t hi = (q[(r + 1) * half + c / 2] >> shift) & 0xFu;
    oq[i] = static_cast<uint8_t>(lo | (hi << 4));
  });
}

// Tile (rb, cb)'s scale sits on each of its 16 rows, column cb; transposed: rows of cb (one per
// column c), column rb.
__global__ void transpose_tile_scales_kernel(const uint8_t* sf, uint8_t* os, int64_t row_blocks,
                                             int64_t ss, int64_t os_stride, int64_t n) {
  grid_stride_rows(n, row_blocks, [&](int64_t, int64_t c, int64_t rb) {
    os[c * os_stride + rb] = sf[(rb * kBlock) * ss + c / kBlock];
  });
}

void launch_hadamard(const Tensor& x, bool inverse, float* y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const cudaStream_t stream = stream_of(x);
  if (x.dtype() == DType::kF32) {
    hadamard16_kernel<float>
        <<<blocks_for(n), kThreads, 0, stream>>>(x.data_as<float>(), y, inverse, n);
  } else {
    hadamard16_kernel<uint16_t><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const uint16_t*>(x.data()), y, inverse, n);
  }
  OCTET_CUDA_LAUNCH_CHECK("hadamard16_kernel");
}

// One thread per 128-value chunk: the signs from the stream, then the CPU's transform. A NaN
// output is the canonical quiet NaN on both backends.
template <typename In>
__global__ void rht128_kernel(const In* x, float* y, uint64_t seed, uint64_t offset, bool inverse,
                              int64_t chunks) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < chunks;
       c += int64_t{gridDim.x} * blockDim.x) {
    double signs[math::kRht128];
    float chunk[math::kRht128];
    for (int i = 0; i < math::kRht128; ++i) {
      signs[i] = math::rht128_sign(seed, offset, i);
      chunk[i] = load_in(x, c * math::kRht128 + i);
    }
    math::rht128(chunk, signs, inverse, y + c * math::kRht128);
  }
}

// MS-EDEN pass one: one thread per 1x16 block, its codes and corrected scale.
__global__ void eden_block_kernel(const float* v, uint8_t* q, float* corrected, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    float x[kBlock];
    for (int i = 0; i < kBlock; ++i) x[i] = v[k * kBlock + i];
    uint8_t codes[kBlock / 2];
    corrected[k] = math::eden_block(x, codes);
    for (int i = 0; i < kBlock / 2; ++i) q[k * (kBlock / 2) + i] = codes[i];
  }
}

// Pass two: g = max corrected / 256 (the amax of the corrected scales, read on the device), each
// block's scale drawn from the stream.
__global__ void eden_scale_kernel(const float* corrected, const float* most, uint8_t* sf,
                                  float* decode, uint64_t seed, uint64_t offset, int64_t blocks,
                                  int64_t stride, int64_t n) {
  const float g = most[0] * 0x1p-8f;
  if (blockIdx.x == 0 && threadIdx.x == 0) decode[0] = g;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / blocks, b = k % blocks;
    const uint32_t word = octet::detail::philox_word(seed, offset + static_cast<uint64_t>(k));
    sf[r * stride + b] = math::eden_scale_code(corrected[k], g, word);
  }
}

}  // namespace

void CudaBackend::rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse,
                         Tensor& out) const {
  const int64_t chunks = x.numel() / math::kRht128;
  if (chunks == 0) return;
  const cudaStream_t stream = stream_of(x);
  float* y = out.data_as<float>();
  if (x.dtype() == DType::kF32) {
    rht128_kernel<float><<<blocks_for(chunks), kThreads, 0, stream>>>(x.data_as<float>(), y, seed,
                                                                      offset, inverse, chunks);
  } else {
    rht128_kernel<uint16_t><<<blocks_for(chunks), kThreads, 0, stream>>>(
        static_cast<const uint16_t*>(x.data()), y, seed, offset, inverse, chunks);
  }
  OCTET_CUDA_LAUNCH_CHECK("rht128_kernel");
}

void CudaBackend::quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                                      Tensor& scales, Tensor& decode) const {
  const cudaStream_t stream = stream_of(v);
  OCTET_CUDA_CHECK(cudaMemsetAsync(scales.data(), 0, scales.nbytes(), stream));
  const int64_t blocks = v.cols() / kBlock, n = v.rows() * blocks;
  MemTagScope workspace(MemTag::kWorkspace);
  Tensor corrected = Tensor::empty({n}, DType::kF32, v.device());
  Tensor most = Tensor::empty({1}, DType::kF32, v.device());
  if (n > 0) {
    eden_block_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        v.data_as<float>(), data.data_as<uint8_t>(), corrected.data_as<float>(), n);
    OCTET_CUDA_LAUNCH_CHECK("eden_block_kernel");
  }
  amax(corrected, most);                        // the corrected scales are >= 0 (or NaN, ignored)
  const auto grid = n > 0 ? blocks_for(n) : 1;  // one thread writes g when n is 0
  eden_scale_kernel<<<grid, kThreads, 0, stream>>>(
      corrected.data_as<float>(), most.data_as<float>(), scales.data_as<uint8_t>(),
      decode.data_as<float>(), seed, offset, blocks, scales.size(1), n);
  OCTET_CUDA_LAUNCH_CHECK("eden_scale_kernel");
}

void CudaBackend::hadamard16(const Tensor& x, bool inverse, Tensor& out) const {
  launch_hadamard(x, inverse, out.data_as<float>());
}

// amax (1,) is written on the device and read there by the block cast.
void CudaBackend::quantize_nvfp4(const Tensor& x, const ops::NVFP4Cast& cast, Tensor& data,
                                 Tensor& scales, Tensor& amax, FP8CastCounts* counts) const {
  unsigned long long* stats = cast_stats_words(counts, x.device(), x.numel());
  const int64_t rows = x.rows(), cols = x.cols();
  const cudaStream_t stream = stream_of(x);
  // The values the cast sees, in f32: x itself, or its conversion, or its transform.
  Tensor values = x;
  if (cast.hadamard || x.dtype() != DType::kF32) {
    MemTagScope workspace(MemTag::kWorkspace);
    values = Tensor::empty({rows, cols}, DType::kF32, x.device());
    if (cast.hadamard) {
      launch_hadamard(x, false, values.data_as<float>());
    } else {
      convert(x, values);
    }
  }
  this->amax(values, amax);  // the parameter `amax` hides the op
  // The layout's padding stays 0.
  OCTET_CUDA_CHECK(cudaMemsetAsync(scales.data(), 0, scales.nbytes(), stream));
  if (x.numel() == 0) return;
  const int64_t blocks = cols / kBlock;
  const int64_t groups = (blocks + kBlock - 1) / kBlock, bands = rows / kBlock;
  OCTET_CHECK(groups <= int64_t{0x7FFFFFFF} && bands <= 65535, "quantize_nvfp4: ", x,
              " is too large for one launch");
  const bool vector =
      vec_aligned(values.data(), sizeof(float)) && vec_aligned(data.data(), sizeof(uint16_t));
  const CastParams p{cast.tiles_2d, cast.stochastic,    cast.seed,          cast.offset,
                     vector,        cast.four_over_six, cast.squared_error, cast.e4m3_max};
  nvfp4_cast_kernel<<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(bands)),
                      dim3(kBlock, kBlock), 0, stream>>>(
      values.data_as<float>(), amax.data_as<float>(), data.data_as<uint8_t>(),
      scales.data_as<uint8_t>(), cols, blocks, scales.size(1), p, stats);
  OCTET_CUDA_LAUNCH_CHECK("nvfp4_cast_kernel");
  // Counts on the device (as in quantize_fp8), and each block's dequantization scale into the
  // spread, a 16x16 tile's once per 16 rows (NVFP4Quantizer::cast).
  add_block_scale_spread(scales, SpreadScales::kNVFP4, rows, cast.tiles_2d ? kNVFP4BlockLen : 1,
                         blocks, scales.size(1), &amax, counts, cast.e4m3_max);
}

void CudaBackend::expand_nvfp4(const Tensor& data, const Tensor& scales, const Tensor* amax,
                               float e4m3_max, Tensor& out) const {
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool vector = act_rows_vec_ok(out, out.cols());
  const unsigned grid = vector ? vec_blocks_for(n) : blocks_for(n);
  expand_nvfp4_kernel<<<grid, kThreads, 0, stream_of(data)>>>(
      data.data_as<uint8_t>(), scales.data_as<uint8_t>(),
      amax != nullptr ? amax->data_as<float>() : nullptr, e4m3_max, out.data(), out.dtype(),
      out.cols(), scales.size(1), n, vector);
  OCTET_CUDA_LAUNCH_CHECK("expand_nvfp4_kernel");
}

void CudaBackend::transpose_nvfp4_tiles(const Tensor& data, const Tensor& scales, int64_t rows,
                                        int64_t cols, Tensor& out_data, Tensor& out_scales) const {
  const cudaStream_t stream = stream_of(data);
  OCTET_CUDA_CHECK(cudaMemsetAsync(out_scales.data(), 0, out_scales.nbytes(), stream));
  const int64_t n = rows * cols / 2;  // every byte of out_data (cols, rows / 2) is written
  if (n == 0) return;
  transpose_nibbles_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      data.data_as<uint8_t>(), out_data.data_as<uint8_t>(), rows, cols, n);
  OCTET_CUDA_LAUNCH_CHECK("transpose_nibbles_kernel");
  const int64_t row_blocks = rows / kBlock, m = cols * row_blocks;
  transpose_tile_scales_kernel<<<blocks_for(m), kThreads, 0, stream>>>(
      scales.data_as<uint8_t>(), out_scales.data_as<uint8_t>(), row_blocks, scales.size(1),
      out_scales.size(1), m);
  OCTET_CUDA_LAUNCH_CHECK("transpose_tile_scales_kernel");
}

}  // namespace octet::cuda
