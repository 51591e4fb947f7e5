// Helpers shared by the module tests.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "runtime/recipe.h"

namespace octet::test {

// Runs f() inside an FP8 scope with *recipe, or in high precision when recipe is null. The scope
// closes (updating forward scales) after f's result is made, as with a scope around the call.
template <typename F>
auto with_fp8(const Recipe* recipe, F&& f) {
  std::optional<modules::FP8Autocast> scope;
  if (recipe != nullptr) scope.emplace(*recipe);
  return std::forward<F>(f)();
}

// The output and gradients of one forward + backward of a LayerNormMLP, read back to the host.
struct MLPResult {
  std::vector<float> y, dx, dgamma, dw1, dw2;
};

// x and g on the module's device; FP8 under *recipe, high precision when it is null. The
// module's gradients are zeroed afterwards, so runs can repeat.
inline MLPResult run_mlp(modules::LayerNormMLP& m, const Tensor& x_in, const Tensor& g,
                         const Recipe* recipe) {
  Tensor x = x_in.clone();
  autograd::set_requires_grad(x);
  Tensor y = with_fp8(recipe, [&] { return m.forward(x); });
  EXPECT_EQ(y.device(), x_in.device());
  autograd::backward(y, g);
  MLPResult r{y.to_floats(), autograd::grad(x).to_floats(),
              autograd::grad(m.norm().gamma).to_floats(),
              autograd::grad(m.fc1_weight().leaf()).to_floats(),
              autograd::grad(m.fc2_weight().leaf()).to_floats()};
  for (const modules::Parameter& p : m.parameters()) autograd::zero_grad(*p.tensor);
  return r;
}

}  // namespace octet::test
