// Pointwise and gated activations, forward and backward, on the CPU. The math is
// kernels/math/activation.h; each activation gets its own vectorised loop.
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/simd.h"
#include "kernels/math/activation_kind.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

using math::act;
using math::act_grad;
using ops::Activation;

// An exp per element makes these compute-bound: smaller chunks than plain elementwise ops.
constexpr int64_t kGrain = 4096;

template <Activation kAct>
OCTET_VECTOR_CLONES void forward_block(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = act<kAct>(x[i]);
}

template <Activation kAct>
OCTET_VECTOR_CLONES void backward_block(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * act_grad<kAct>(x[i]);
}

// One row of n outputs: y = act(a) * g.
template <Activation kAct>
OCTET_VECTOR_CLONES void gated_forward_row(const float* a, const float* g, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = act<kAct>(a[j]) * g[j];
}

// One row: da = dy * g * act'(a), dg = dy * act(a).
template <Activation kAct>
OCTET_VECTOR_CLONES void gated_backward_row(const float* dy, const float* a, const float* g,
                                            float* da, float* dg, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    da[j] = dy[j] * g[j] * act_grad<kAct>(a[j]);
    dg[j] = dy[j] * act<kAct>(a[j]);
  }
}

}  // namespace

void CpuBackend::activation(Activation a, const Tensor& x, Tensor& y) const {
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
  math::dispatch_activation(a, [&]<Activation kAct>() {
    parallel_for(0, x.numel(), kGrain,
                 [&](int64_t lo, int64_t hi) { forward_block<kAct>(px + lo, py + lo, hi - lo); });
  });
}

void CpuBackend::activation_backward(Activation a, const Tensor& dy, const Tensor& x,
                                     Tensor& dx) const {
  const float* pdy = dy.data_as<float>();
  const float* px = x.data_as<float>();
  float* pdx = dx.data_as<float>();
  math::dispatch_activation(a, [&]<Activation kAct>() {
    parallel_for(0, x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      backward_block<kAct>(pdy + lo, px + lo, pdx + lo, hi - lo);
    });
  });
}

void CpuBackend::gated_activation(Activation a, const Tensor& x, Tensor& y) const {
  const int64_t rows = x.rows(), n = x.cols() / 2;
  const float* px = x.data_as<float>();  // (rows, 2n): [a | g]
  float* py = y.data_as<float>();        // (rows, n)
  math::dispatch_activation(a, [&]<Activation kAct>() {
    parallel_for(0, rows, rowops::row_grain(n, kGrain), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = px + r * 2 * n;
        gated_forward_row<kAct>(row, row + n, py + r * n, n);
      }
    });
  });
}

void CpuBackend::gated_activation_backward(Activation a, const Tensor& dy, const Tensor& x,
                                           Tensor& dx) const {
  const int64_t rows = x.rows(), n = x.cols() / 2;
  const float* pdy = dy.data_as<float>();  // (rows, n)
  const float* px = x.data_as<float>();    // (rows, 2n)
  float* pdx = dx.data_as<float>();        // (rows, 2n)
  math::dispatch_activation(a, [&]<Activation kAct>() {
    parallel_for(0, rows, rowops::row_grain(n, kGrain), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = px + r * 2 * n;
        float* drow = pdx + r * 2 * n;
        gated_backward_row<kAct>(pdy + r * n, row, row + n, drow, drow + n, n);
      }
    });
  });
}

}  // namespace octet::cpu
