// Module registration, traversal and the state dict.
#include "modules/module.h"

#include <cmath>
#include <cstring>

#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "modules/fp8_state.h"
#include "runtime/error.h"

namespace octet::modules {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// The tensors that make up an FP8 primary weight in a checkpoint: its format's checkpoint form,
// the row-wise data under the parameter's name and its scaling under the format's suffixes.
void add_fp8_entries(const std::string& name, const QuantizedTensor& q,
                     std::vector<std::pair<std::string, Tensor>>& out) {
  for (auto& [suffix, t] : q.rowwise_state()) out.emplace_back(name + suffix, std::move(t));
}

// `name`'s tensor in `state` (a scale its owner requires positive): every value finite and > 0.
void check_positive(const std::vector<std::pair<std::string, Tensor>>& state,
                    const std::string& name) {
  for (const auto& [n, t] : state) {
    if (n != name || t.dtype() != DType::kF32) continue;
    const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
    const float* v = host.data_as<float>();
    for (int64_t i = 0; i < host.numel(); ++i) {
      OCTET_CHECK(std::isfinite(v[i]) && v[i] > 0.f, "tensor \"", name, "\" holds ", v[i],
                  " at element ", i, ", expected a finite FP8 scale > 0");
    }
  }
}

}  // namespace

void Module::register_parameter(std::string name, Tensor* tensor) {
  OCTET_ASSERT(tensor != nullptr && tensor->defined(), "parameter ", name, " is undefined");
  params_.push_back({std::move(name), tensor, nullptr, nullptr});
}

void Module::register_fp8_parameter(std::string name, Tensor* tensor,
                                    std::shared_ptr<QuantizedTensor>* fp8, Tensor* initial_master,
                                    FP8State* state, int gemm) {
  OCTET_ASSERT(tensor != nullptr && tensor->defined(), "parameter ", name, " is undefined");
  OCTET_ASSERT(fp8 == nullptr || *fp8 != nullptr, "FP8 parameter ", name, " is undefined");
  OCTET_ASSERT((state == nullptr) == (gemm < 0), "parameter ", name,
               ": an FP8 GEMM weight names its state and GEMM index");
  Parameter p{std::move(name), tensor, fp8, initial_master};
  p.fp8_state = state;
  p.fp8_gemm = gemm;
  params_.push_back(std::move(p));
}

void Module::register_buffer(std::string name, Tensor* tensor) {
  buffers_.emplace_back(std::move(name), tensor);
}

void Module::visit(const std::string& prefix,
                   const std::function<void(const std::string&, Module&)>& f) {
  f(prefix, *this);
  for (auto& [name, child] : children_) child->visit(join(prefix, name), f);
}

std::vector<Parameter> Module::parameters() {
  std::vector<Parameter> out;
  visit("", [&](const std::string& prefix, Module& m) {
    for (const Parameter& p : m.params_) {
      Parameter q = p;
      q.name = join(prefix, p.name);
      out.push_back(q);
    }
  });
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::buffers() {
  return collect_buffers(HostBuffers::kKeep);
}

std::vector<std::pair<std::string, Tensor*>> Module::collect_buffers(HostBuffers host) {
  std::vector<std::pair<std::string, Tensor*>> out;
  visit("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, t] : m.buffers_) out.emplace_back(join(prefix, name), t);
    for (auto& [name, t] : m.dynamic_buffers()) out.emplace_back(join(prefix, name), t);
    if (host == HostBuffers::kSkip) return;
    for (auto& [name, t] : m.dynamic_host_buffers()) out.emplace_back(join(prefix, name), t);
  });
  return out;
}

std::vector<std::pair<std::string, FP8State*>> Module::fp8_states() {
  std::vector<std::pair<std::string, FP8State*>> out;
  visit("", [&](const std::string& prefix, Module& m) {
    if (FP8State* state = m.own_fp8_state()) out.emplace_back(prefix, state);
  });
  return out;
}

std::vector<std::pair<std::string, FP8Meta*>> Module::fp8_metas() {
  std::vector<std::pair<std::string, FP8Meta*>> out;
  for (auto& [name, state] : fp8_states()) {
    if (state->meta()) out.emplace_back(name, state->meta().get());
  }
  return out;
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  // An FP8 weight counts its logical elements (packed 4-bit data holds two a byte).
  for (const Parameter& p : parameters()) n += p.value_numel();
  return n;
}

void Module::set_mode(Mode mode) {
  visit("", [mode](const std::string&, Module& m) {
    m.mode_ = mode;
    m.on_mode_change(mode);
  });
}

void Module::to(Device device) {
  require_device(device);
  // Storages move in place, so every handle on them (quantizers holding a slot's scale and
  // history, FP8 weights' row-wise data behind a parameter, optimizer masters adopted from
  // initial_master) follows without rewiring. Accumulated gradients move too.
  for (const Parameter& p : parameters()) {
    p.tensor->move_storage_to(device);
    if (p.is_fp8()) (*p.fp8)->move_to(device);
    if (p.initial_master != nullptr && p.initial_master->defined()) {
      p.initial_master->move_storage_to(device);
    }
    const Tensor& g = autograd::grad(*p.tensor);
    if (g.defined()) g.move_storage_to(device);
  }
  for (auto& [name, t] : collect_buffers(HostBuffers::kSkip)) {
    if (t->defined()) t->move_storage_to(device);
  }
  visit("", [device](const std::string&, Module& m) { m.device_ = device; });
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Parameter& p : parameters()) {
    if (p.is_fp8()) {
      add_fp8_entries(p.name, **p.fp8, out);
    } else {
      out.emplace_back(p.name, *p.tensor);
    }
  }
  for (auto& [name, t] : buffers()) out.emplace_back(name, *t);
  return out;
}

void Module::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<std::pair<std::string, Tensor>> live = state_dict();
  for (const auto& [name, src] : state) {
    bool known = false;
    for (const auto& [live_name, _] : live) known = known || live_name == name;
    OCTET_CHECK(known, "load_state_dict: unexpected key \"", name, "\" (not in this ", type_, ")");
  }
  // Scales the owners require positive (a zero, infinite or NaN scale would skip every step that
  // follows), refused before anything is copied.
  visit("", [&](const std::string& prefix, Module& m) {
    if (const FP8State* s = m.own_fp8_state()) {
      for (const std::string& name : s->positive_buffers())
        check_positive(state, join(prefix, name));
    }
  });
  for (const Parameter& p : parameters()) {
    if (!p.is_fp8()) continue;
    for (const std::string& suffix : (*p.fp8)->positive_state())
      check_positive(state, p.name + suffix);
  }
  for (auto& [name, dst] : live) {
    const Tensor* src = nullptr;
    for (const auto& [n, t] : state) {
      if (n == name) src = &t;
    }
    OCTET_CHECK(src != nullptr, "load_state_dict: missing key \"", name, "\"");
    OCTET_CHECK(src->shape() == dst.shape() && src->dtype() == dst.dtype(), "load_state_dict: \"",
                name, "\" is ", *src, " but the model expects ", dst);
    // Raw bytes between any two devices (FP8 data included, which copy_ does not take).
    dst.copy_bytes_from(*src);
  }
  // FP8 primary weights: the f32 value the optimizer adopts as its master (and MXFP8 rebuilds
  // column-wise data from) must follow the loaded weight, not stay at its random initial value.
  // Column-wise data is stale too: drop it (remade from the new row-wise data on demand). The
  // copy bumped the data's version, so a graph that saved the old weight refuses to backward.
  for (const Parameter& p : parameters()) {
    if (!p.is_fp8()) continue;
    QuantizedTensor& q = **p.fp8;
    q.bump_version();
    if (q.has(Usage::kColumnwise) && q.has(Usage::kRowwise)) ops::update_usage(q, Usage::kRowwise);
    if (p.initial_master != nullptr && p.initial_master->defined()) {
      ops::copy_(*p.initial_master, ops::dequantize(q, DType::kF32));
    }
  }
}

}  // namespace octet::modules
