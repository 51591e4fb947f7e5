// Optimizer state and steps, gradient clipping, the learning-rate schedule.
#include "modules/optimizer.h"

#include <cmath>
#include <cstring>

#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#include "kernels/quantized.h"
#include "runtime/memory.h"

namespace octet::modules {
namespace {

Tensor f32_zeros_like(const Tensor& t) {
  MemTagScope tag(MemTag::kOptimizer);
  return Tensor::zeros(t.shape(), DType::kF32, t.device());
}

}  // namespace

Optimizer::Optimizer(std::vector<Parameter> params, OptimizerOptions options)
    : Optimizer(std::move(params), options, {}) {}

Optimizer::Optimizer(std::vector<Parameter> params, OptimizerOptions options,
                     std::vector<ElementRange> shards)
    : params_(std::move(params)), shards_(std::move(shards)), options_(options) {
  OCTET_CHECK(shards_.empty() || shards_.size() == params_.size(), "Optimizer: ", shards_.size(),
              " shards for ", params_.size(), " parameters");
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ElementRange r = shards_[i];
    OCTET_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= params_[i].value_numel(),
                "Optimizer: shard [", r.begin, ", ", r.end, ") of parameter \"", params_[i].name,
                "\" is outside its ", params_[i].value_numel(), " elements");
  }
  MemTagScope tag(MemTag::kOptimizer);
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    State s;
    if (p.is_fp8()) {
      if (p.initial_master != nullptr && p.initial_master->defined()) {
        // Shared, not copied: the optimizer owns the updates, and the module can still requantize
        // an MXFP8 weight from it when a usage is missing. A shard is a copy of its part.
        s.master = sharded() ? part(*p.initial_master, i).clone() : *p.initial_master;
        s.master.storage()->set_tag(MemTag::kOptimizer);
      } else {
        // A model built without gradients kept no f32 copy: the master starts from the FP8
        // values, and the module shares it (MXFP8 makes missing column-wise data from it).
        const Tensor full = ops::dequantize(**p.fp8, DType::kF32);
        s.master = sharded() ? part(full, i).clone() : full;
        if (p.initial_master != nullptr && !sharded()) *p.initial_master = s.master;
      }
    } else if (p.tensor->dtype() == DType::kF32) {
      s.master = part(*p.tensor, i);
    } else {
      s.master = ops::cast(part(*p.tensor, i), DType::kF32);
    }
    const bool adamw = options_.kind == OptimizerKind::kAdamW;
    if (adamw || options_.momentum != 0.f) s.m = f32_zeros_like(s.master);
    if (adamw) s.v = f32_zeros_like(s.master);
    state_.push_back(std::move(s));
  }
  step_tensor_ = Tensor::zeros({1}, DType::kI64);
}

ElementRange Optimizer::shard(size_t i) const {
  return sharded() ? shards_[i] : ElementRange{0, params_[i].value_numel()};
}

Tensor Optimizer::part(const Tensor& t, size_t i) const {
  if (!sharded()) return t;
  return t.reshape({t.numel()}).slice(shards_[i].begin, shards_[i].end);
}

void Optimizer::step(float lr) {
  read_device_steps();
  device_steps_ = Tensor();  // the host counts again; a later step(lr, gate) uploads its count
  ++steps_;
  step_tensor_.data_as<int64_t>()[0] = steps_;
  update(lr, {});
}

void Optimizer::step(float lr, const Tensor& gate, const Tensor* device_lr) {
  if (!device_steps_.defined() || device_steps_.device() != gate.device()) {
    read_device_steps();
    device_steps_ = step_tensor_.to(gate.device());
  }
  ops::advance_steps(gate, device_steps_);
  device_steps_ahead_ = true;
  update(lr, ops::DeviceStep{&gate, &device_steps_, device_lr});
}

void Optimizer::read_device_steps() const {
  if (!device_steps_ahead_) return;
  step_tensor_.copy_bytes_from(device_steps_);
  steps_ = step_tensor_.data_as<int64_t>()[0];
  device_steps_ahead_ = false;
}

int64_t Optimizer::steps() const {
  read_device_steps();
  return steps_;
}

void Optimizer::update(float lr, const ops::DeviceStep& device_step) {
  // Each parameter's gradient over its shard (the whole gradient when unsharded).
  std::vector<Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = autograd::grad(*params_[i].tensor);
    if (g.defined() && shard(i).size() > 0) grads[i] = part(g, i);
  }
  // The model-dtype weights a high-precision parameter keeps beside its master: AdamW writes
  // them in its pass, SGD's step is followed by a copy.
  std::vector<Tensor> models(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (grads[i].defined() && !params_[i].is_fp8() &&
        !params_[i].tensor->shares_storage(state_[i].master)) {
      models[i] = part(*params_[i].tensor, i);
    }
  }
  if (options_.kind == OptimizerKind::kAdamW) {
    // One multi-tensor update per device (one launch on CUDA).
    ops::AdamWHyper h;
    h.lr = lr;
    h.beta1 = options_.beta1;
    h.beta2 = options_.beta2;
    h.eps = options_.eps;
    h.weight_decay = options_.weight_decay;
    h.step = steps_;
    h.device_step = device_step;
    std::vector<ops::AdamWTensors> cpu, cuda;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!grads[i].defined()) continue;
      State& s = state_[i];
      Tensor* model = models[i].defined() ? &models[i] : nullptr;
      (s.master.device().is_cpu() ? cpu : cuda)
          .push_back({&s.master, &grads[i], &s.m, &s.v, model});
    }
    ops::adamw_step(cpu, h);
    ops::adamw_step(cuda, h);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    State& s = state_[i];
    if (!grads[i].defined()) continue;
    if (options_.kind != OptimizerKind::kAdamW) {
      ops::sgd_step(s.master, grads[i], s.m, lr, options_.momentum, options_.weight_decay, steps_,
                    device_step);
      if (models[i].defined()) ops::copy_(models[i], s.master);
    }
    // A shard alone cannot requantize the whole weight: the caller does (see the constructor).
    if (p.is_fp8() && !sharded()) ops::quantize_into(**p.fp8, s.master, AmaxRecording::kRecord);
  }
}

void Optimizer::zero_grad() {
  for (Parameter& p : params_) autograd::zero_grad(*p.tensor);
}

std::vector<Optimizer::ShardEntry> Optimizer::shard_state() {
  read_device_steps();
  std::vector<ShardEntry> out;
  out.push_back({"step", step_tensor_, -1});
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& n = params_[i].name;
    const State& s = state_[i];
    const auto index = static_cast<int64_t>(i);
    if (!s.master.shares_storage(*params_[i].tensor))
      out.push_back({n + ".master", s.master, index});
    if (options_.kind == OptimizerKind::kAdamW) {
      out.push_back({n + ".exp_avg", s.m, index});
      out.push_back({n + ".exp_avg_sq", s.v, index});
    } else if (s.m.defined()) {
      out.push_back({n + ".momentum", s.m, index});
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_dict() {
  OCTET_CHECK(!sharded(),
              "Optimizer::state_dict: this optimizer holds one rank's shard of the state (ZeRO-1); "
              "gather it first (train::DataParallel::optimizer_state)");
  std::vector<std::pair<std::string, Tensor>> out;
  for (ShardEntry& e : shard_state()) out.emplace_back(std::move(e.name), std::move(e.tensor));
  return out;
}

void Optimizer::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<ShardEntry> live = shard_state();
  OCTET_CHECK(state.size() == live.size(), "optimizer state has ", state.size(),
              " entries, expected ", live.size(), " (different model or optimizer?)");
  for (ShardEntry& e : live) {
    const Tensor* src = nullptr;
    for (const auto& [n, t] : state) {
      if (n == e.name) src = &t;
    }
    OCTET_CHECK(src != nullptr, "optimizer state: missing key \"", e.name, "\"");
    // Full tensors, as an unsharded optimizer holds them; a shard keeps its part.
    const Shape want =
        e.param < 0 ? e.tensor.shape() : params_[static_cast<size_t>(e.param)].value_shape();
    OCTET_CHECK(src->shape() == want && src->dtype() == e.tensor.dtype(), "optimizer state: \"",
                e.name, "\" is ", *src, " but expected ", e.tensor.dtype(), shape_str(want));
    e.tensor.copy_bytes_from(e.param < 0 ? *src : part(*src, static_cast<size_t>(e.param)));
  }
  steps_ = step_tensor_.data_as<int64_t>()[0];
  device_steps_ = Tensor();  // the loaded count; a later step(lr, gate) uploads it
  device_steps_ahead_ = false;
}

void Optimizer::to(Device device) {
  require_device(device);
  for (State& s : state_) {
    for (Tensor* t : {&s.master, &s.m, &s.v}) {
      if (t->defined()) t->move_storage_to(device);
    }
  }
}

double GradNorm::read() const { return bits_.defined() ? ops::read_f64(bits_) : 0.0; }

GradNorm clip_grad_norm_deferred(const std::vector<Parameter>& params, double max_norm) {
  // Handles that share the gradients' storage: scaling them scales the gradients.
  std::vector<Tensor> grads;
  for (const Parameter& p : params) {
    const Tensor& g = autograd::grad(*p.tensor);
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return GradNorm();
  std::vector<Tensor*> list;
  for (Tensor& g : grads) list.push_back(&g);
  return GradNorm(ops::clip_grad_norm_(list, max_norm));
}

double clip_grad_norm(const std::vector<Parameter>& params, double max_norm) {
  return clip_grad_norm_deferred(params, max_norm).read();
}

float LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps) {
    return base_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  }
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  const double min_lr = base_lr * min_lr_ratio;
  return static_cast<float>(min_lr + (base_lr - min_lr) * 0.5 * (1 + std::cos(M_PI * progress)));
}

}  // namespace octet::modules
