// Softmax over the last dimension and its backward on the CPU, one row per task.
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// dx = y * (dy - dot), dot = sum(dy * y): the Jacobian-vector product of softmax.
OCTET_VECTOR_CLONES
void softmax_grad_row(const float* dy, const float* y, float dot, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (dy[i] - dot);
}

}  // namespace

void CpuBackend::softmax(const Tensor& x, Tensor& y) const {
  const int64_t rows = x.rows(), cols = x.cols();
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
  parallel_for(0, rows, rowops::row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * cols;
      float* yr = py + r * cols;
      // Shifting by the row max keeps every exp in (0, 1]: no overflow for any input.
      const float sum = rowops::exp_store(xr, rowops::max(xr, cols), yr, cols);
      rowops::scale(yr, 1.f / sum, cols);
    }
  });
}

void CpuBackend::softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) const {
  const int64_t rows = y.rows(), cols = y.cols();
  const float* pdy = dy.data_as<float>();
  const float* py = y.data_as<float>();
  float* pdx = dx.data_as<float>();
  parallel_for(0, rows, rowops::row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r * cols;
      softmax_grad_row(pdy + o, py + o, rowops::dot(pdy + o, py + o, cols), pdx + o, cols);
    }
  });
}

}  // namespace octet::cpu
