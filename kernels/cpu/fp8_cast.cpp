// FP8 quantize (fused amax, row-wise and column-wise output in one pass), the norm fused with it,
// byte transpose, dequantize and the scaling state's updates on the CPU. The element rule is
// runtime/fp8.h, shared with the CUDA kernels.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/fp8_simd.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/simd.h"
#include "runtime/fp8.h"
#include "runtime/fp8_scaling.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// Rows x columns of one tile of the fused row-wise + column-wise cast.
constexpr int64_t kTileRows = 64;
constexpr int64_t kTileCols = 256;

}  // namespace

// Adds the saturated and flushed elements of a block just cast (x -> q, max |x| = block_max) to
// *counts. A pass of its own over data still in L1, kept out of the cast's vector loops: these
// compare-and-sum loops vectorise by themselves, and they mostly do not run at all:
// - saturated, |x * scale| > fp8_max: f32 rounding is monotonic, so no element can be when
//   block_max * |scale| <= fp8_max (or is NaN), the usual case, decided without a pass;
// - flushed, x != 0 but q = +-0: looked for only when some q is +-0. NaN needs no test: it casts
//   to 0x7F, and |NaN * scale| > fp8_max is false.
OCTET_VECTOR_CLONES void count_fp8_block(const float* x, const uint8_t* q, int64_t n, float scale,
                                         float block_max, float fp8_max, FP8CastCounts* counts) {
  int64_t zero_codes = 0;
  for (int64_t i = 0; i < n; ++i) zero_codes += (q[i] & 0x7Fu) == 0;
  if (zero_codes > 0) {
    int64_t flushed = 0;
    for (int64_t i = 0; i < n; ++i) flushed += (x[i] != 0.f) & ((q[i] & 0x7Fu) == 0);
    counts->flushed += flushed;
  }
  if (block_max * std::fabs(scale) > fp8_max) {
    int64_t saturated = 0;
    for (int64_t i = 0; i < n; ++i) saturated += std::fabs(x[i] * scale) > fp8_max;
    counts->saturated += saturated;
  }
}

void cast_fp8_block(DType fp8, const float* x, int64_t n, float scale, float block_amax, uint8_t* q,
                    FP8CastCounts* counts) {
  cast_fp8(fp8, x, n, scale, q);
  if (counts != nullptr) count_fp8_block(x, q, n, scale, block_amax, fp8_max(fp8), counts);
}

void add_partial_counts(const std::vector<FP8CastCounts>& partial, int64_t total,
                        FP8CastCounts* counts) {
  if (counts == nullptr) return;
  for (const FP8CastCounts& p : partial) *counts += p;
  counts->total += total;
}

namespace {

// The cast, then, when `counts` is not null, its counts added to *counts (all but `total`: the
// caller knows the size).
float cast_any(DType fp8, const float* x, int64_t n, float scale, uint8_t* q,
               FP8CastCounts* counts) {
  const float m = cast_fp8_amax(fp8, x, n, scale, q);
  if (counts != nullptr) count_fp8_block(x, q, n, scale, m, fp8_max(fp8), counts);
  return m;
}

// Byte-size-generic tile transpose: out (cols, rows) from in (rows, cols).
template <typename T>
void transpose_tiles(const T* in, T* out, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  parallel_for(0, row_tiles, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t r0 = t0 * kTile; r0 < std::min(rows, t1 * kTile); r0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile);
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
        const int64_t c1 = std::min(cols, c0 + kTile);
        for (int64_t c = c0; c < c1; ++c) {
          for (int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
        }
      }
    }
  });
}

// Writes a tile of cast bytes q (n_rows x n_cols, row stride q_stride) transposed into the
// column-wise output (cols x rows of the whole tensor) at rows [r0, r0 + n_rows), columns c0...
void write_columnwise_tile(const uint8_t* q, int64_t q_stride, int64_t n_rows, int64_t n_cols,
                           int64_t r0, int64_t c0, int64_t rows, uint8_t* col_out) {
  transpose_bytes(q, q_stride, n_rows, n_cols, col_out + c0 * rows + r0, rows);
}

// Max-accumulates the per-chunk maxima into *amax (when asked for).
void merge_amax(const std::vector<float>& partial, float* amax) {
  if (amax == nullptr) return;
  for (float m : partial) *amax = m > *amax ? m : *amax;
}

// The threaded frame of a cast of `rows` x `cols`: each chunk of whole kTileRows tiles, rows
// [begin, end), is cast by cast_rows(begin, end, its counts or null), which returns the max |.|
// of what it cast; the chunks' maxima go into *amax and their counts into *counts (nullable).
template <typename CastRows>
void cast_row_tiles(int64_t rows, int64_t cols, float* amax, FP8CastCounts* counts,
                    CastRows cast_rows) {
  std::vector<float> partial(static_cast<size_t>(num_threads()), 0.f);
  std::vector<FP8CastCounts> partial_counts(static_cast<size_t>(num_threads()));
  const int64_t row_tiles = (rows + kTileRows - 1) / kTileRows;
  parallel_for(0, row_tiles, 1, [&](int64_t t0, int64_t t1) {
    const auto chunk = static_cast<size_t>(parallel_chunk());
    partial[chunk] = cast_rows(t0 * kTileRows, std::min(rows, t1 * kTileRows),
                               counts ? &partial_counts[chunk] : nullptr);
  });
  merge_amax(partial, amax);
  add_partial_counts(partial_counts, rows * cols, counts);
}

}  // namespace

void quantize_fp8(const Tensor& x, float scale, Tensor* rowwise, Tensor* columnwise, float* amax,
                  FP8CastCounts* counts) {
  const int64_t rows = x.rows(), cols = x.cols();
  const DType fp8 = rowwise ? rowwise->dtype() : columnwise->dtype();
  const auto* px = static_cast<const uint8_t*>(x.data());
  const size_t es = x.element_size();
  const bool f32 = x.dtype() == DType::kF32;
  uint8_t* row_out = rowwise ? static_cast<uint8_t*>(rowwise->data()) : nullptr;
  uint8_t* col_out = columnwise ? static_cast<uint8_t*>(columnwise->data()) : nullptr;

  const auto cast_rows = [&](int64_t begin, int64_t end, FP8CastCounts* thread_counts) {
    std::vector<float> buf(static_cast<size_t>(kTileCols));
    std::vector<uint8_t> q(row_out ? 0 : static_cast<size_t>(kTileRows * kTileCols));
    float m = 0.f;
    for (int64_t r0 = begin; r0 < end; r0 += kTileRows) {
      const int64_t r1 = std::min(rows, r0 + kTileRows);
      for (int64_t c0 = 0; c0 < cols; c0 += kTileCols) {
        const int64_t w = std::min(kTileCols, cols - c0);
        for (int64_t r = r0; r < r1; ++r) {
          const float* src = reinterpret_cast<const float*>(px + (r * cols + c0) * es);
          if (!f32) {
            to_f32(x.dtype(), px + (r * cols + c0) * es, buf.data(), w);
            src = buf.data();
          }
          // Row-wise bytes go straight to the output, which the column-wise transpose then reads
          // while it is still in cache; without row-wise output they wait in the tile.
          uint8_t* dst = row_out ? row_out + r * cols + c0 : q.data() + (r - r0) * kTileCols;
          const float tile_max = cast_any(fp8, src, w, scale, dst, thread_counts);
          m = tile_max > m ? tile_max : m;
        }
        if (col_out) {
          const uint8_t* tile = row_out ? row_out + r0 * cols + c0 : q.data();
          write_columnwise_tile(tile, row_out ? cols : kTileCols, r1 - r0, w, r0, c0, rows,
                                col_out);
        }
      }
    }
    return m;
  };
  cast_row_tiles(rows, cols, amax, counts, cast_rows);
}

void CpuBackend::quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise,
                              Tensor* columnwise, Tensor* amax, FP8CastCounts* counts,
                              Tensor* scale_inv) const {
  const float s = scale.item();
  cpu::quantize_fp8(x, s, rowwise, columnwise, amax != nullptr ? amax->data_as<float>() : nullptr,
                    counts);
  if (scale_inv != nullptr) *scale_inv->data_as<float>() = scale_inverse(s);
}

// Each row is normalized into a one-row buffer and cast from there, so no high-precision output
// exists.
void CpuBackend::norm_quantize_fp8(ops::NormKind kind, const Tensor& x, const Tensor& gamma,
                                   const Tensor* beta, float eps, ops::ZeroCenteredGamma zc,
                                   const Tensor& scale_tensor, Tensor* rowwise, Tensor* columnwise,
                                   Tensor* amax_tensor, Tensor* mean_tensor, Tensor& rsigma_tensor,
                                   FP8CastCounts* counts) const {
  const NormRow norm(kind, gamma.data_as<float>(),
                     beta != nullptr ? beta->data_as<float>() : nullptr, eps, zc, x.cols());
  const float scale = scale_tensor.item();
  float* amax = amax_tensor != nullptr ? amax_tensor->data_as<float>() : nullptr;
  float* mean = mean_tensor != nullptr ? mean_tensor->data_as<float>() : nullptr;
  float* rsigma = rsigma_tensor.data_as<float>();
  const int64_t rows = x.rows(), cols = x.cols();
  const DType fp8 = rowwise ? rowwise->dtype() : columnwise->dtype();
  const float* px = x.data_as<float>();  // (rows, C)
  uint8_t* row_out = rowwise ? static_cast<uint8_t*>(rowwise->data()) : nullptr;
  uint8_t* col_out = columnwise ? static_cast<uint8_t*>(columnwise->data()) : nullptr;
  const auto cast_rows = [&](int64_t begin, int64_t end, FP8CastCounts* thread_counts) {
    std::vector<float> y(static_cast<size_t>(cols));  // (C,): one normalized row at a time
    std::vector<uint8_t> q(row_out ? 0 : static_cast<size_t>(kTileRows * cols));
    float m = 0.f;
    for (int64_t r0 = begin; r0 < end; r0 += kTileRows) {
      const int64_t r1 = std::min(rows, r0 + kTileRows);
      for (int64_t r = r0; r < r1; ++r) {
        norm(px + r * cols, y.data(), mean ? mean + r : nullptr, rsigma + r);
        uint8_t* dst = row_out ? row_out + r * cols : q.data() + (r - r0) * cols;
        const float row_max = cast_any(fp8, y.data(), cols, scale, dst, thread_counts);
        m = row_max > m ? row_max : m;
      }
      if (col_out) {
        const uint8_t* tile = row_out ? row_out + r0 * cols : q.data();
        write_columnwise_tile(tile, cols, r1 - r0, cols, r0, 0, rows, col_out);
      }
    }
    return m;
  };
  cast_row_tiles(rows, cols, amax, counts, cast_rows);
}

void CpuBackend::transpose_2d(const Tensor& x, Tensor& out) const {
  const int64_t rows = x.rows(), cols = x.cols();
  switch (x.element_size()) {
    case 1: {
      const uint8_t* in = x.data_as<uint8_t>();
      uint8_t* o = out.data_as<uint8_t>();
      constexpr int64_t kRows = 32;
      parallel_for(0, (rows + kRows - 1) / kRows, 4, [&](int64_t t0, int64_t t1) {
        const int64_t r0 = t0 * kRows, r1 = std::min(rows, t1 * kRows);
        transpose_bytes(in + r0 * cols, cols, r1 - r0, cols, o + r0, rows);
      });
      return;
    }
    case 2:
      transpose_tiles(x.data_as<uint16_t>(), out.data_as<uint16_t>(), rows, cols);
      return;
    case 4:
      transpose_tiles(x.data_as<uint32_t>(), out.data_as<uint32_t>(), rows, cols);
      return;
    case 8:
      transpose_tiles(x.data_as<uint64_t>(), out.data_as<uint64_t>(), rows, cols);
      return;
  }
  OCTET_FAIL("transpose_2d: unsupported element size ", x.element_size());
}

void CpuBackend::dequantize_fp8(const Tensor& data, const Tensor& scale_inv_tensor,
                                Tensor& out) const {
  const float scale_inv = scale_inv_tensor.item();
  const float* table = data.dtype() == DType::kE4M3 ? e4m3_to_float_table() : e5m2_to_float_table();
  const uint8_t* q = data.data_as<uint8_t>();
  auto* po = static_cast<uint8_t*>(out.data());
  parallel_for(0, data.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    constexpr int64_t kBlock = 1024;
    float buf[kBlock];
    for (int64_t i = lo; i < hi; i += kBlock) {
      const int64_t m = std::min(kBlock, hi - i);
      for (int64_t j = 0; j < m; ++j) buf[j] = table[q[i + j]] * scale_inv;
      from_f32(buf, out.dtype(), po + i * out.element_size(), m);
    }
  });
}

void CpuBackend::update_fp8_slots(const std::vector<ops::detail::SlotUpdate>& slots) const {
  for (const ops::detail::SlotUpdate& u : slots)
    update_fp8_slot(*u.slot, u.fp8_max, u.margin, u.algo);
}

void CpuBackend::current_scale(const Tensor& amax, float fp8_max, float amax_epsilon,
                               Power2Scale power_2, Tensor& scale, Tensor& scale_inv) const {
  const float s =
      ::octet::current_scale(amax.item(), fp8_max, amax_epsilon, power_2 == Power2Scale::kOn);
  *scale.data_as<float>() = s;
  *scale_inv.data_as<float>() = 1.f / s;
}

void CpuBackend::reciprocal(const Tensor& x, Tensor& out) const {
  *out.data_as<float>() = 1.f / x.item();
}

}  // namespace octet::cpu
