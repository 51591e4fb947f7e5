// The FP8 modules with bf16 parameters and activations, in high precision and under FP8: they
// run, gradients come back in bf16, and results stay within bf16 rounding of the f32 modules.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

struct Result16 {
  std::vector<float> y, dx, dw;
  DType dx_dtype, dw_dtype;
};

template <typename M>
Result16 run(M& m, const Tensor& weight_leaf, const Tensor& x_in, const Recipe* recipe) {
  Tensor x = x_in.clone();
  autograd::set_requires_grad(x);
  Tensor y = test::with_fp8(recipe, [&] { return m.forward(x); });
  autograd::backward(autograd::sum(y));
  Result16 r{y.to_floats(), autograd::grad(x).to_floats(), autograd::grad(weight_leaf).to_floats(),
             autograd::grad(x).dtype(), autograd::grad(weight_leaf).dtype()};
  for (const Parameter& p : m.parameters()) autograd::zero_grad(*p.tensor);
  return r;
}

std::vector<double> wide(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST(Bf16Modules, LinearAndLayerNormMLPRunInBf16AndUnderFp8) {
  const Tensor x32 = test::random_tensor({32, 64}, DType::kF32, 1);
  const Tensor x16 = ops::cast(x32, DType::kBF16);
  LinearOptions f32_opts, bf16_opts;
  bf16_opts.dtype = DType::kBF16;
  Linear lin32(64, 64, f32_opts), lin16(64, 64, bf16_opts);
  LayerNormMLPOptions m32, m16;
  m16.linear.dtype = DType::kBF16;
  m16.norm.dtype = DType::kBF16;
  LayerNormMLP mlp32(64, 128, m32), mlp16(64, 128, m16);
  const Recipe delayed = Recipe::delayed();
  for (const Recipe* recipe : {static_cast<const Recipe*>(nullptr), &delayed}) {
    SCOPED_TRACE(recipe ? "FP8 delayed" : "high precision");
    const Result16 a = run(lin32, lin32.weight(), x32, recipe),
                   b = run(lin16, lin16.weight(), x16, recipe);
    EXPECT_EQ(b.dx_dtype, DType::kBF16);
    EXPECT_EQ(b.dw_dtype, DType::kBF16);
    // bf16 rounding of the inputs, weights and outputs (and FP8's on top when on).
    const test::Tolerance tol =
        recipe ? test::Tolerance{0.0675, 0.125} : test::Tolerance{0.02, 0.03};
    EXPECT_TRUE(test::all_close(b.y, wide(a.y), tol));
    EXPECT_TRUE(test::all_close(b.dx, wide(a.dx), tol));
    const Result16 c = run(mlp32, mlp32.fc1_weight().leaf(), x32, recipe);
    const Result16 d = run(mlp16, mlp16.fc1_weight().leaf(), x16, recipe);
    EXPECT_EQ(d.dw_dtype, DType::kBF16);
    EXPECT_TRUE(test::all_close(d.y, wide(c.y), tol));
    EXPECT_TRUE(test::all_close(d.dx, wide(c.dx), tol));
  }
}

}  // namespace
}  // namespace octet::modules
