// Optimizer kernels on the CPU (one pass per tensor, vectorised, split across threads), and the
// optimizer ops' checks and dispatch to kernels/cuda.
#include "kernels/optim.h"

#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::ops {
namespace {

constexpr int64_t kBlock = 1024;

void check_same(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  OCTET_CHECK(a.shape() == b.shape(), op, ": ", an, " ", a, " and ", bn, " ", b,
              " differ in shape");
}

// f32 and on `device` (the master's).
void check_f32(const char* op, const Tensor& t, const char* name, Device device) {
  OCTET_CHECK(t.defined() && t.dtype() == DType::kF32, op, ": ", name,
              " must be an f32 tensor, got ", t);
  OCTET_CHECK(t.device() == device, op, ": ", name, " is on ", t.device(), " but the master on ",
              device);
}

void check_adamw(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const AdamWHyper& h) {
  constexpr const char* op = "adamw_step";
  OCTET_CHECK(master.defined(), op, ": master is an undefined tensor");
  check_f32(op, master, "master", master.device());
  check_f32(op, m, "m", master.device());
  check_f32(op, v, "v", master.device());
  OCTET_CHECK(grad.dtype() == DType::kF32 || grad.dtype() == DType::kBF16, op,
              ": gradient must be f32 or bf16, got ", grad);
  OCTET_CHECK(grad.device() == master.device(), op, ": gradient on ", grad.device(),
              " but master on ", master.device());
  check_same(op, master, "master", grad, "grad");
  check_same(op, master, "master", m, "m");
  check_same(op, master, "master", v, "v");
  OCTET_CHECK(h.step >= 1, op, ": step must be >= 1, got ", h.step);
}

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

// Runs body(f32 grad pointer, offset, count) over blocks of `grad`, converting bf16 blocks.
template <typename Body>
void for_grad_blocks(const Tensor& grad, Body body) {
  const bool f32 = grad.dtype() == DType::kF32;
  const auto* pg = static_cast<const uint8_t*>(grad.data());
  parallel_for(0, grad.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    float buf[kBlock];
    for (int64_t i = lo; i < hi; i += kBlock) {
      const int64_t n = std::min(kBlock, hi - i);
      const float* g = reinterpret_cast<const float*>(pg) + i;
      if (!f32) {
        cpu::to_f32(grad.dtype(), pg + i * grad.element_size(), buf, n);
        g = buf;
      }
      body(g, i, n);
    }
  });
}

void adamw_cpu(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h) {
  const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), h.step));
  const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), h.step));
  const float decay = 1.f - h.lr * h.weight_decay;
  float* pw = master.data_as<float>();
  float* pm = m.data_as<float>();
  float* pv = v.data_as<float>();
  for_grad_blocks(grad, [&](const float* g, int64_t i, int64_t n) {
    adamw_block(pw + i, g, pm + i, pv + i, n, h.lr, h.beta1, h.beta2, h.eps, decay, c1, c2);
  });
}

}  // namespace

void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h) {
  adamw_step({AdamWTensors{&master, &grad, &m, &v}}, h);
}

void adamw_step(const std::vector<AdamWTensors>& tensors, const AdamWHyper& h) {
  if (tensors.empty()) return;
  const Device device = tensors.front().master->device();
  for (const AdamWTensors& t : tensors) {
    OCTET_CHECK(t.master && t.grad && t.m && t.v, "adamw_step: a null tensor in the list");
    check_adamw(*t.master, *t.grad, *t.m, *t.v, h);
    OCTET_CHECK(t.master->device() == device, "adamw_step: tensors on ", device, " and ",
                t.master->device(), " in one step");
  }
  const detail::Backend on(*tensors.front().master);
  if (on.cuda()) {
    OCTET_CUDA_CALL(cuda::adamw_step(tensors, h));
  } else {
    for (const AdamWTensors& t : tensors) adamw_cpu(*t.master, *t.grad, *t.m, *t.v, h);
  }
  for (const AdamWTensors& t : tensors) {
    t.master->bump_version();
    t.m->bump_version();
    t.v->bump_version();
  }
}

void sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,
              float weight_decay, int64_t step) {
  constexpr const char* op = "sgd_step";
  OCTET_CHECK(master.defined(), op, ": master is an undefined tensor");
  check_f32(op, master, "master", master.device());
  check_same(op, master, "master", grad, "grad");
  OCTET_CHECK(grad.device() == master.device(), op, ": gradient on ", grad.device(),
              " but master on ", master.device());
  const bool use_buf = momentum != 0.f;
  if (use_buf) {
    check_f32(op, buf, "momentum buffer", master.device());
    check_same(op, master, "master", buf, "momentum buffer");
  }
  const detail::Backend on(master);
  if (on.cuda()) {
    OCTET_CUDA_CALL(cuda::sgd_step(master, grad, buf, lr, momentum, weight_decay, step));
    master.bump_version();
    if (use_buf) buf.bump_version();
    return;
  }
  float* pw = master.data_as<float>();
  float* pb = use_buf ? buf.data_as<float>() : nullptr;
  for_grad_blocks(grad, [&](const float* g, int64_t i, int64_t n) {
    sgd_block(pw + i, g, pb ? pb + i : nullptr, n, lr, momentum, weight_decay, step <= 1);
  });
  master.bump_version();
  if (use_buf) buf.bump_version();
}

double sum_of_squares(const Tensor& x) {
  OCTET_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16,
              "sum_of_squares: f32 or bf16 expected, got ", x);
  const detail::Backend on(x);
  if (on.cuda()) {
    OCTET_CUDA_CALL(return cuda::sum_of_squares(x));
  }
  std::vector<double> partial(static_cast<size_t>(num_threads()), 0.0);
  const bool f32 = x.dtype() == DType::kF32;
  const auto* px = static_cast<const uint8_t*>(x.data());
  parallel_for(0, x.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    float buf[kBlock];
    double acc = 0;
    for (int64_t i = lo; i < hi; i += kBlock) {
      const int64_t n = std::min(kBlock, hi - i);
      const float* p = reinterpret_cast<const float*>(px) + i;
      if (!f32) {
        cpu::to_f32(x.dtype(), px + i * x.element_size(), buf, n);
        p = buf;
      }
      for (int64_t j = 0; j < n; ++j) acc += static_cast<double>(p[j]) * p[j];
    }
    partial[static_cast<size_t>(parallel_chunk())] = acc;
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace octet::ops
