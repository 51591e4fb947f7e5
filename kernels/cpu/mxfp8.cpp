// MXFP8 block cast and expansion on the CPU. The per-element rule is runtime/fp8.h (shared with
// the CUDA kernels): e = to_e8m0(block_amax / fp8_max), q = fp8(x * 2^(127 - e)).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/fp8.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

constexpr int64_t kBlock = kMXFP8BlockSize;

// The exponent of a block and the power of two its elements are multiplied by before the cast.
struct BlockScale {
  uint8_t e;
  float multiplier;  // 2^(127 - e), from 2^127 (e = 0) down to the f32 subnormal 2^-127
};

BlockScale block_scale(float block_amax, float fp8_max) {
  const uint8_t e = to_e8m0(block_amax / fp8_max);
  // e <= 254 for every non-NaN input, and the amax ignores NaN, so 254 - e is a valid exponent.
  return {e, from_e8m0(static_cast<uint8_t>(254 - e))};
}

// The operands of a cast in either direction: x's bytes, the codes and the exponents.
struct CastBuffers {
  CastBuffers(const Tensor& x, Tensor& data, Tensor& scales)
      : fp8(data.dtype()),
        max(fp8_max(fp8)),
        px(static_cast<const uint8_t*>(x.data())),
        es(x.element_size()),
        q(data.data_as<uint8_t>()),
        e(scales.data_as<uint8_t>()) {}

  // One block of n values x, its exponent into *block_e and its codes into block_q.
  void cast_block(const float* x, int64_t n, uint8_t* block_e, uint8_t* block_q,
                  FP8CastCounts* counts) const {
    const float amax = amax_f32(x, n);
    const BlockScale s = block_scale(amax, max);
    *block_e = s.e;
    cast_fp8_block(fp8, x, n, s.multiplier, amax, block_q, counts);
  }

  DType fp8;
  float max;
  const uint8_t* px;
  size_t es;
  uint8_t* q;
  uint8_t* e;
};

}  // namespace

void CpuBackend::quantize_mxfp8_rowwise(const Tensor& x, Tensor& data, Tensor& scales,
                                        FP8CastCounts* counts) const {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const CastBuffers io(x, data, scales);
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1));
  std::vector<FP8CastCounts> partial(static_cast<size_t>(num_threads()));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    FP8CastCounts* mine = counts ? &partial[static_cast<size_t>(parallel_chunk())] : nullptr;
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      to_f32(x.dtype(), io.px + r * cols * io.es, row.data(), cols);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t c0 = b * kBlock, n = std::min(kBlock, cols - c0);
        io.cast_block(row.data() + c0, n, io.e + r * blocks + b, io.q + r * cols + c0, mine);
      }
    }
  });
  add_partial_counts(partial, rows * cols, counts);
}

void CpuBackend::quantize_mxfp8_columnwise(const Tensor& x, Tensor& data, Tensor& scales,
                                           FP8CastCounts* counts) const {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t blocks = (rows + kBlock - 1) / kBlock;  // per output row (= input column)
  const CastBuffers io(x, data, scales);
  // One task = one block of 32 input rows x a tile of columns, gathered transposed so that each
  // column's block is contiguous: (tile, 32) floats.
  constexpr int64_t kTile = 64;
  const int64_t tiles = (cols + kTile - 1) / kTile;
  std::vector<FP8CastCounts> partial(static_cast<size_t>(num_threads()));
  parallel_for(0, blocks * tiles, 1, [&](int64_t t0, int64_t t1) {
    FP8CastCounts* mine = counts ? &partial[static_cast<size_t>(parallel_chunk())] : nullptr;
    std::vector<float> in(static_cast<size_t>(kBlock * kTile));
    std::vector<float> gathered(static_cast<size_t>(kTile * kBlock));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / tiles;
      const int64_t r0 = b * kBlock, nr = std::min(kBlock, rows - r0);
      const int64_t c0 = (t % tiles) * kTile, nc = std::min(kTile, cols - c0);
      for (int64_t r = 0; r < nr; ++r) {
        to_f32(x.dtype(), io.px + ((r0 + r) * cols + c0) * io.es, in.data() + r * kTile, nc);
      }
      for (int64_t c = 0; c < nc; ++c) {
        float* column = gathered.data() + c * kBlock;
        for (int64_t r = 0; r < nr; ++r) column[r] = in[static_cast<size_t>(r * kTile + c)];
        io.cast_block(column, nr, io.e + (c0 + c) * blocks + b, io.q + (c0 + c) * rows + r0, mine);
      }
    }
  });
  add_partial_counts(partial, rows * cols, counts);
}

void CpuBackend::dequantize_mxfp8(const Tensor& data, const Tensor& scales, Tensor& out) const {
  const int64_t blocks = (data.cols() + kBlock - 1) / kBlock;
  const uint8_t* e = scales.data_as<uint8_t>();
  // A power of two times a value of at most 4 significant bits: exact in f32.
  dequantize_scaled_fp8(
      data, out, [&](int64_t r, int64_t c) { return from_e8m0(e[r * blocks + c / kBlock]); });
}

}  // namespace octet::cpu
