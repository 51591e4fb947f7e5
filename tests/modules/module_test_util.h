// Helpers shared by the module tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"

namespace octet::test {

// Runs f() inside an FP8 scope with *recipe, or in high precision when recipe is null. The scope
// closes (updating forward scales) after f's result is made, as with a scope around the call.
template <typename F>
auto with_fp8(const Recipe* recipe, F&& f) {
  std::optional<modules::FP8Autocast> scope;
  if (recipe != nullptr) scope.emplace(*recipe);
  return std::forward<F>(f)();
}

// Root mean square of a - b over the root mean square of b.
inline double relative_rms(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// Makes x require grad, zeroes lin's weight gradient and runs lin's forward on x under `recipe`.
inline Tensor linear_forward(modules::Linear& lin, Tensor& x, const Recipe& recipe) {
  autograd::set_requires_grad(x);
  autograd::zero_grad(const_cast<Tensor&>(lin.weight()));
  modules::FP8Autocast scope(recipe);
  return lin.forward(x);
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

// Which pass of an FP8 module runs in high precision (fp8.high_precision_after / _backward).
enum class HighPrecisionPass { kNone, kForward, kBackward };

// The output and gradients of one forward + backward: the input's gradient, then each parameter's.
struct PassStep {
  std::vector<float> y;
  std::vector<std::vector<float>> grads;
};

// One forward and backward of `m` on x with output gradient g: under `recipe` (none: high
// precision), with `pass` in high precision. The parameters' gradients are zeroed first.
template <typename M>
PassStep step_with_pass(M& m, const Tensor& x_value, const Tensor& g,
                        const std::optional<Recipe>& recipe, HighPrecisionPass pass) {
  Tensor x = x_value.clone();
  autograd::set_requires_grad(x);
  for (modules::Parameter& p : m.parameters()) autograd::zero_grad(*p.tensor);
  Tensor y;
  {
    std::optional<modules::FP8Autocast> scope;
    if (recipe) scope.emplace(*recipe);
    const modules::FP8HighPrecisionForward forward(pass == HighPrecisionPass::kForward);
    const modules::FP8HighPrecisionBackward backward(pass == HighPrecisionPass::kBackward);
    y = m.forward(x);
  }
  autograd::backward(y, g);
  PassStep s{y.to_floats(), {autograd::grad(x).to_floats()}};
  for (modules::Parameter& p : m.parameters()) {
    s.grads.push_back(autograd::grad(*p.tensor).to_floats());
  }
  return s;
}

// (rows, cols) row-major values transposed.
inline std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      t[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
    }
  }
  return t;
}

// (rows, cols) i32 ids in [0, vocab).
inline Tensor random_ids(int64_t rows, int64_t cols, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::kI32);
  Generator gen(seed);
  auto* p = t.data_as<int32_t>();
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = static_cast<int32_t>(gen.next_u32() % vocab);
  return t;
}

// The FP8 modules of `gpt` whose first forward quantizer recorded an amax: those that ran a GEMM
// in FP8 (delayed scaling).
inline std::set<std::string> modules_that_ran_fp8(modules::GPT& gpt) {
  std::set<std::string> out;
  const std::string suffix = ".fp8_meta.forward.0.amax_history";
  for (const auto& [name, t] : gpt.buffers()) {
    if (!name.ends_with(suffix)) continue;
    const std::vector<float> history = t->to_floats();
    if (std::any_of(history.begin(), history.end(), [](float a) { return a != 0.f; })) {
      out.insert(name.substr(0, name.size() - suffix.size()));
    }
  }
  return out;
}

}  // namespace octet::test
