// Optimizer kernels on the CPU: one pass per tensor, vectorised, split across threads. The ops'
// checks and dispatch are in kernels/optim.cpp.
#include "kernels/math/optim.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

constexpr int64_t kBlock = 1024;

OCTET_VECTOR_CLONES
void adamw_block(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1,
                 float b2, float eps, float decay, float c1, float c2) {
  for (int64_t i = 0; i < n; ++i) {
    const float wi = w[i] * decay;
    const float mi = b1 * m[i] + (1.f - b1) * g[i];
    const float vi = b2 * v[i] + (1.f - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - lr * (mi / c1) / (std::sqrt(vi / c2) + eps);
  }
}

OCTET_VECTOR_CLONES
void sgd_block(float* w, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
               bool first) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * w[i];
    const float bi = buf == nullptr ? gi : (first ? gi : momentum * buf[i] + gi);
    if (buf != nullptr) buf[i] = bi;
    w[i] -= lr * bi;
  }
}

// Runs body(f32 pointer, offset, count) over blocks of x's elements [lo, hi), converting the
// blocks of a tensor that is not f32.
template <typename Body>
void for_f32_blocks(const Tensor& x, int64_t lo, int64_t hi, Body body) {
  const bool f32 = x.dtype() == DType::kF32;
  const auto* px = static_cast<const uint8_t*>(x.data());
  float buf[kBlock];
  for (int64_t i = lo; i < hi; i += kBlock) {
    const int64_t n = std::min(kBlock, hi - i);
    const float* p = reinterpret_cast<const float*>(px) + i;
    if (!f32) {
      to_f32(x.dtype(), px + i * x.element_size(), buf, n);
      p = buf;
    }
    body(p, i, n);
  }
}

// for_f32_blocks over all of `grad`, in parallel.
template <typename Body>
void for_grad_blocks(const Tensor& grad, Body body) {
  parallel_for(0, grad.numel(), kElementwiseGrain,
               [&](int64_t lo, int64_t hi) { for_f32_blocks(grad, lo, hi, body); });
}

void adamw_one(const ops::AdamWTensors& t, const ops::AdamWHyper& h) {
  const float c1 = math::bias_correction(h.beta1, h.step);
  const float c2 = math::bias_correction(h.beta2, h.step);
  const float decay = 1.f - h.lr * h.weight_decay;
  float* pw = t.master->data_as<float>();
  float* pm = t.m->data_as<float>();
  float* pv = t.v->data_as<float>();
  auto* model = t.model != nullptr ? static_cast<uint8_t*>(t.model->data()) : nullptr;
  for_grad_blocks(*t.grad, [&](const float* g, int64_t i, int64_t n) {
    adamw_block(pw + i, g, pm + i, pv + i, n, h.lr, h.beta1, h.beta2, h.eps, decay, c1, c2);
    if (model != nullptr) {
      from_f32(pw + i, t.model->dtype(), model + i * t.model->element_size(), n);
    }
  });
}

// A step decided on the device, here on the CPU: its gate and count are host memory, read here.
// False: the gate is shut (no update); else *step is the count the update uses and *lr its rate.
bool open_step(const ops::DeviceStep& d, int64_t* step, float* lr) {
  if (d.gate == nullptr) return true;
  if (*d.gate->data_as<float>() == 0.f) return false;
  *step = *d.steps->data_as<int64_t>();
  if (d.lr != nullptr) *lr = *d.lr->data_as<float>();
  return true;
}

}  // namespace

void CpuBackend::adamw_step(const std::vector<ops::AdamWTensors>& tensors,
                            const ops::AdamWHyper& h) const {
  ops::AdamWHyper host = h;
  if (!open_step(h.device_step, &host.step, &host.lr)) return;
  for (const ops::AdamWTensors& t : tensors) adamw_one(t, host);
}

void CpuBackend::sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,
                          float weight_decay, int64_t step,
                          const ops::DeviceStep& device_step) const {
  if (!open_step(device_step, &step, &lr)) return;
  const bool use_buf = momentum != 0.f;
  float* pw = master.data_as<float>();
  float* pb = use_buf ? buf.data_as<float>() : nullptr;
  for_grad_blocks(grad, [&](const float* g, int64_t i, int64_t n) {
    sgd_block(pw + i, g, pb ? pb + i : nullptr, n, lr, momentum, weight_decay, step <= 1);
  });
}

// Fixed chunks summed in order: the same bits on any number of threads.
double CpuBackend::sum_of_squares(const Tensor& x) const {
  std::vector<double> partial(static_cast<size_t>(reduction_chunks(x.numel(), kElementwiseGrain)),
                              0.0);
  parallel_chunks(0, x.numel(), kElementwiseGrain, [&](int64_t chunk, int64_t lo, int64_t hi) {
    double acc = 0;
    for_f32_blocks(x, lo, hi, [&](const float* p, int64_t, int64_t n) {
      for (int64_t j = 0; j < n; ++j) acc += static_cast<double>(p[j]) * p[j];
    });
    partial[static_cast<size_t>(chunk)] = acc;
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

void CpuBackend::sum_of_squares_part(const std::vector<const Tensor*>& xs, Tensor& total) const {
  double sum = 0;
  for (const Tensor* x : xs) sum += sum_of_squares(*x);
  std::memcpy(total.data(), &sum, sizeof(sum));
}

void CpuBackend::clip_grad_norm_from_parts(const std::vector<Tensor*>& grads, const Tensor& parts,
                                           double max_norm, Tensor& norm) const {
  double total = 0;
  for (int64_t i = 0; i < parts.numel(); ++i) {
    double part = 0;
    std::memcpy(&part, parts.data_as<int64_t>() + i, sizeof(part));
    total += part;
  }
  const double n = std::sqrt(total);
  if (max_norm > 0 && std::isfinite(n) && n > max_norm) {
    const auto factor = static_cast<float>(max_norm / (n + 1e-6));
    for (Tensor* g : grads) scale(*g, factor, *g);
  }
  std::memcpy(norm.data(), &n, sizeof(n));
}

void CpuBackend::advance_steps(const Tensor& gate, Tensor& steps) const {
  if (*gate.data_as<float>() != 0.f) ++*steps.data_as<int64_t>();
}

void CpuBackend::finite_gate(const Tensor& values, const Tensor* f64_bits, Tensor& gate) const {
  bool finite = true;
  const float* v = values.data_as<float>();
  for (int64_t i = 0; i < values.numel(); ++i) finite = finite && std::isfinite(v[i]);
  if (f64_bits != nullptr) {
    double d = 0;
    std::memcpy(&d, f64_bits->data(), sizeof(d));
    finite = finite && std::isfinite(d);
  }
  *gate.data_as<float>() = finite ? 1.f : 0.f;
}

}  // namespace octet::cpu
