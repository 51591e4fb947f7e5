// GEMM on the CPU: every operand type runs on oneDNN's f32 sgemm (JIT-compiled for the processor
// it finds). The output is cut into a grid of tiles fixed by the shape alone, and each tile is one
// single-threaded sgemm over the whole K, claimed by any thread of octet's pool: the bits of every
// output element depend on neither the thread count nor which thread ran it (oneDNN's own
// threading splits K differently for 1 and 2 threads on some processors), and on a busy machine a
// thread that runs takes the tiles of one that does not. FP8 and bf16 values convert to f32
// exactly, so the only roundings are the f32 accumulation and the final alpha (scale_inv product)
// multiply; a GELU epilogue and an FP8 output then run on the f32 result.
#include <dnnl.h>

#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/fp8_simd.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/cpu/simd.h"
#include "kernels/math/activation.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// f32 conversions of the operands, kept between calls so a training step does not page-fault
// fresh buffers each GEMM. Counted under MemTag::kWorkspace while held.
struct Workspace {
  Tensor buffers[5];  // 0, 1: the operands as f32; 2: an f32 result; 3, 4: a tile's B and A

  float* get(int slot, int64_t elements) {
    Tensor& t = buffers[slot];
    if (!t.defined() || t.numel() < elements) {
      t = Tensor();  // free before allocating the larger one
      MemTagScope tag(MemTag::kWorkspace);
      t = Tensor::empty({elements}, DType::kF32);
    }
    return t.data_as<float>();
  }

  // The first rows * cols floats of `slot` as an f32 (rows, cols) tensor (a view).
  Tensor matrix(int slot, int64_t rows, int64_t cols) {
    get(slot, rows * cols);
    return buffers[slot].slice(0, rows * cols).reshape({rows, cols});
  }
};

thread_local Workspace t_workspace;

// Writes logical (rows, cols) of `src` as row-major f32 into dst. `src` holds it as (rows, cols)
// or, transposed, as (cols, rows).
void to_f32_matrix(const Tensor& src, ops::Transpose trans, int64_t rows, int64_t cols,
                   float* dst) {
  const auto* p = static_cast<const uint8_t*>(src.data());
  const size_t es = src.element_size();
  if (trans == ops::Transpose::kNo) {
    parallel_for(0, rows * cols, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      to_f32(src.dtype(), p + lo * es, dst + lo, hi - lo);
    });
    return;
  }
  // Stored (cols, rows), in tiles. FP8 converts and transposes at once, through registers.
  constexpr int64_t kTile = 64;
  const int64_t tiles = (cols + kTile - 1) / kTile;
  if (is_fp8(src.dtype())) {
    parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t c0 = t0 * kTile; c0 < std::min(cols, t1 * kTile); c0 += kTile) {
        const int64_t c1 = std::min(cols, c0 + kTile);
        for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
          const int64_t r1 = std::min(rows, r0 + kTile);
          fp8_to_f32_transposed(src.dtype(), p + c0 * rows + r0, rows, c1 - c0, r1 - r0,
                                dst + r0 * cols + c0, cols);
        }
      }
    });
    return;
  }
  // Other dtypes: convert stored rows, then write them transposed, 16x16 blocks at a time
  // through registers where the processor has AVX-512.
  parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> buf(static_cast<size_t>(kTile * kTile));
    for (int64_t c0 = t0 * kTile; c0 < std::min(cols, t1 * kTile); c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        const int64_t r1 = std::min(rows, r0 + kTile);
        for (int64_t c = c0; c < c1; ++c) {
          to_f32(src.dtype(), p + (c * rows + r0) * es, buf.data() + (c - c0) * kTile, r1 - r0);
        }
        // buf holds (c - c0, r - r0); dst wants (r, c).
        transpose_f32(buf.data(), kTile, c1 - c0, r1 - r0, dst + r0 * cols + c0, cols);
      }
    }
  });
}

void check_dnnl(dnnl_status_t status, int64_t m, int64_t n, int64_t k) {
  OCTET_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status),
              " for M=", m, " N=", n, " K=", k);
}

// oneDNN's sgemm is fastest with neither operand transposed: a transposed B costs more than
// copying it untransposed with the register-transpose copy below (the FP8 modules' GEMMs all read
// B transposed), while a transposed A pays off only for a long K (docs/perf/2026-12-cpu-gemm.md).
constexpr int64_t kUntransposeAFromK = 2048;

struct Operand {
  const float* data;
  bool transposed;
};

// The tile grid of an (m, n) output with inner dimension k: rows and columns split in halves until
// there are enough tiles (about kTileFlops of work each, at most kMaxTiles: some to spare for
// threads that fall behind) or a tile would be thinner than kMinTileSide. From the shape only.
// More tiles cost more than they balance; 2 MFLOP tiles also split the default model's small
// GEMMs (docs/perf/2026-12-cpu-gemm.md).
constexpr double kTileFlops = 2e6;
constexpr int64_t kMaxTiles = 16;
constexpr int64_t kMinTileSide = 64;
struct TileGrid {
  int64_t rows = 1, cols = 1;
};
TileGrid tile_grid(int64_t m, int64_t n, int64_t k) {
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t target =
      std::clamp<int64_t>(static_cast<int64_t>(flops / kTileFlops), 1, kMaxTiles);
  TileGrid g;
  while (g.rows * g.cols < target) {
    const int64_t tile_m = m / g.rows, tile_n = n / g.cols;
    if (tile_n >= tile_m && tile_n >= 2 * kMinTileSide) {
      g.cols *= 2;
    } else if (tile_m >= 2 * kMinTileSide) {
      g.rows *= 2;
    } else if (tile_n >= 2 * kMinTileSide) {
      g.cols *= 2;
    } else {
      break;
    }
  }
  return g;
}
// Start of part i of `parts` of [0, size), on a multiple of 16 (the vector width of the kernels).
int64_t tile_start(int64_t i, int64_t parts, int64_t size) {
  return i == parts ? size : size * i / parts / 16 * 16;
}

// C = alpha * op(A) op(B) + beta * C, row-major, tile by tile (tile_grid) on the pool.
void tiled_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c) {
  const TileGrid g = tile_grid(m, n, k);
  parallel_tasks(g.rows * g.cols, [&](int64_t t) {
    const int64_t ti = t / g.cols, tj = t % g.cols;
    const int64_t r0 = tile_start(ti, g.rows, m), r1 = tile_start(ti + 1, g.rows, m);
    const int64_t c0 = tile_start(tj, g.cols, n), c1 = tile_start(tj + 1, g.cols, n);
    if (r0 >= r1 || c0 >= c1) return;
    const SerialLibraryScope serial;  // one thread per tile
    const float* at = transa == 'T' ? a + r0 : a + r0 * lda;
    const float* bt = transb == 'T' ? b + c0 * ldb : b + c0;
    // A tile of a row-major operand's columns (B's, or a transposed A's) is read from a
    // contiguous copy. oneDNN's AVX2 sgemm (2.6) reads a 32-byte aligned operand in place, and at
    // a long row stride that runs at about half speed (docs/perf/2026-12-cpu-gemm.md). The
    // products are the same, bit for bit.
    const auto packed_columns = [&](int slot, const float* src, int64_t ld, int64_t width) {
      float* packed = t_workspace.get(slot, k * width);
      for (int64_t row = 0; row < k; ++row) {
        std::memcpy(packed + row * width, src + row * ld,
                    static_cast<size_t>(width) * sizeof(float));
      }
      return packed;
    };
    int64_t tile_lda = lda, tile_ldb = ldb;
    if (transa == 'T' && r1 - r0 < lda) {
      at = packed_columns(4, at, lda, r1 - r0);
      tile_lda = r1 - r0;
    }
    if (transb == 'N' && c1 - c0 < ldb) {
      bt = packed_columns(3, bt, ldb, c1 - c0);
      tile_ldb = c1 - c0;
    }
    check_dnnl(dnnl_sgemm(transa, transb, r1 - r0, c1 - c0, k, alpha, at, tile_lda, bt, tile_ldb,
                          beta, c + r0 * n + c0, n),
               r1 - r0, c1 - c0, k);
  });
}

// The f32 operand sgemm reads: `x` itself when it is f32 and its layout is fine; else a copy in
// workspace `slot`, converted exactly to f32, and untransposed when `untranspose` asks for it
// (the conversion pass does both at once).
Operand prepare(const Tensor& x, bool trans, int64_t rows, int64_t cols, bool untranspose,
                int slot) {
  const bool fix_layout = trans && untranspose;
  if (x.dtype() == DType::kF32 && !fix_layout) return {x.data_as<float>(), trans};
  float* ws = t_workspace.get(slot, rows * cols);
  if (fix_layout) {
    to_f32_matrix(x, ops::Transpose::kYes, rows, cols, ws);
    return {ws, false};
  }
  // Same layout as stored: a flat conversion.
  to_f32_matrix(x, ops::Transpose::kNo, rows * cols, 1, ws);
  return {ws, trans};
}

// Fewer rows than this against a transposed f32 B (a weight (N, K), as in generation's one token
// a sequence) go through dot products instead of the GEMM: each weight row is read once, split
// over every thread by columns (the GEMM's tile grid would give so thin a product one thread).
constexpr int64_t kGemvRows = 4;

// c (m, n) = alpha * a (m, k) b (n, k)^T + beta * c, one dot product per element.
void gemv_rows(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
               float beta, float* c) {
  parallel_for(0, n, 64, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        const float d = alpha * rowops::dot(a + i * k, b + j * k, k);
        c[i * n + j] = beta == 0.f ? d : d + c[i * n + j];
      }
    }
  });
}

// x = gelu_tanh(x) in place: the loop of the activation kernel (kernels/cpu/activation.cpp), so
// the epilogue gives the numbers ops::activation would.
OCTET_VECTOR_CLONES void gelu_block(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = math::gelu_tanh(x[i]);
}

}  // namespace

void gemm(const Tensor& a, ops::Transpose ta, const Tensor& b, ops::Transpose tb, Tensor& out,
          float alpha, ops::Accumulate accumulate, const Tensor* bias, ops::Epilogue epilogue,
          float out_scale, float* out_amax) {
  const bool a_trans = ta == ops::Transpose::kYes, b_trans = tb == ops::Transpose::kYes;
  const int64_t m = a_trans ? a.cols() : a.rows();
  const int64_t k = a_trans ? a.rows() : a.cols();
  const int64_t n = b_trans ? b.rows() : b.cols();

  // The result lands in f32 (out itself, or a workspace for a bf16 or FP8 out), pre-loaded with
  // out's old contents and/or the bias so that sgemm's beta = 1 adds the product.
  const bool f32_out = out.dtype() == DType::kF32;
  const bool fp8_out = is_fp8(out.dtype());
  float* c = f32_out ? out.data_as<float>() : t_workspace.get(2, m * n);
  const bool keep = accumulate == ops::Accumulate::kYes;
  if (!f32_out && keep) to_f32_matrix(out, ops::Transpose::kNo, m, n, c);
  std::vector<float> bias_row;
  if (bias != nullptr) {
    bias_row.resize(static_cast<size_t>(n));
    to_f32(bias->dtype(), bias->data(), bias_row.data(), n);
    parallel_for(0, m, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     float* row = c + r * n;
                     if (keep) {
                       for (int64_t j = 0; j < n; ++j) row[j] += bias_row[static_cast<size_t>(j)];
                     } else {
                       for (int64_t j = 0; j < n; ++j) row[j] = bias_row[static_cast<size_t>(j)];
                     }
                   }
                 });
  }
  const float beta = (keep || bias != nullptr) ? 1.f : 0.f;
  if (k == 0) {
    if (beta == 0.f) std::fill(c, c + m * n, 0.f);
  } else if (m > 0 && n > 0) {
    if (m < kGemvRows && b_trans && !a_trans && a.dtype() == DType::kF32 &&
        b.dtype() == DType::kF32) {
      gemv_rows(m, n, k, alpha, a.data_as<float>(), b.data_as<float>(), beta, c);
    } else if (cpu_gemm_library() == CpuGemmLibrary::kOctet) {
      // Stored rows: A (M, K) or (K, M); B (K, N) or (N, K).
      const GemmOperand oa{a.data(), a.dtype(), a_trans, a_trans ? m : k};
      const GemmOperand ob{b.data(), b.dtype(), b_trans, b_trans ? k : n};
      sgemm(m, n, k, alpha, oa, ob, beta == 0.f ? GemmUpdate::kOverwrite : GemmUpdate::kAdd, c, n);
    } else {
      const Operand pa = prepare(a, a_trans, m, k, k >= kUntransposeAFromK, 0);
      const Operand pb = prepare(b, b_trans, k, n, true, 1);
      const char transa = pa.transposed ? 'T' : 'N', transb = pb.transposed ? 'T' : 'N';
      const int64_t lda = transa == 'T' ? m : k;
      const int64_t ldb = transb == 'T' ? k : n;
      tiled_sgemm(transa, transb, m, n, k, alpha, pa.data, lda, pb.data, ldb, beta, c);
    }
  }
  if (epilogue == ops::Epilogue::kGelu) {
    constexpr int64_t kGeluGrain = 4096;  // an exp per element: compute-bound
    parallel_for(0, m * n, kGeluGrain,
                 [&](int64_t lo, int64_t hi) { gelu_block(c + lo, hi - lo); });
  }
  if (fp8_out) {
    // The FP8 cast of ops::quantize_fp8, amax (before the scale, NaN ignored) included.
    const Tensor result = t_workspace.matrix(2, m, n);  // (M, N) f32: c
    quantize_fp8(result, out_scale, &out, nullptr, out_amax, nullptr);
  } else if (!f32_out) {
    auto* po = static_cast<uint8_t*>(out.data());
    parallel_for(0, m * n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      from_f32(c + lo, out.dtype(), po + lo * out.element_size(), hi - lo);
    });
  }
}

void CpuBackend::gemm(const Tensor& a, ops::Transpose ta, const Tensor& b, ops::Transpose tb,
                      Tensor& out, const ops::GemmOptions& o) const {
  // The operands' scale_inv fold into alpha: the CPU's f32 result is the exact product of the
  // FP8 values either way, rounded once.
  float alpha = o.alpha;
  if (o.a_scale_inv != nullptr) alpha *= o.a_scale_inv->item();
  if (o.b_scale_inv != nullptr) alpha *= o.b_scale_inv->item();
  if (o.alpha_scale != nullptr) alpha *= o.alpha_scale->item();
  const float out_scale = o.out_scale != nullptr ? o.out_scale->item() : 1.f;
  cpu::gemm(a, ta, b, tb, out, alpha, o.accumulate, o.bias, o.epilogue, out_scale,
            o.out_amax != nullptr ? o.out_amax->data_as<float>() : nullptr);
}

void CpuBackend::release_workspace() const { t_workspace = Workspace(); }

}  // namespace octet::cpu
