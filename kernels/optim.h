// Optimizer update kernels: AdamW (decoupled weight decay, bias-corrected moments) and SGD with
// momentum, updating f32 master weights and f32 moments in place. Included by kernels/ops.h.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace octet::ops {

// A step decided on the device: a training loop that does not wait for its loss and gradient
// norm (train::Trainer) lets the kernels skip a non-finite step. `gate` (1,) f32: 0 leaves every
// weight, moment and momentum buffer as it was; `steps` (1,) i64: the updates taken so far,
// advanced by advance_steps before the update, and the step count the update reads (the host's
// `step` is then unused). Both on the tensors' device; both null: the step runs as the host says.
// `lr` (1,) f32 on the tensors' device, with a gate: the learning rate the update reads instead
// of the host's (a step captured once and replayed, whose rate changes from step to step).
struct DeviceStep {
  const Tensor* gate = nullptr;
  const Tensor* steps = nullptr;
  const Tensor* lr = nullptr;
};

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.f;
  int64_t step = 1;  // 1-based count of updates, for bias correction
  DeviceStep device_step;
};

// PyTorch's AdamW rule, in f32:
//   w *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   w -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// `master`, `m`, `v` f32 of one shape; `grad` f32 or bf16 of that shape. Bumps versions.
void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h);

// The same rule for many tensors at once (an optimizer's step): on CUDA one launch updates them
// all (a multi-tensor kernel); on the CPU each is a pass of adamw_step. `model`, when given,
// receives the updated master in its own dtype (f32 or bf16, rounded to nearest even) in the same
// pass: what copy_(model, master) after the step would write, without reading the master again.
// A shut device gate leaves it as it is, as it leaves the master.
struct AdamWTensors {
  Tensor* master;           // f32
  const Tensor* grad;       // f32 or bf16, master's shape
  Tensor* m;                // f32
  Tensor* v;                // f32
  Tensor* model = nullptr;  // f32 or bf16, master's shape; optional
};
void adamw_step(const std::vector<AdamWTensors>& tensors, const AdamWHyper& h);

// SGD with momentum (PyTorch's form): buf = momentum buf + g (buf = g at the first step);
// w -= lr * buf. momentum 0 skips the buffer (it may be undefined then).
void sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,
              float weight_decay, int64_t step, const DeviceStep& device_step = {});

// steps[0] += 1 where gate[0] != 0 (DeviceStep's count; (1,) i64 and (1,) f32, one device).
void advance_steps(const Tensor& gate, Tensor& steps);
// A (1,) f32 on values' device: 1 when every element of `values` (f32) and the f64 that
// `f64_bits` holds ((1,) i64 as clip_grad_norm_ returns it; may be null) are finite, else 0.
// The gate of a step whose loss and gradient norm stay on the device.
Tensor finite_gate(const Tensor& values, const Tensor* f64_bits);

// Sum of squares of every element (f64 accumulation), for global gradient-norm clipping.
double sum_of_squares(const Tensor& x);

// Global gradient-norm clipping of `grads` (f32/bf16, all on one device) in place:
// total = the tensors' sum_of_squares added in order, norm = sqrt(total); when max_norm > 0 and
// the norm is finite and above max_norm, every gradient is scaled by
// f32(max_norm / (norm + 1e-6)). Returns the norm as a (1,) i64 tensor holding the f64's bits,
// on the gradients' device (read_f64 reads it): on CUDA the norm, the factor and the scaling
// stay on the device, so nothing waits until the norm is read.
Tensor clip_grad_norm_(const std::vector<Tensor*>& grads, double max_norm);

// The two halves of clip_grad_norm_, for a norm summed from parts that different processes
// hold (train::DataParallel). sum_of_squares_part: the tensors' sum_of_squares (f32/bf16, on
// `device`; none gives 0) added in order from 0, as a (1,) i64 tensor holding the f64's bits on
// `device`, with no copy back.
Tensor sum_of_squares_part(const std::vector<const Tensor*>& xs, Device device);
// clip_grad_norm_ with its total given: total = the f64s that `parts` ((k,) i64, k >= 1, on the
// gradients' device) holds, added in order from 0. clip_grad_norm_(grads, m) is
// clip_grad_norm_from_parts_(grads, sum_of_squares_part(grads), m), bit for bit.
Tensor clip_grad_norm_from_parts_(const std::vector<Tensor*>& grads, const Tensor& parts,
                                  double max_norm);
// The f64 a (1,) i64 tensor holds as bits (a copy back for a device tensor).
double read_f64(const Tensor& bits);

}  // namespace octet::ops
