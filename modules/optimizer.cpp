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
    : params_(std::move(params)), options_(options) {
  MemTagScope tag(MemTag::kOptimizer);
  for (Parameter& p : params_) {
    State s;
    if (p.is_fp8()) {
      if (p.initial_master != nullptr && p.initial_master->defined()) {
        // Shared, not copied: the optimizer owns the updates, and the module can still requantize
        // an MXFP8 weight from it when a usage is missing.
        s.master = *p.initial_master;
        s.master.storage()->set_tag(MemTag::kOptimizer);
      } else {
        // A model built without gradients kept no f32 copy: the master starts from the FP8
        // values, and the module shares it (MXFP8 makes missing column-wise data from it).
        s.master = ops::dequantize(**p.fp8, DType::kF32);
        if (p.initial_master != nullptr) *p.initial_master = s.master;
      }
    } else if (p.tensor->dtype() == DType::kF32) {
      s.master = *p.tensor;
    } else {
      s.master = ops::cast(*p.tensor, DType::kF32);
    }
    const bool adamw = options_.kind == OptimizerKind::kAdamW;
    if (adamw || options_.momentum != 0.f) s.m = f32_zeros_like(s.master);
    if (adamw) s.v = f32_zeros_like(s.master);
    state_.push_back(std::move(s));
  }
  step_tensor_ = Tensor::zeros({1}, DType::kI64);
}

void Optimizer::step(float lr) {
  ++steps_;
  step_tensor_.data_as<int64_t>()[0] = steps_;
  if (options_.kind == OptimizerKind::kAdamW) {
    // One multi-tensor update per device (one launch on CUDA).
    ops::AdamWHyper h;
    h.lr = lr;
    h.beta1 = options_.beta1;
    h.beta2 = options_.beta2;
    h.eps = options_.eps;
    h.weight_decay = options_.weight_decay;
    h.step = steps_;
    std::vector<ops::AdamWTensors> cpu, cuda;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& g = autograd::grad(*params_[i].tensor);
      if (!g.defined()) continue;
      State& s = state_[i];
      (s.master.device().is_cpu() ? cpu : cuda).push_back({&s.master, &g, &s.m, &s.v});
    }
    ops::adamw_step(cpu, h);
    ops::adamw_step(cuda, h);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    State& s = state_[i];
    const Tensor& g = autograd::grad(*p.tensor);
    if (!g.defined()) continue;
    if (options_.kind != OptimizerKind::kAdamW) {
      ops::sgd_step(s.master, g, s.m, lr, options_.momentum, options_.weight_decay, steps_);
    }
    if (p.is_fp8()) {
      ops::quantize_into(**p.fp8, s.master, AmaxRecording::kRecord);
    } else if (!p.tensor->shares_storage(s.master)) {
      ops::copy_(*p.tensor, s.master);
    }
  }
}

void Optimizer::zero_grad() {
  for (Parameter& p : params_) autograd::zero_grad(*p.tensor);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_dict() {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("step", step_tensor_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& n = params_[i].name;
    const State& s = state_[i];
    if (!s.master.shares_storage(*params_[i].tensor)) out.emplace_back(n + ".master", s.master);
    if (options_.kind == OptimizerKind::kAdamW) {
      out.emplace_back(n + ".exp_avg", s.m);
      out.emplace_back(n + ".exp_avg_sq", s.v);
    } else if (s.m.defined()) {
      out.emplace_back(n + ".momentum", s.m);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<std::pair<std::string, Tensor>> live = state_dict();
  OCTET_CHECK(state.size() == live.size(), "optimizer state has ", state.size(),
              " entries, expected ", live.size(), " (different model or optimizer?)");
  for (auto& [name, dst] : live) {
    const Tensor* src = nullptr;
    for (const auto& [n, t] : state) {
      if (n == name) src = &t;
    }
    OCTET_CHECK(src != nullptr, "optimizer state: missing key \"", name, "\"");
    OCTET_CHECK(src->shape() == dst.shape() && src->dtype() == dst.dtype(), "optimizer state: \"",
                name, "\" is ", *src, " but expected ", dst);
    dst.copy_bytes_from(*src);
  }
  steps_ = step_tensor_.data_as<int64_t>()[0];
}

void Optimizer::to(Device device) {
  require_device(device);
  for (State& s : state_) {
    for (Tensor* t : {&s.master, &s.m, &s.v}) {
      if (t->defined()) t->move_storage_to(device);
    }
  }
}

double clip_grad_norm(const std::vector<Parameter>& params, double max_norm) {
  double total = 0;
  for (const Parameter& p : params) {
    const Tensor& g = autograd::grad(*p.tensor);
    if (g.defined()) total += ops::sum_of_squares(g);
  }
  const double norm = std::sqrt(total);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const auto factor = static_cast<float>(max_norm / (norm + 1e-6));
    for (const Parameter& p : params) {
      Tensor g = autograd::grad(*p.tensor);
      if (g.defined()) ops::scale_(g, factor);
    }
  }
  return norm;
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
