// The transformer modules recomposed from autograd primitives (each gradient-checked against f64
// in tests/autograd), on clones of a module's parameters: the reference the module tests use.
#pragma once

#include <cmath>
#include <map>
#include <string>

#include "autograd/ops/arithmetic.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/nn.h"
#include "autograd/variable.h"
#include "modules/module.h"

namespace octet::modules::test_ref {

// Leaf clones of every parameter of `m`, by dotted name: gradients of the reference land here.
class Params {
 public:
  explicit Params(Module& m) {
    for (const Parameter& p : m.parameters()) {
      Tensor c = p.tensor->clone();
      autograd::set_requires_grad(c);
      t_.emplace(p.name, c);
    }
  }
  const Tensor& operator[](const std::string& name) const {
    const auto it = t_.find(name);
    if (it == t_.end()) OCTET_FAIL("reference: no parameter \"", name, "\"");
    return it->second;
  }
  const std::map<std::string, Tensor>& all() const { return t_; }

 private:
  std::map<std::string, Tensor> t_;
};

// Pre-norm attention branch: layer_norm -> QKV linear -> causal attention -> output linear.
inline Tensor attention(const Params& p, const std::string& at, const Tensor& x, int64_t heads) {
  const Tensor h =
      autograd::layer_norm(x, p[at + "qkv.norm.weight"], p[at + "qkv.norm.bias"], 1e-5f);
  const Tensor qkv = autograd::linear(h, p[at + "qkv.weight"], p[at + "qkv.bias"]);
  const float scale = 1.f / std::sqrt(static_cast<float>(x.size(-1) / heads));
  return autograd::linear(autograd::causal_attention(qkv, heads, scale), p[at + "proj.weight"],
                          p[at + "proj.bias"]);
}

// x + attention(x), then + gelu MLP on its norm.
inline Tensor layer(const Params& p, const std::string& at, const Tensor& x, int64_t heads) {
  const Tensor h = autograd::add(x, attention(p, at + "attn.", x, heads));
  Tensor m = autograd::layer_norm(h, p[at + "mlp.norm.weight"], p[at + "mlp.norm.bias"], 1e-5f);
  m = autograd::gelu(autograd::linear(m, p[at + "mlp.fc1.weight"], p[at + "mlp.fc1.bias"]));
  return autograd::add(h, autograd::linear(m, p[at + "mlp.fc2.weight"], p[at + "mlp.fc2.bias"]));
}

}  // namespace octet::modules::test_ref
