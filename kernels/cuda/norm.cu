// LayerNorm and RMSNorm on the GPU: forward, the forward fused with the per-tensor FP8 cast, and
// backward. The forward is two kernels: row statistics (one block per row, the shifted, corrected
// two-pass variance of kernels/cpu/norm.cpp) and an elementwise pass that normalizes. The fused
// FP8 form runs the same statistics kernel and normalizes in tiles that are cast at once (the
// column-wise bytes transposed through shared memory), so its bytes equal quantize_fp8 of
// norm_forward's y bit for bit and no high-precision y is written.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/math/norm.h"
#include "runtime/memory.h"

namespace octet::cuda {
namespace {

using ops::NormKind;
using ops::ZeroCenteredGamma;

// The FP8 cast tile: rows x columns normalized and cast by one block.
constexpr int kTileRows = 64;
constexpr int kTileCols = 64;
// Blocks of the backward, each summing its rows' gamma/beta gradients into one partial row. A
// fixed number, so the partials (and dgamma's rounding) do not depend on the device.
constexpr int64_t kGradBlocks = 256;

// What normalizing row r needs: y = ((x - shift) - dmean) * rsigma * scale + beta, where
// shift + dmean is the LayerNorm mean (both 0 for RMSNorm).
struct RowStats {
  float shift, dmean, rsigma;
};

// shift_dmean (rows, 2): the LayerNorm shift and mean correction; null for RMSNorm.
__device__ __forceinline__ RowStats row_stats(const float* shift_dmean, const float* rsigma,
                                              int64_t r) {
  if (shift_dmean == nullptr) return {0.f, 0.f, rsigma[r]};
  return {shift_dmean[2 * r], shift_dmean[2 * r + 1], rsigma[r]};
}

// The effective scale: gamma, or 1 + gamma when gamma is stored zero-centred.
__device__ __forceinline__ float scale_of(const float* gamma, float offset, int64_t c) {
  return __fadd_rn(gamma[c], offset);
}

// One normalized element. Every rounding is explicit (these intrinsics are never contracted into
// FMAs), so the f32 pass and the FP8 pass compute the same y bit for bit, in the CPU's order.
__device__ __forceinline__ float normalize(float x, const RowStats& s, float scale, float beta) {
  const float xhat = __fmul_rn(__fsub_rn(__fsub_rn(x, s.shift), s.dmean), s.rsigma);
  return __fadd_rn(__fmul_rn(xhat, scale), beta);
}

// Row statistics, one block per row. LayerNorm: a first mean estimate m0 is the shift (x - m0 is
// exact for values near a large mean) and the deviations' own sum corrects it; writes
// shift_dmean, mean (nullable) and rsigma. RMSNorm: rsigma only.
template <bool kLayer>
__global__ void norm_stats_kernel(ActIn x, int64_t rows, int64_t cols, float eps,
                                  float* shift_dmean, float* mean, float* rsigma) {
  const float n = static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const ActIn xr = x + r * cols;
    if constexpr (!kLayer) {
      float sq = 0.f;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sq += xr[c] * xr[c];
      const float rs = math::rsqrt_eps(block_reduce(sq, SumOp(), 0.f) / n, eps);
      if (threadIdx.x == 0) rsigma[r] = rs;
    } else {
      float s = 0.f;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
      const float m0 = block_reduce(s, SumOp(), 0.f) / n;
      float s1 = 0.f, s2 = 0.f;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = xr[c] - m0;
        s1 += d;
        s2 += d * d;
      }
      const float sum = block_reduce(s1, SumOp(), 0.f);
      const float sum_sq = block_reduce(s2, SumOp(), 0.f);
      const float rs = math::rsqrt_eps(math::corrected_variance(sum_sq, sum, n), eps);
      if (threadIdx.x == 0) {
        const float dmean = sum / n;
        shift_dmean[2 * r] = m0;
        shift_dmean[2 * r + 1] = dmean;
        if (mean != nullptr) mean[r] = m0 + dmean;
        rsigma[r] = rs;
      }
    }
  }
}

// y (rows, cols) from x and the row statistics; beta nullable. kVec columns at a time when
// `vector` (cols a multiple of kVec, x, gamma, beta and y aligned): the walk then has cols / kVec
// groups a row.
template <typename I>
__global__ void norm_apply_kernel(ActIn x, const float* shift_dmean, const float* rsigma,
                                  const float* gamma, float offset, const float* beta, ActOut y,
                                  I rows, I cols, bool vector) {
  const I w = vector ? kVec : 1, n = rows * cols / w;
  grid_stride_rows(n, cols / w, [&](I i, I r, I col) {
    const RowStats st = row_stats(shift_dmean, rsigma, r);
    if (vector) {
      const I c = col * kVec;
      const Vec<float> xv = x.vec(i * kVec), g = load_vec(gamma, c);
      const Vec<float> b = beta != nullptr ? load_vec(beta, c) : Vec<float>{};
      Vec<float> out;
      for (int k = 0; k < kVec; ++k) {
        out.v[k] = normalize(xv.v[k], st, __fadd_rn(g.v[k], offset), b.v[k]);
      }
      y.set_vec(i * kVec, out);
    } else {
      const float b = beta != nullptr ? beta[col] : 0.f;
      y.set(i, normalize(x[i], st, scale_of(gamma, offset, col), b));
    }
  });
}

// The normalization of norm_apply_kernel cast to FP8 (q = fp8(y * scale[0]), the rule of
// quantize_fp8) tile by tile: row-wise bytes straight out, column-wise ones (cols, rows) through
// a shared tile so each column's run of rows is written contiguously. max |y| (NaN ignored) is
// max-accumulated into amax[0].
template <bool kE4M3>
__global__ void norm_cast_kernel(ActIn x, const float* shift_dmean, const float* rsigma,
                                 const float* gamma, float offset, const float* beta,
                                 const float* scale, uint8_t* rowwise, uint8_t* columnwise,
                                 float* amax, int64_t rows, int64_t cols, bool vector,
                                 unsigned long long* stats) {
  // +4 bytes per row: reading a column of the tile (stride 17 words) hits 32 distinct banks.
  __shared__ uint8_t tile[kTileRows][kTileCols + 4];
  const float s = *scale;
  const int64_t col_tiles = (cols + kTileCols - 1) / kTileCols;
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows * col_tiles;
  float local = 0.f;
  CastTally tally;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = t / col_tiles * kTileRows, c0 = t % col_tiles * kTileCols;
    // kVec consecutive columns per step when `vector` (cols a multiple of kVec: a group is
    // all in or all out; x, gamma, beta and rowwise aligned), else one.
    const int w = vector ? kVec : 1, shift = vector ? 4 : 6;  // steps a tile row: 2^shift
    static_assert(kTileCols == 64 && kVec == 4, "a tile row is 2^6 columns, 2^4 groups");
    for (int k = threadIdx.x; k < kTileRows << shift; k += blockDim.x) {
      const int rr = k >> shift, cc = (k & ((1 << shift) - 1)) * w;
      const int64_t r = r0 + rr, c = c0 + cc;
      if (r >= rows || c >= cols) continue;
      const RowStats st = row_stats(shift_dmean, rsigma, r);
      float xv[kVec], g[kVec], b[kVec];
      if (vector) {
        const Vec<float> xs = x.vec(r * cols + c), gs = load_vec(gamma, c);
        const Vec<float> bs = beta != nullptr ? load_vec(beta, c) : Vec<float>{};
        for (int j = 0; j < kVec; ++j) {
          xv[j] = xs.v[j];
          g[j] = gs.v[j];
          b[j] = bs.v[j];
        }
      } else {
        xv[0] = x[r * cols + c];
        g[0] = gamma[c];
        b[0] = beta != nullptr ? beta[c] : 0.f;
      }
      Vec<uint8_t> q;
      for (int j = 0; j < w; ++j) {
        const float y = normalize(xv[j], st, __fadd_rn(g[j], offset), b[j]);
        const float a = fabsf(y);
        local = a > local ? a : local;  // NaN compares false: ignored
        const float scaled = __fmul_rn(y, s);
        q.v[j] = kE4M3 ? to_e4m3(scaled) : to_e5m2(scaled);
        tile[rr][cc + j] = q.v[j];
        if (stats != nullptr) tally.add_fp8(y, scaled, q.v[j], kE4M3 ? kE4M3Max : kE5M2Max);
      }
      if (rowwise != nullptr) {
        if (vector) {
          store_vec(rowwise, r * cols + c, q);
        } else {
          rowwise[r * cols + c] = q.v[0];
        }
      }
    }
    if (columnwise != nullptr) {  // uniform across the launch
      __syncthreads();
      for (int k = threadIdx.x; k < kTileRows * kTileCols; k += blockDim.x) {
        const int cc = k / kTileRows, rr = k % kTileRows;
        const int64_t r = r0 + rr, c = c0 + cc;
        if (r < rows && c < cols) columnwise[c * rows + r] = tile[rr][cc];
      }
      __syncthreads();  // the next tile overwrites `tile`
    }
  }
  tally.flush(stats);
  if (amax != nullptr) {
    const float m = block_reduce(local, MaxOp(), 0.f);
    if (threadIdx.x == 0) atomic_merge_amax(amax, m);
  }
}

// dx for each row, and the block's rows' dy * xhat (and dy) summed into its partial rows
// part_gamma / part_beta (gridDim.x, cols). Each thread owns the columns c = threadIdx.x mod
// blockDim.x of its block's partial rows, so the partials need no atomics.
__global__ void norm_backward_kernel(ActIn dy, ActIn x, const float* mean, const float* rsigma,
                                     const float* gamma, float offset, ActOut dx, float* part_gamma,
                                     float* part_beta, int64_t rows, int64_t cols) {
  const float n = static_cast<float>(cols);
  float* pg = part_gamma + blockIdx.x * cols;
  float* pb = part_beta != nullptr ? part_beta + blockIdx.x * cols : nullptr;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    pg[c] = 0.f;
    if (pb != nullptr) pb[c] = 0.f;
  }
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t o = r * cols;
    const float mu = mean != nullptr ? mean[r] : 0.f;
    const float rs = rsigma[r];
    float s1 = 0.f, s2 = 0.f;  // sum g and sum g * xhat, g = dy * scale
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = dy[o + c] * scale_of(gamma, offset, c);
      s1 += g;
      s2 += g * ((x[o + c] - mu) * rs);
    }
    const float sum_g = block_reduce(s1, SumOp(), 0.f);
    const float sum_gx = block_reduce(s2, SumOp(), 0.f);
    // RMSNorm subtracts no mean in forward, so no mean-gradient term comes back.
    const float mean_g = mean != nullptr ? sum_g / n : 0.f;
    const float mean_gx = sum_gx / n;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float d = dy[o + c];
      const float xhat = (x[o + c] - mu) * rs;
      dx.set(o + c,
             math::norm_input_grad(d * scale_of(gamma, offset, c), xhat, mean_g, mean_gx, rs));
      pg[c] += d * xhat;
      if (pb != nullptr) pb[c] += d;
    }
  }
}

// out[c] = sum over the partial rows (blocks, cols) in block order, in f64.
__global__ void sum_partials_kernel(const float* part, int64_t blocks, int64_t cols, float* out) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    double s = 0.0;
    for (int64_t b = 0; b < blocks; ++b) s += part[b * cols + c];
    out[c] = static_cast<float>(s);
  }
}

float offset_of(ZeroCenteredGamma zc) { return zc == ZeroCenteredGamma::kYes ? 1.f : 0.f; }

// Runs the statistics kernel: mean (nullable) and rsigma (rows,) written; for LayerNorm the
// returned (rows, 2) workspace holds each row's shift and mean correction (undefined for RMSNorm).
Tensor run_stats(NormKind kind, const Tensor& x, float eps, Tensor* mean, Tensor& rsigma) {
  const int64_t rows = x.rows(), cols = x.cols();
  const bool layer = kind == NormKind::kLayerNorm;
  Tensor shift_dmean;
  if (layer) {
    MemTagScope tag(MemTag::kWorkspace);
    shift_dmean = Tensor::empty({rows, 2}, DType::kF32, x.device());
  }
  if (rows == 0) return shift_dmean;
  cudaStream_t stream = stream_of(x);
  const unsigned blocks = row_blocks(rows);
  const int threads = row_threads(cols);
  if (layer) {
    norm_stats_kernel<true><<<blocks, threads, 0, stream>>>(
        act_in(x), rows, cols, eps, shift_dmean.data_as<float>(),
        mean != nullptr ? mean->data_as<float>() : nullptr, rsigma.data_as<float>());
  } else {
    norm_stats_kernel<false><<<blocks, threads, 0, stream>>>(act_in(x), rows, cols, eps, nullptr,
                                                             nullptr, rsigma.data_as<float>());
  }
  OCTET_CUDA_LAUNCH_CHECK("norm_stats");
  return shift_dmean;
}

}  // namespace

void CudaBackend::norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma,
                               const Tensor* beta, float eps, ZeroCenteredGamma zc, Tensor& y,
                               Tensor* mean, Tensor& rsigma) const {
  const int64_t rows = x.rows(), cols = x.cols();
  const Tensor shift_dmean = run_stats(kind, x, eps, mean, rsigma);
  if (rows * cols == 0) return;
  const float* pb = beta != nullptr ? beta->data_as<float>() : nullptr;
  const bool vector = act_rows_vec_ok(x, cols) && vec_aligned(gamma.data(), 4) &&
                      (pb == nullptr || vec_aligned(pb, 4)) && act_vec_ok(y);
  const unsigned blocks = vector ? vec_blocks_for(rows * cols) : blocks_for(rows * cols);
  with_index_type(rows * cols, [&]<typename I>(I) {
    norm_apply_kernel<I><<<blocks, kThreads, 0, stream_of(x)>>>(
        act_in(x), shift_dmean.defined() ? shift_dmean.data_as<float>() : nullptr,
        rsigma.data_as<float>(), gamma.data_as<float>(), offset_of(zc), pb, act_out(y),
        static_cast<I>(rows), static_cast<I>(cols), vector);
    OCTET_CUDA_LAUNCH_CHECK("norm_apply");
  });
}

void CudaBackend::norm_quantize_fp8(NormKind kind, const Tensor& x, const Tensor& gamma,
                                    const Tensor* beta, float eps, ZeroCenteredGamma zc,
                                    const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                                    Tensor* amax, Tensor* mean, Tensor& rsigma,
                                    FP8CastCounts* counts) const {
  const int64_t rows = x.rows(), cols = x.cols();
  unsigned long long* stats = cast_stats_words(counts, x.device(), rows * cols);
  const Tensor shift_dmean = run_stats(kind, x, eps, mean, rsigma);
  if (rows * cols == 0) return;
  const DType fp8 = rowwise != nullptr ? rowwise->dtype() : columnwise->dtype();
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows * ((cols + kTileCols - 1) / kTileCols);
  const unsigned blocks = blocks_for(tiles, 1);
  const float* psd = shift_dmean.defined() ? shift_dmean.data_as<float>() : nullptr;
  const float* pb = beta != nullptr ? beta->data_as<float>() : nullptr;
  uint8_t* row = rowwise != nullptr ? rowwise->data_as<uint8_t>() : nullptr;
  uint8_t* col = columnwise != nullptr ? columnwise->data_as<uint8_t>() : nullptr;
  float* pa = amax != nullptr ? amax->data_as<float>() : nullptr;
  cudaStream_t stream = stream_of(x);
  const bool vector = act_rows_vec_ok(x, cols) && vec_aligned(gamma.data(), 4) &&
                      (pb == nullptr || vec_aligned(pb, 4)) &&
                      (row == nullptr || vec_aligned(row, 1));
  if (fp8 == DType::kE4M3) {
    norm_cast_kernel<true><<<blocks, kThreads, 0, stream>>>(
        act_in(x), psd, rsigma.data_as<float>(), gamma.data_as<float>(), offset_of(zc), pb,
        scale.data_as<float>(), row, col, pa, rows, cols, vector, stats);
  } else {
    norm_cast_kernel<false><<<blocks, kThreads, 0, stream>>>(
        act_in(x), psd, rsigma.data_as<float>(), gamma.data_as<float>(), offset_of(zc), pb,
        scale.data_as<float>(), row, col, pa, rows, cols, vector, stats);
  }
  OCTET_CUDA_LAUNCH_CHECK("norm_cast_fp8");
}

void CudaBackend::norm_backward(const Tensor& dy, const Tensor& x, const Tensor* mean,
                                const Tensor& rsigma, const Tensor& gamma, ZeroCenteredGamma zc,
                                Tensor& dx, Tensor& dgamma, Tensor* dbeta) const {
  const int64_t rows = x.rows(), cols = x.cols();
  cudaStream_t stream = stream_of(x);
  if (rows == 0 || cols == 0) {  // no rows: the parameter gradients are 0
    if (cols > 0) {
      OCTET_CUDA_CHECK(cudaMemsetAsync(dgamma.data(), 0, dgamma.nbytes(), stream));
      if (dbeta != nullptr) {
        OCTET_CUDA_CHECK(cudaMemsetAsync(dbeta->data(), 0, dbeta->nbytes(), stream));
      }
    }
    return;
  }
  const int64_t blocks = rows < kGradBlocks ? rows : kGradBlocks;
  Tensor part_gamma, part_beta;  // (blocks, cols)
  {
    MemTagScope tag(MemTag::kWorkspace);
    part_gamma = Tensor::empty({blocks, cols}, DType::kF32, x.device());
    if (dbeta != nullptr) part_beta = Tensor::empty({blocks, cols}, DType::kF32, x.device());
  }
  norm_backward_kernel<<<static_cast<unsigned>(blocks), row_threads(cols), 0, stream>>>(
      act_in(dy), act_in(x), mean != nullptr ? mean->data_as<float>() : nullptr,
      rsigma.data_as<float>(), gamma.data_as<float>(), offset_of(zc), act_out(dx),
      part_gamma.data_as<float>(), dbeta != nullptr ? part_beta.data_as<float>() : nullptr, rows,
      cols);
  OCTET_CUDA_LAUNCH_CHECK("norm_backward");
  sum_partials_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(
      part_gamma.data_as<float>(), blocks, cols, dgamma.data_as<float>());
  OCTET_CUDA_LAUNCH_CHECK("norm_backward_sum_partials");
  if (dbeta != nullptr) {
    sum_partials_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(
        part_beta.data_as<float>(), blocks, cols, dbeta->data_as<float>());
    OCTET_CUDA_LAUNCH_CHECK("norm_backward_sum_partials");
  }
}

}  // namespace octet::cuda
