// GEMM on the CPU: every operand type runs on oneDNN's f32 sgemm (JIT-compiled for the processor
// it finds, threaded on the shared OpenMP pool). FP8 and bf16 values convert to f32 exactly, so
// the only roundings are the f32 accumulation and the final alpha (scale_inv product) multiply.
#include <dnnl.h>

#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// f32 conversions of the operands, kept between calls so a training step does not page-fault
// fresh buffers each GEMM. Counted under MemTag::kWorkspace while held.
struct Workspace {
  Tensor buffers[3];

  float* get(int slot, int64_t elements) {
    Tensor& t = buffers[slot];
    if (!t.defined() || t.numel() < elements) {
      t = Tensor();  // free before allocating the larger one
      MemTagScope tag(MemTag::kWorkspace);
      t = Tensor::empty({elements}, DType::kF32);
    }
    return t.data_as<float>();
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
  // Stored (cols, rows): convert stored rows in tiles, then scatter transposed.
  constexpr int64_t kTile = 64;
  const int64_t tiles = (cols + kTile - 1) / kTile;
  parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> buf(static_cast<size_t>(kTile * kTile));
    for (int64_t c0 = t0 * kTile; c0 < std::min(cols, t1 * kTile); c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        const int64_t r1 = std::min(rows, r0 + kTile);
        for (int64_t c = c0; c < c1; ++c) {
          to_f32(src.dtype(), p + (c * rows + r0) * es, buf.data() + (c - c0) * kTile, r1 - r0);
        }
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c = c0; c < c1; ++c) dst[r * cols + c] = buf[(c - c0) * kTile + (r - r0)];
        }
      }
    }
  });
}

void check_dnnl(dnnl_status_t status, int64_t m, int64_t n, int64_t k) {
  OCTET_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status),
              " for M=", m, " N=", n, " K=", k);
}

// oneDNN's sgemm slows down with transposed operands and a long K (measured 176 vs 226 GFLOP/s
// at M=1024, N=768, K=3072 with a transposed B on 2 Zen 4 cores); a non-transposed copy is
// cheaper than the difference.
constexpr int64_t kUntransposeFromK = 2048;

struct Operand {
  const float* data;
  bool transposed;
};

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

}  // namespace

void gemm(const Tensor& a, ops::Transpose ta, const Tensor& b, ops::Transpose tb, Tensor& out,
          float alpha, ops::Accumulate accumulate, const Tensor* bias) {
  const bool a_trans = ta == ops::Transpose::kYes, b_trans = tb == ops::Transpose::kYes;
  const int64_t m = a_trans ? a.cols() : a.rows();
  const int64_t k = a_trans ? a.rows() : a.cols();
  const int64_t n = b_trans ? b.rows() : b.cols();

  const bool long_k = k >= kUntransposeFromK;
  const Operand pa = prepare(a, a_trans, m, k, long_k, 0);
  const Operand pb = prepare(b, b_trans, k, n, long_k, 1);
  const char transa = pa.transposed ? 'T' : 'N', transb = pb.transposed ? 'T' : 'N';
  const int64_t lda = transa == 'T' ? m : k;
  const int64_t ldb = transb == 'T' ? k : n;

  // The result lands in f32 (out itself, or a workspace for bf16 out), pre-loaded with
  // out's old contents and/or the bias so that sgemm's beta = 1 adds the product.
  const bool f32_out = out.dtype() == DType::kF32;
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
    check_dnnl(dnnl_sgemm(transa, transb, m, n, k, alpha, pa.data, lda, pb.data, ldb, beta, c, n),
               m, n, k);
  }
  if (!f32_out) {
    auto* po = static_cast<uint8_t*>(out.data());
    parallel_for(0, m * n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      from_f32(c + lo, out.dtype(), po + lo * out.element_size(), hi - lo);
    });
  }
}

void release_workspace() { t_workspace = Workspace(); }

}  // namespace octet::cpu
