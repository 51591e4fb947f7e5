// A frozen weight (set_requires_grad(weight, false)) under every recipe and in every FP8 module:
// the GEMM's input is not cast column-wise nor saved, there is no wgrad, and dX is unchanged. The
// saved bytes drop by exactly the input's column-wise copy, worked out here from the format
// (per-tensor: one byte per value and the 4-byte scale_inv; MXFP8: one byte per value and one
// e8m0 exponent per 32 rows of each column; high precision: the f32 tensor itself).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "runtime/memory.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

constexpr int64_t kRows = 64, kIn = 64, kOut = 96, kFfn = 128;

struct Case {
  const char* name;
  std::optional<Recipe> recipe;  // none: high precision
};

const Case kCases[] = {{"f32", std::nullopt},
                       {"delayed", Recipe::delayed()},
                       {"current", Recipe::current()},
                       {"mxfp8", Recipe::mxfp8()},
                       {"blockwise", Recipe::blockwise()},
                       {"nvfp4", Recipe::nvfp4()},
                       {"rowwise", Recipe::rowwise()}};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The bytes a saved column-wise copy of a (rows, cols) GEMM input holds under `recipe`: the data
// stored (cols, rows) and the scales of its blocks along rows.
int64_t saved_input_bytes(const std::optional<Recipe>& recipe, int64_t rows, int64_t cols) {
  if (!recipe) return rows * cols * 4;
  switch (recipe->kind) {
    case RecipeKind::kMXFP8:  // one e8m0 per 32 rows of each column
      return rows * cols + cols * ceil_div(rows, 32);
    case RecipeKind::kBlockwise:  // f32 scale_inv (ceil(rows / 128), roundup(cols, 4))
      return rows * cols + 4 * ceil_div(rows, 128) * (ceil_div(cols, 4) * 4);
    case RecipeKind::kNVFP4:  // half a byte a value, e4m3 (roundup(cols, 128), roundup(rows / 16,
                              // 4)), the f32 amax
      return rows * cols / 2 + ceil_div(cols, 128) * 128 * (ceil_div(rows / 16, 4) * 4) + 4;
    case RecipeKind::kRowwise:  // an f32 scale_inv per column (the stored rows)
      return rows * cols + 4 * cols;
    default:  // per-tensor: the data and the 4-byte scale_inv
      return rows * cols + 4;
  }
}

int64_t saved_now() { return memory_stats().current_of(MemTag::kSaved); }

struct Outcome {
  int64_t saved = 0;  // bytes saved for backward by the forward
  Tensor dx;
  bool weight_has_grad = false;
};

// Runs forward (saved bytes measured), then backward; `weight` is the leaf that may be frozen.
Outcome run(const std::optional<Recipe>& recipe, const Tensor& weight, bool freeze,
            const std::function<Tensor(const Tensor&)>& forward) {
  Tensor w = weight;
  autograd::set_requires_grad(w, !freeze);
  EXPECT_EQ(autograd::requires_grad(weight), !freeze);
  Tensor x = test::random_tensor({kRows, kIn}, DType::kF32, 5);
  autograd::set_requires_grad(x);
  const int64_t before = saved_now();
  Tensor y;
  {
    std::optional<FP8Autocast> scope;
    if (recipe) scope.emplace(*recipe);
    y = forward(x);
  }
  Outcome o;
  o.saved = saved_now() - before;
  autograd::backward(y, test::random_tensor(y.shape(), DType::kF32, 6));
  o.dx = autograd::grad(x);
  o.weight_has_grad = autograd::grad(weight).defined();
  return o;
}

using test::same_bits;  // tests/support/test_util.h

void expect_frozen_saves_less(const Case& c, const std::function<std::unique_ptr<Module>()>& make,
                              const std::function<const Tensor&(Module&)>& weight_of,
                              const std::function<Tensor(Module&, const Tensor&)>& forward,
                              int64_t expected_drop) {
  std::unique_ptr<Module> trained = make(), frozen = make();
  const Outcome t = run(c.recipe, weight_of(*trained), false,
                        [&](const Tensor& x) { return forward(*trained, x); });
  const Outcome f =
      run(c.recipe, weight_of(*frozen), true, [&](const Tensor& x) { return forward(*frozen, x); });
  EXPECT_EQ(t.saved - f.saved, expected_drop)
      << c.name << ": saved " << t.saved << " bytes trainable, " << f.saved << " frozen";
  EXPECT_TRUE(t.weight_has_grad) << c.name;
  EXPECT_FALSE(f.weight_has_grad) << c.name << ": a frozen weight got a gradient (wgrad ran)";
  EXPECT_TRUE(same_bits(t.dx, f.dx)) << c.name << ": dX changed when the weight was frozen";
}

LinearOptions linear_options(const Case& c) {
  LinearOptions o;
  o.recipe = c.recipe;
  o.seed = 3;
  return o;
}

TEST(FrozenWeight, LinearSavesNoInputCopy) {
  for (const Case& c : kCases) {
    expect_frozen_saves_less(
        c, [&] { return std::make_unique<Linear>(kIn, kOut, linear_options(c)); },
        [](Module& m) -> const Tensor& { return static_cast<Linear&>(m).weight(); },
        [](Module& m, const Tensor& x) { return static_cast<Linear&>(m).forward(x); },
        saved_input_bytes(c.recipe, kRows, kIn));
  }
}

TEST(FrozenWeight, LayerNormLinearSavesNoNormOutputCopy) {
  for (const Case& c : kCases) {
    LayerNormLinearOptions o;
    o.linear = linear_options(c);
    expect_frozen_saves_less(
        c, [&] { return std::make_unique<LayerNormLinear>(kIn, kOut, o); },
        [](Module& m) -> const Tensor& { return static_cast<LayerNormLinear&>(m).weight().leaf(); },
        [](Module& m, const Tensor& x) { return static_cast<LayerNormLinear&>(m).forward(x); },
        saved_input_bytes(c.recipe, kRows, kIn));
  }
}

// Frozen fc1: its input (the norm output) is not kept; frozen fc2: the activation is not.
TEST(FrozenWeight, LayerNormMLPSavesNoInputCopyOfAFrozenGemm) {
  for (const int gemm : {0, 1}) {
    for (const Case& c : kCases) {
      LayerNormMLPOptions o;
      o.linear = linear_options(c);
      expect_frozen_saves_less(
          c, [&] { return std::make_unique<LayerNormMLP>(kIn, kFfn, o); },
          [gemm](Module& m) -> const Tensor& {
            auto& mlp = static_cast<LayerNormMLP&>(m);
            return gemm == 0 ? mlp.fc1_weight().leaf() : mlp.fc2_weight().leaf();
          },
          [](Module& m, const Tensor& x) { return static_cast<LayerNormMLP&>(m).forward(x); },
          saved_input_bytes(c.recipe, kRows, gemm == 0 ? kIn : kFfn));
    }
  }
}

}  // namespace
}  // namespace octet::modules
