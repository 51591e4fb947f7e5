// Optimizers over a module's parameters: SGD with momentum and AdamW, with f32 master weights for
// bf16 and FP8 primary weights, global gradient-norm clipping, and warm-up + cosine learning rate.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "modules/module.h"

namespace octet::modules {

enum class OptimizerKind : uint8_t { kSGD, kAdamW };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.f;
  float momentum = 0.9f;  // SGD only
};

class Optimizer {
 public:
  // State (moments, masters) is allocated under MemTag::kOptimizer. FP8 primary weights take
  // their initial f32 value (Parameter::initial_master) as the master copy, or dequantize.
  Optimizer(std::vector<Parameter> params, OptimizerOptions options);

  // One update with learning rate `lr` from each parameter's accumulated gradient (parameters
  // without a gradient are skipped). bf16 parameters get the rounded master; FP8 primary weights
  // are requantized in place (ops::quantize_into, recording their amax into the weight slot).
  void step(float lr);
  // Drops every parameter's gradient.
  void zero_grad();
  // Moves the optimizer state (masters, moments) to `device`, after Module::to moved the model.
  void to(Device device);
  int64_t steps() const { return steps_; }

  // "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum", "<param>.master" and
  // "step", for checkpoints; load checks names, shapes and dtypes.
  std::vector<std::pair<std::string, Tensor>> state_dict();
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state);

  const std::vector<Parameter>& parameters() const { return params_; }

 private:
  struct State {
    Tensor master;  // f32: the parameter itself for f32 parameters
    Tensor m, v;    // AdamW moments, or m = SGD momentum buffer
  };
  std::vector<Parameter> params_;
  std::vector<State> state_;
  OptimizerOptions options_;
  int64_t steps_ = 0;
  Tensor step_tensor_;  // (1,) i64 mirror of steps_ for the state dict
};

// Scales every gradient so that their global L2 norm is at most max_norm; returns the norm
// before clipping (non-finite when a gradient is). max_norm <= 0 only measures.
double clip_grad_norm(const std::vector<Parameter>& params, double max_norm);

// Linear warm-up (step s gets base_lr * (s + 1) / warmup_steps), then cosine decay to
// base_lr * min_lr_ratio at total_steps (and flat after). step counts from 0.
struct LrSchedule {
  float base_lr = 1e-3f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  float min_lr_ratio = 0.1f;
  float at(int64_t step) const;
};

}  // namespace octet::modules
