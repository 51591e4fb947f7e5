// Cross-entropy over logit rows on the CPU: a numerically stable log-sum-exp per row (shifted by
// the row max) and the softmax-minus-one-hot gradient rebuilt from the saved lse.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/simd.h"
#include "kernels/math/exp.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// dx = g * exp(x - lse) = g * softmax(x).
OCTET_VECTOR_CLONES
void scaled_softmax_row(const float* x, float lse, float g, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = g * math::exp_f32(x[i] - lse);
}

// The sum of the counted rows' losses (f64, summed in row order); fills lse (N,).
double cross_entropy_sum(const Tensor& logits, const std::vector<int64_t>& targets,
                         int64_t ignore_index, float* lse) {
  const int64_t rows = logits.rows(), cols = logits.cols();
  const float* px = logits.data_as<float>();  // (N, V)
  std::vector<double> loss(static_cast<size_t>(rows), 0.0);
  parallel_for(0, rows, rowops::row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * cols;
      const float m = rowops::max(xr, cols);
      const float l = m + std::log(rowops::sum_exp(xr, m, cols));
      lse[r] = l;
      const int64_t t = targets[static_cast<size_t>(r)];
      if (t != ignore_index) loss[static_cast<size_t>(r)] = static_cast<double>(l) - xr[t];
    }
  });
  double total = 0;  // in row order: the same sum for any thread count
  for (const double v : loss) total += v;
  return total;
}

}  // namespace

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets_tensor,
                               int64_t ignore_index, Tensor& loss, Tensor& lse,
                               Tensor& counted) const {
  const std::vector<int64_t> targets = index_values(targets_tensor);
  int64_t count = 0;
  for (const int64_t v : targets) count += v != ignore_index ? 1 : 0;
  const double total = cross_entropy_sum(logits, targets, ignore_index, lse.data_as<float>());
  *loss.data_as<float>() = count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.f;
  *counted.data_as<int64_t>() = count;
}

void CpuBackend::cross_entropy_backward(const Tensor& dloss, const Tensor& counted,
                                        const Tensor& logits, const Tensor& targets_tensor,
                                        const Tensor& lse_tensor, int64_t ignore_index,
                                        Tensor& dlogits) const {
  const int64_t count = *counted.data_as<int64_t>();
  const double d = *dloss.data_as<float>();
  const float grad_per_row = count > 0 ? static_cast<float>(d / static_cast<double>(count)) : 0.f;
  const std::vector<int64_t> targets = index_values(targets_tensor);
  const float* lse = lse_tensor.data_as<float>();
  const int64_t rows = logits.rows(), cols = logits.cols();
  const float* px = logits.data_as<float>();  // (N, V)
  float* pd = dlogits.data_as<float>();       // (N, V)
  parallel_for(0, rows, rowops::row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* dr = pd + r * cols;
      const int64_t t = targets[static_cast<size_t>(r)];
      if (t == ignore_index || grad_per_row == 0.f) {
        std::fill(dr, dr + cols, 0.f);
        continue;
      }
      scaled_softmax_row(px + r * cols, lse[r], grad_per_row, dr, cols);
      dr[t] -= grad_per_row;
    }
  });
}

}  // namespace octet::cpu
