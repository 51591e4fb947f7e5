// Linear under NVFP4's quartet2 method against the f64 model of tests/support/quartet2_model.h:
// the forward is TE's 1x16 4over6 cast (MSE, the 256 bound) of both operands, or with 4over6 off
// TE's plain 1x16 cast; the backward re-casts dY and the forward's dequantized input and weight
// with one set of 128 signs along each GEMM's inner dimension and MS-EDEN, drawing from the slot's
// stream in a fixed order; its gradients are unbiased estimates of the quantized forward's; shapes
// off 128 are clear errors.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "kernels/quantized.h"
#include "modules/fp8_autocast.h"
#include "modules/linear.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/product_nt.h"
#include "tests/support/quartet2_model.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

namespace model = test::quartet2;

constexpr int64_t kM = 128, kK = 256, kN = 128;  // tokens, in, out

struct LinearRun {
  std::vector<float> y, dx, dw;
  uint64_t seed = 0, offset = 0;  // the gradient slot's stream before the backward
};

LinearRun run(Linear& lin, const Tensor& x_value, const Tensor& g, const Recipe& recipe) {
  Tensor x = x_value.clone();
  const Tensor y = test::linear_forward(lin, x, recipe);
  LinearRun r;
  for (const auto& [name, stream] : lin.fp8_state().host_buffers()) {
    if (name == "fp8_state.backward." +
                    std::to_string(backward_slot(0, BackwardTensor::kGradOutput).index) + ".rng") {
      r.seed = static_cast<uint64_t>(stream->data_as<int64_t>()[0]);
      r.offset = static_cast<uint64_t>(stream->data_as<int64_t>()[1]);
    }
  }
  autograd::backward(y, g);
  r.y = y.to_floats();
  r.dx = autograd::grad(x).to_floats();
  r.dw = autograd::grad(lin.weight()).to_floats();
  return r;
}

Recipe te_forward_equivalent() {
  return parse_recipe(
      R"({"recipe": "nvfp4", "disable_rht": true, "disable_stochastic_rounding": true,
          "disable_2d_quantization": true, "nvfp4_4over6": "all",
          "nvfp4_4over6_e4m3_use_256": "all", "nvfp4_4over6_err_mode": "MSE"})");
}

// The forward's operand as its row-wise cast decodes it (f32 values).
std::vector<double> forward_values(Linear& lin, ForwardTensor role, const Tensor& value) {
  const Quantizer* q = lin.fp8_state().quantizer(forward_slot(0, role));
  const auto cast = q->quantize(value, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
  const std::vector<float> v = ops::dequantize(*cast, DType::kF32).to_floats();
  return {v.begin(), v.end()};
}

std::vector<double> transposed(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      t[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
  return t;
}

// MS-EDEN of x (rows, cols) after the transform along its rows, the rotated values rounded once
// to f32 (as octet defines them): the values its codes stand for.
std::vector<double> rotated_cast(const std::vector<double>& x, int64_t rows, int64_t cols,
                                 uint64_t seed, uint64_t signs_at, uint64_t draws_at) {
  std::vector<double> v = model::rht128_rows(x, rows, cols, seed, signs_at);
  for (double& e : v) e = static_cast<float>(e);
  return model::eden(v, rows, cols, seed, draws_at).values;
}

using test::product_nt;  // out (p, n) = a (p, k) · b (n, k)ᵀ in f64, and each sum of |terms|

::testing::AssertionResult up_to_f32_sums(const std::vector<float>& got,
                                          const std::vector<double>& want,
                                          const std::vector<double>& mag) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 * mag[i] + 1e-30)) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

using test::relative_rms;

LinearOptions no_bias(uint64_t seed) {
  LinearOptions o;
  o.bias = Bias::kNo;
  o.seed = seed;
  return o;
}

TEST(Quartet2Linear, ForwardIsTes1x16FourOverSixCast) {
  const Tensor x = test::random_tensor({kM, kK}, DType::kF32, 51);
  const Tensor g = test::random_tensor({kM, kN}, DType::kF32, 52);
  Linear a(kK, kN, no_bias(5)), b(kK, kN, no_bias(5));
  const LinearRun q2 = run(a, x, g, Recipe::nvfp4_quartet2());
  const LinearRun te = run(b, x, g, te_forward_equivalent());
  EXPECT_EQ(q2.y, te.y);
  EXPECT_NE(q2.dw, te.dw);  // the backward is the method's own
}

// With "nvfp4_4over6": "none" the forward is TE's plain 1x16 cast to nearest (the 448 bound); the
// backward is still the method's own, re-casting what that forward dequantized.
TEST(Quartet2Linear, ForwardWithoutFourOverSixIsTes1x16Cast) {
  const Tensor x = test::random_tensor({kM, kK}, DType::kF32, 51);
  const Tensor g = test::random_tensor({kM, kN}, DType::kF32, 52);
  Linear a(kK, kN, no_bias(5)), b(kK, kN, no_bias(5)), c(kK, kN, no_bias(5));
  const Recipe off =
      parse_recipe(R"({"recipe": "nvfp4", "method": "quartet2", "nvfp4_4over6": "none"})");
  const LinearRun q2 = run(a, x, g, off);
  const LinearRun te = run(b, x, g, parse_recipe(R"({"recipe": "nvfp4", "disable_rht": true,
                                            "disable_stochastic_rounding": true,
                                            "disable_2d_quantization": true})"));
  const LinearRun q2_on = run(c, x, g, Recipe::nvfp4_quartet2());
  EXPECT_EQ(q2.y, te.y);
  EXPECT_NE(q2.y, q2_on.y);
  EXPECT_NE(q2.dw, te.dw);
}

TEST(Quartet2Linear, BackwardIsTheModelsReCastOperandsMultiplied) {
  const Tensor x = test::random_tensor({kM, kK}, DType::kF32, 61);
  Tensor g = test::random_tensor({kM, kN}, DType::kF32, 62);
  {
    float* p = g.data_as<float>();  // rows of different magnitudes, as a loss's gradients are
    for (int64_t i = 0; i < kM * kN; ++i) p[i] = std::ldexp(p[i], static_cast<int>(i / kN % 7) - 3);
  }
  Linear lin(kK, kN, no_bias(6));
  const LinearRun got = run(lin, x, g, Recipe::nvfp4_quartet2());
  const std::vector<double> xq = forward_values(lin, ForwardTensor::kInput, x);
  const std::vector<double> wq = forward_values(lin, ForwardTensor::kWeight, lin.weight());
  const std::vector<float> gv = g.to_floats();
  const std::vector<double> dy(gv.begin(), gv.end());
  // The stream: 128 signs, then one draw per 1x16 block of dY row-wise, dY column-wise, the
  // weight, the input.
  const uint64_t s = got.seed, signs = got.offset;
  uint64_t at = signs + 128;
  const std::vector<double> dy_row = rotated_cast(dy, kM, kN, s, signs, at);
  at += kM * kN / 16;
  const std::vector<double> dy_col = rotated_cast(transposed(dy, kM, kN), kN, kM, s, signs, at);
  at += kM * kN / 16;
  const std::vector<double> w_col = rotated_cast(transposed(wq, kN, kK), kK, kN, s, signs, at);
  at += kN * kK / 16;
  const std::vector<double> x_col = rotated_cast(transposed(xq, kM, kK), kK, kM, s, signs, at);
  const test::ProductNT dx = product_nt(dy_row, w_col, kM, kK, kN);
  const test::ProductNT dw = product_nt(dy_col, x_col, kN, kK, kM);
  EXPECT_TRUE(up_to_f32_sums(got.dx, dx.value, dx.magnitude)) << "dgrad";
  EXPECT_TRUE(up_to_f32_sums(got.dw, dw.value, dw.magnitude)) << "wgrad";
}

TEST(Quartet2Linear, GradientsAreUnbiasedEstimatesOfTheQuantizedForwards) {
  // The mean over many backwards (fresh signs and draws each) of dX tends to dY · Wq and of dW
  // to dYᵀ · Xq: Xq and Wq the forward's 4-bit values. 64 backwards: 8x less error if unbiased.
  const Tensor x = test::random_tensor({kM, kK}, DType::kF32, 71);
  const Tensor g = test::random_tensor({kM, kN}, DType::kF32, 72);
  Linear lin(kK, kN, no_bias(7));
  run(lin, x, g, Recipe::nvfp4_quartet2());  // makes the slots' quantizers
  const std::vector<double> xq = forward_values(lin, ForwardTensor::kInput, x);
  const std::vector<double> wq = forward_values(lin, ForwardTensor::kWeight, lin.weight());
  const std::vector<float> gv = g.to_floats();
  const std::vector<double> dy(gv.begin(), gv.end());
  const std::vector<double> dx_want = product_nt(dy, transposed(wq, kN, kK), kM, kK, kN).value;
  const std::vector<double> dw_want =
      product_nt(transposed(dy, kM, kN), transposed(xq, kM, kK), kN, kK, kM).value;
  const int reps = 64;
  std::vector<double> dx_mean(dx_want.size(), 0), dw_mean(dw_want.size(), 0);
  double dx_single = 0, dw_single = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const LinearRun r = run(lin, x, g, Recipe::nvfp4_quartet2());
    const std::vector<double> dx(r.dx.begin(), r.dx.end()), dw(r.dw.begin(), r.dw.end());
    if (rep == 0) {
      dx_single = relative_rms(dx, dx_want);
      dw_single = relative_rms(dw, dw_want);
    }
    for (size_t i = 0; i < dx.size(); ++i) dx_mean[i] += dx[i] / reps;
    for (size_t i = 0; i < dw.size(); ++i) dw_mean[i] += dw[i] / reps;
  }
  const double dx_err = relative_rms(dx_mean, dx_want), dw_err = relative_rms(dw_mean, dw_want);
  EXPECT_LT(dx_err, dx_single / 5) << "dgrad: one backward " << dx_single << ", mean " << dx_err;
  EXPECT_LT(dw_err, dw_single / 5) << "wgrad: one backward " << dw_single << ", mean " << dw_err;
}

TEST(Quartet2Linear, ShapesOffTheTransformsWidthAreClearErrors) {
  Linear lin(96, kN, no_bias(8));
  Tensor x = test::random_tensor({kM, 96}, DType::kF32, 81);
  autograd::set_requires_grad(x);
  const std::string message = test::error_of([&] {
    FP8Autocast scope(Recipe::nvfp4_quartet2());
    lin.forward(x);
  });
  EXPECT_NE(message.find("multiples of 128"), std::string::npos) << message;
  EXPECT_NE(message.find("in 96"), std::string::npos) << message;
}

}  // namespace
}  // namespace octet::modules
