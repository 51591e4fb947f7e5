// LayerNorm and RMSNorm, forward and backward, on the CPU: one row per task, statistics in f32
// with a shifted, corrected two-pass variance (accurate when the mean dwarfs the spread), and
// gamma/beta gradients reduced per fixed block of rows so they do not depend on the thread count.
// Row reductions use `omp simd` (plain lane arrays with two accumulators made GCC vectorise the
// outer loop through transposes, 4x slower).
#include "kernels/math/norm.h"

#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// Rows whose gamma/beta gradient contributions are summed into one partial.
constexpr int64_t kRowsPerBlock = 32;

OCTET_VECTOR_CLONES
float row_sum(const float* x, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

// sum d and sum d^2 of the deviations d = x - shift.
OCTET_VECTOR_CLONES
void deviation_sums(const float* x, float shift, int64_t n, float& sum, float& sum_sq) {
  float s1 = 0.f, s2 = 0.f;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - shift;
    s1 += d;
    s2 += d * d;
  }
  sum = s1;
  sum_sq = s2;
}

OCTET_VECTOR_CLONES
float sum_squares(const float* x, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

// y = ((x - shift) - dmean) * rsigma * scale + beta, where shift + dmean is the mean.
OCTET_VECTOR_CLONES
void normalize_row(const float* x, float shift, float dmean, float rsigma, const float* scale,
                   const float* beta, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ((x[i] - shift) - dmean) * rsigma * scale[i] + beta[i];
}

// sum g and sum g * xhat with g = dy * scale, xhat = (x - mean) * rsigma.
OCTET_VECTOR_CLONES
void grad_sums(const float* dy, const float* x, const float* scale, float mean, float rsigma,
               int64_t n, float& sum_g, float& sum_gx) {
  float s1 = 0.f, s2 = 0.f;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i] * scale[i];
    s1 += g;
    s2 += g * ((x[i] - mean) * rsigma);
  }
  sum_g = s1;
  sum_gx = s2;
}

// dx for one row, and the row's dy * xhat added into the block's dgamma partial.
OCTET_VECTOR_CLONES
void grad_row(const float* dy, const float* x, const float* scale, float mean, float rsigma,
              float mean_g, float mean_gx, float* dx, float* dgamma, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float xhat = (x[i] - mean) * rsigma;
    dx[i] = math::norm_input_grad(dy[i] * scale[i], xhat, mean_g, mean_gx, rsigma);
    dgamma[i] += dy[i] * xhat;
  }
}

OCTET_VECTOR_CLONES
void add_row(float* acc, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

// The effective scale: gamma, or 1 + gamma when gamma is stored zero-centred (weight decay then
// pulls the scale towards 1 rather than 0).
std::vector<float> scales_of(const float* gamma, int64_t n, ops::ZeroCenteredGamma zc) {
  const float offset = zc == ops::ZeroCenteredGamma::kYes ? 1.f : 0.f;
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] = gamma[i] + offset;
  return s;
}

// out[c] = sum over blocks of partials (blocks, n)[b][c], in block order, in f64.
void sum_partials(const std::vector<float>& partials, int64_t blocks, int64_t n, float* out) {
  parallel_for(0, n, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t b = 0; b < blocks; ++b) s += partials[static_cast<size_t>(b * n + c)];
      out[c] = static_cast<float>(s);
    }
  });
}

}  // namespace

NormRow::NormRow(ops::NormKind type, const float* gamma, const float* beta, float eps,
                 ops::ZeroCenteredGamma zc, int64_t cols)
    : type_(type), eps_(eps), cols_(cols), scale_(scales_of(gamma, cols, zc)) {
  if (beta != nullptr) {
    bias_.assign(beta, beta + cols);
  } else {
    bias_.assign(static_cast<size_t>(cols), 0.f);
  }
}

void NormRow::operator()(const float* xr, float* y, float* mean, float* rsigma) const {
  const float n = static_cast<float>(cols_);
  if (type_ == ops::NormKind::kRMSNorm) {
    const float rs = math::rsqrt_eps(sum_squares(xr, cols_) / n, eps_);
    normalize_row(xr, 0.f, 0.f, rs, scale_.data(), bias_.data(), y, cols_);
    *rsigma = rs;
    return;
  }
  // A first mean estimate m0 (off by the f32 sum's rounding) is the shift: x - m0 is exact for
  // values near a large mean, and the deviations' own sum corrects m0.
  const float m0 = row_sum(xr, cols_) / n;
  float sum = 0.f, sum_sq = 0.f;
  deviation_sums(xr, m0, cols_, sum, sum_sq);
  const float rs = math::rsqrt_eps(math::corrected_variance(sum_sq, sum, n), eps_);
  normalize_row(xr, m0, sum / n, rs, scale_.data(), bias_.data(), y, cols_);
  if (mean != nullptr) *mean = m0 + sum / n;
  *rsigma = rs;
}

void CpuBackend::norm_forward(ops::NormKind kind, const Tensor& x, const Tensor& gamma,
                              const Tensor* beta, float eps, ops::ZeroCenteredGamma zc, Tensor& y,
                              Tensor* mean_tensor, Tensor& rsigma_tensor) const {
  const int64_t rows = x.rows(), cols = x.cols();
  const float* px = x.data_as<float>();  // (rows, C)
  float* py = y.data_as<float>();        // (rows, C)
  float* mean = mean_tensor != nullptr ? mean_tensor->data_as<float>() : nullptr;
  float* rsigma = rsigma_tensor.data_as<float>();
  const NormRow norm(kind, gamma.data_as<float>(),
                     beta != nullptr ? beta->data_as<float>() : nullptr, eps, zc, cols);
  parallel_for(0, rows, rowops::row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      norm(px + r * cols, py + r * cols, mean != nullptr ? mean + r : nullptr, rsigma + r);
    }
  });
}

void CpuBackend::norm_backward(const Tensor& dy, const Tensor& x, const Tensor* mean_tensor,
                               const Tensor& rsigma_tensor, const Tensor& gamma_tensor,
                               ops::ZeroCenteredGamma zc, Tensor& dx, Tensor& dgamma_tensor,
                               Tensor* dbeta_tensor) const {
  const float* mean = mean_tensor != nullptr ? mean_tensor->data_as<float>() : nullptr;
  const float* rsigma = rsigma_tensor.data_as<float>();
  const float* gamma = gamma_tensor.data_as<float>();
  float* dgamma = dgamma_tensor.data_as<float>();
  float* dbeta = dbeta_tensor != nullptr ? dbeta_tensor->data_as<float>() : nullptr;
  const int64_t rows = x.rows(), cols = x.cols();
  const float* pdy = dy.data_as<float>();  // (rows, C)
  const float* px = x.data_as<float>();    // (rows, C)
  float* pdx = dx.data_as<float>();        // (rows, C)
  const std::vector<float> scale = scales_of(gamma, cols, zc);
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  // (blocks, C) partial sums of dy * xhat and of dy.
  std::vector<float> part_gamma(static_cast<size_t>(blocks * cols), 0.f);
  std::vector<float> part_beta(dbeta != nullptr ? part_gamma.size() : 0, 0.f);
  const float n = static_cast<float>(cols);
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* pg = part_gamma.data() + b * cols;
      for (int64_t r = b * kRowsPerBlock; r < std::min(rows, (b + 1) * kRowsPerBlock); ++r) {
        const int64_t o = r * cols;
        const float mu = mean != nullptr ? mean[r] : 0.f;
        float sum_g = 0.f, sum_gx = 0.f;
        grad_sums(pdy + o, px + o, scale.data(), mu, rsigma[r], cols, sum_g, sum_gx);
        // RMSNorm subtracts no mean in forward, so no mean-gradient term comes back.
        const float mean_g = mean != nullptr ? sum_g / n : 0.f;
        grad_row(pdy + o, px + o, scale.data(), mu, rsigma[r], mean_g, sum_gx / n, pdx + o, pg,
                 cols);
        if (dbeta != nullptr) add_row(part_beta.data() + b * cols, pdy + o, cols);
      }
    }
  });
  sum_partials(part_gamma, blocks, cols, dgamma);
  if (dbeta != nullptr) sum_partials(part_beta, blocks, cols, dbeta);
}

}  // namespace octet::cpu
