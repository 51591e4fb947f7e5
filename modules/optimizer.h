// Optimizers over a module's parameters: SGD with momentum and AdamW, with f32 master weights for
// bf16 and FP8 primary weights, global gradient-norm clipping, and warm-up + cosine learning rate.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/optim.h"
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

// Elements [begin, end) of a flattened parameter.
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const ElementRange&, const ElementRange&) = default;
};

class Optimizer {
 public:
  // State (moments, masters) is allocated under MemTag::kOptimizer. FP8 primary weights take
  // their initial f32 value (Parameter::initial_master) as the master copy, or dequantize.
  Optimizer(std::vector<Parameter> params, OptimizerOptions options);
  // ZeRO-1: state only for `shards[i]` of parameter i (an empty range: none of it). step()
  // updates those elements alone: f32 parameters in place, bf16 parameters get their rounded
  // part; FP8 primary weights are left to the caller (train::DataParallel), which casts each
  // rank's part and gathers the others'. The element-wise rules make every element's update
  // the same bits as an unsharded optimizer's. state_dict() is then refused (shard_state()
  // holds this rank's parts); load_state_dict takes full tensors, as checkpoints hold them, and
  // keeps this rank's part.
  Optimizer(std::vector<Parameter> params, OptimizerOptions options,
            std::vector<ElementRange> shards);

  // One update with learning rate `lr` from each parameter's accumulated gradient (parameters
  // without a gradient are skipped). bf16 parameters get the rounded master; FP8 primary weights
  // are requantized in place (ops::quantize_into, recording their amax into the weight slot).
  void step(float lr);
  // The same update decided on the device, for a training loop that does not wait for its loss
  // (train::Trainer): `gate` ((1,) f32 on the parameters' device, as ops::finite_gate makes it)
  // shut leaves every weight, moment and the step count as they were, and nothing waits for
  // it. The count then lives on the device: steps() and the state dict copy it back. FP8 primary
  // weights are requantized from their masters, changed or not (sharded: by the caller, as
  // for step(lr)). `device_lr` ((1,) f32 beside the gate, or null): the kernels read the rate
  // there instead of `lr` (a step captured into a CUDA graph and replayed).
  void step(float lr, const Tensor& gate, const Tensor* device_lr = nullptr);
  // Drops every parameter's gradient.
  void zero_grad();
  // Moves the optimizer state (masters, moments) to `device`, after Module::to moved the model.
  void to(Device device);
  int64_t steps() const;  // a copy back after step(lr, gate) on a GPU
  // A step(lr, gate) replayed from a CUDA graph moved the device's count: steps() reads it.
  void device_step_replayed() { device_steps_ahead_ = true; }

  // "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum", "<param>.master" and
  // "step", for checkpoints; load checks names, shapes and dtypes.
  std::vector<std::pair<std::string, Tensor>> state_dict();
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state);

  const std::vector<Parameter>& parameters() const { return params_; }

  bool sharded() const { return !shards_.empty(); }
  // Parameter i's range (the whole parameter when unsharded).
  ElementRange shard(size_t i) const;
  // Sharded: every state tensor with its state-dict name and its parameter's index, 1-D, the
  // parameter's shard(i) elements (the "step" entry has index -1).
  struct ShardEntry {
    std::string name;
    Tensor tensor;
    int64_t param = -1;
  };
  std::vector<ShardEntry> shard_state();
  // Parameter i's f32 master over shard(i), 1-D (shares the parameter's storage when it is f32).
  const Tensor& master_part(size_t i) const { return state_[i].master; }

 private:
  // t (parameter i's shape) flattened and cut to shard(i); t itself when unsharded.
  Tensor part(const Tensor& t, size_t i) const;
  // The update of both step()s; device_step as ops::DeviceStep (none: the host's steps_).
  void update(float lr, const ops::DeviceStep& device_step);
  // steps_ and step_tensor_ from the device's count, when step(lr, gate) moved it.
  void read_device_steps() const;

  struct State {
    Tensor master;  // f32: the parameter itself for f32 parameters
    Tensor m, v;    // AdamW moments, or m = SGD momentum buffer
  };
  std::vector<Parameter> params_;
  std::vector<State> state_;
  std::vector<ElementRange> shards_;  // empty: every element of every parameter
  OptimizerOptions options_;
  // The step count: steps_ on the host, mirrored by step_tensor_ ((1,) i64) for the state dict.
  // After step(lr, gate) the device's count (device_steps_, on the gate's device) is ahead of
  // them until read_device_steps() copies it back.
  mutable int64_t steps_ = 0;
  mutable Tensor step_tensor_;
  Tensor device_steps_;
  mutable bool device_steps_ahead_ = false;
};

// Scales every gradient so that their global L2 norm is at most max_norm; returns the norm
// before clipping (non-finite when a gradient is). max_norm <= 0 only measures. The gradients
// must share one device.
double clip_grad_norm(const std::vector<Parameter>& params, double max_norm);

// The same, with the norm left where it was measured (ops::clip_grad_norm_): on CUDA the norm,
// the clip factor and the scaling stay on the device, and read() copies the norm back, so a
// training loop that reads it only when it logs makes the host wait only then.
class GradNorm {
 public:
  GradNorm() = default;
  explicit GradNorm(Tensor bits) : bits_(std::move(bits)) {}
  double read() const;                          // 0 when no parameter had a gradient
  const Tensor& bits() const { return bits_; }  // (1,) i64 holding the f64 norm

 private:
  Tensor bits_;
};
GradNorm clip_grad_norm_deferred(const std::vector<Parameter>& params, double max_norm);

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
