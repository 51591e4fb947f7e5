// Argument checks and dispatch for kernels/optim.h (the CPU kernels are in kernels/cpu/optim.cpp).
#include "kernels/optim.h"

#include <cstring>
#include <vector>

#include "kernels/device_policy.h"

namespace octet::ops {
namespace {

using detail::on_device;
using detail::op_device;

void check_same(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  OCTET_CHECK(a.shape() == b.shape(), op, ": ", an, " ", a, " and ", bn, " ", b,
              " differ in shape");
}

void check_f32(const char* op, const Tensor& t, const char* name) {
  OCTET_CHECK(t.defined() && t.dtype() == DType::kF32, op, ": ", name,
              " must be an f32 tensor, got ", t);
}

void check_scalar(const char* op, const Tensor* t, DType dtype, const char* name) {
  OCTET_CHECK(t != nullptr && t->defined() && t->dtype() == dtype && t->numel() == 1, op, ": ",
              name, " must be a one-element ", dtype_name(dtype), " tensor, got ",
              t != nullptr ? *t : Tensor());
}

// A device-decided step's gate and count: both or neither, on `device`.
void check_device_step(const char* op, const DeviceStep& d, Device device) {
  if (d.gate == nullptr && d.steps == nullptr) return;
  check_scalar(op, d.gate, DType::kF32, "the device step's gate");
  check_scalar(op, d.steps, DType::kI64, "the device step's count");
  OCTET_CHECK(d.gate->device() == device && d.steps->device() == device, op,
              ": the device step's gate (", d.gate->device(), ") and count (", d.steps->device(),
              ") must be on the tensors' device ", device);
  if (d.lr != nullptr) {
    check_scalar(op, d.lr, DType::kF32, "the device step's learning rate");
    OCTET_CHECK(d.lr->device() == device, op, ": the device step's learning rate is on ",
                d.lr->device(), ", expected the tensors' device ", device);
  }
}

// The step's device: the master's, shared by its gradient and moments.
Device check_adamw(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const AdamWHyper& h) {
  constexpr const char* op = "adamw_step";
  OCTET_CHECK(master.defined(), op, ": master is an undefined tensor");
  check_f32(op, master, "master");
  check_f32(op, m, "m");
  check_f32(op, v, "v");
  OCTET_CHECK(grad.dtype() == DType::kF32 || grad.dtype() == DType::kBF16, op,
              ": gradient must be f32 or bf16, got ", grad);
  const Device device = op_device(op, {{master, "master"}, {grad, "grad"}, {m, "m"}, {v, "v"}});
  check_same(op, master, "master", grad, "grad");
  check_same(op, master, "master", m, "m");
  check_same(op, master, "master", v, "v");
  OCTET_CHECK(h.device_step.gate != nullptr || h.step >= 1, op, ": step must be >= 1, got ",
              h.step);
  check_device_step(op, h.device_step, device);
  return device;
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
    OCTET_CHECK(check_adamw(*t.master, *t.grad, *t.m, *t.v, h) == device, "adamw_step: tensors on ",
                device, " and ", t.master->device(), " in one step");
    if (t.model != nullptr) {
      OCTET_CHECK(t.model->dtype() == DType::kF32 || t.model->dtype() == DType::kBF16,
                  "adamw_step: the model weight must be f32 or bf16, got ", *t.model);
      OCTET_CHECK(t.model->device() == device, "adamw_step: the model weight is on ",
                  t.model->device(), ", the master on ", device);
      check_same("adamw_step", *t.master, "master", *t.model, "model");
      OCTET_CHECK(!t.model->shares_storage(*t.master),
                  "adamw_step: the model weight shares the master's storage");
    }
  }
  on_device(device)->adamw_step(tensors, h);
  for (const AdamWTensors& t : tensors) {
    t.master->bump_version();
    t.m->bump_version();
    t.v->bump_version();
    if (t.model != nullptr) t.model->bump_version();
  }
}

void sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,
              float weight_decay, int64_t step, const DeviceStep& device_step) {
  constexpr const char* op = "sgd_step";
  OCTET_CHECK(master.defined(), op, ": master is an undefined tensor");
  check_f32(op, master, "master");
  check_same(op, master, "master", grad, "grad");
  const bool use_buf = momentum != 0.f;
  if (use_buf) {
    check_f32(op, buf, "momentum buffer");
    check_same(op, master, "master", buf, "momentum buffer");
  }
  const Device device = op_device(
      op, {{master, "master"}, {grad, "grad"}, {use_buf ? &buf : nullptr, "momentum buffer"}});
  check_device_step(op, device_step, device);
  on_device(device)->sgd_step(master, grad, buf, lr, momentum, weight_decay, step, device_step);
  master.bump_version();
  if (use_buf) buf.bump_version();
}

void advance_steps(const Tensor& gate, Tensor& steps) {
  constexpr const char* op = "advance_steps";
  check_scalar(op, &gate, DType::kF32, "gate");
  check_scalar(op, &steps, DType::kI64, "steps");
  on_device(op_device(op, {{gate, "gate"}, {steps, "steps"}}))->advance_steps(gate, steps);
  steps.bump_version();
}

Tensor finite_gate(const Tensor& values, const Tensor* f64_bits) {
  constexpr const char* op = "finite_gate";
  check_f32(op, values, "values");
  if (f64_bits != nullptr) check_scalar(op, f64_bits, DType::kI64, "f64_bits");
  const Device device = op_device(op, {{values, "values"}, {f64_bits, "f64_bits"}});
  Tensor gate = Tensor::empty({1}, DType::kF32, device);
  on_device(device)->finite_gate(values, f64_bits, gate);
  return gate;
}

double sum_of_squares(const Tensor& x) {
  OCTET_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16,
              "sum_of_squares: f32 or bf16 expected, got ", x);
  return on_device(x.device())->sum_of_squares(x);
}

namespace {

void check_gradients(const char* op, const std::vector<const Tensor*>& xs, Device device) {
  for (const Tensor* g : xs) {
    OCTET_CHECK(
        g != nullptr && g->defined() && (g->dtype() == DType::kF32 || g->dtype() == DType::kBF16),
        op, ": gradients must be defined f32 or bf16 tensors");
    OCTET_CHECK(g->device() == device, op, ": gradients on ", device, " and ", g->device(),
                " in one call");
  }
}

std::vector<const Tensor*> as_const(const std::vector<Tensor*>& xs) {
  return {xs.begin(), xs.end()};
}

}  // namespace

Tensor sum_of_squares_part(const std::vector<const Tensor*>& xs, Device device) {
  check_gradients("sum_of_squares_part", xs, device);
  Tensor total = Tensor::empty({1}, DType::kI64, device);
  on_device(device)->sum_of_squares_part(xs, total);
  return total;
}

Tensor clip_grad_norm_from_parts_(const std::vector<Tensor*>& grads, const Tensor& parts,
                                  double max_norm) {
  constexpr const char* op = "clip_grad_norm_from_parts_";
  OCTET_CHECK(
      parts.defined() && parts.dtype() == DType::kI64 && parts.dim() == 1 && parts.numel() >= 1, op,
      ": parts must be a (k,) i64 tensor of f64 bits, k >= 1, got ", parts);
  check_gradients(op, as_const(grads), parts.device());
  Tensor norm = Tensor::empty({1}, DType::kI64, parts.device());
  on_device(parts.device())->clip_grad_norm_from_parts(grads, parts, max_norm, norm);
  for (Tensor* g : grads) g->bump_version();
  return norm;
}

Tensor clip_grad_norm_(const std::vector<Tensor*>& grads, double max_norm) {
  const Device device = grads.empty() ? Device::cpu() : grads.front()->device();
  return clip_grad_norm_from_parts_(grads, sum_of_squares_part(as_const(grads), device), max_norm);
}

double read_f64(const Tensor& bits) {
  OCTET_CHECK(bits.defined() && bits.dtype() == DType::kI64 && bits.numel() == 1,
              "read_f64: a (1,) i64 tensor holding an f64 expected, got ", bits);
  const Tensor host = bits.device().is_cpu() ? bits : bits.to(Device::cpu());
  double v = 0;
  std::memcpy(&v, host.data(), sizeof(v));
  return v;
}

}  // namespace octet::ops
