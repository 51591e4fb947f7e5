// Optimizer kernels against the update rules written out in f64.
#include "kernels/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/math/optim.h"
#include "kernels/ops.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

TEST(OptimKernels, AdamWMatchesTheRuleOverThreeSteps) {
  Tensor w = test::random_tensor({37, 29}, DType::kF32, 1);
  Tensor m = Tensor::zeros(w.shape(), DType::kF32), v = Tensor::zeros(w.shape(), DType::kF32);
  std::vector<double> rw = test::to_doubles(w), rm(rw.size(), 0.0), rv(rw.size(), 0.0);
  ops::AdamWHyper h;
  h.lr = 0.01f;
  h.beta1 = 0.8f;
  h.beta2 = 0.95f;
  h.eps = 1e-6f;
  h.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 3; ++step) {
    const DType gd = step == 2 ? DType::kBF16 : DType::kF32;  // bf16 gradients convert exactly
    const Tensor g = test::random_tensor(w.shape(), gd, 10 + static_cast<uint64_t>(step));
    const std::vector<double> gv = test::to_doubles(g);
    h.step = step;
    ops::adamw_step(w, g, m, v, h);
    for (size_t i = 0; i < rw.size(); ++i) {
      rw[i] *= 1 - 0.01 * 0.1;
      rm[i] = 0.8 * rm[i] + 0.2 * gv[i];
      rv[i] = 0.95 * rv[i] + 0.05 * gv[i] * gv[i];
      const double mh = rm[i] / (1 - std::pow(0.8, step)), vh = rv[i] / (1 - std::pow(0.95, step));
      rw[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-6);
    }
  }
  EXPECT_TRUE(test::all_close(w.to_floats(), rw, {1e-6, 1e-5}));
  EXPECT_TRUE(test::all_close(m.to_floats(), rm, {1e-6, 1e-5}));
  EXPECT_TRUE(test::all_close(v.to_floats(), rv, {1e-7, 1e-5}));
}

TEST(OptimKernels, SgdMomentumMatchesTheRule) {
  Tensor w = test::random_tensor({100}, DType::kF32, 2);
  Tensor buf = Tensor::zeros({100}, DType::kF32);
  std::vector<double> rw = test::to_doubles(w), rb(100, 0.0);
  for (int64_t step = 1; step <= 3; ++step) {
    const Tensor g = test::random_tensor({100}, DType::kF32, 20 + static_cast<uint64_t>(step));
    const std::vector<double> gv = test::to_doubles(g);
    ops::sgd_step(w, g, buf, 0.1f, 0.9f, 0.01f, step);
    for (size_t i = 0; i < 100; ++i) {
      const double gi = gv[i] + 0.01 * rw[i];
      rb[i] = step == 1 ? gi : 0.9 * rb[i] + gi;
      rw[i] -= 0.1 * rb[i];
    }
  }
  EXPECT_TRUE(test::all_close(w.to_floats(), rw, {1e-6, 1e-5}));
  Tensor none;
  Tensor w2 = Tensor::full({4}, 1.f, DType::kF32);
  ops::sgd_step(w2, Tensor::full({4}, 2.f, DType::kF32), none, 0.5f, 0.f, 0.f, 1);
  EXPECT_EQ(w2.to_floats(), std::vector<float>(4, 0.f));  // 1 - 0.5 * 2
}

TEST(OptimKernels, SumOfSquaresAndErrors) {
  const Tensor x = test::random_tensor({1000}, DType::kF32, 3);
  double want = 0;
  for (double v : test::to_doubles(x)) want += v * v;
  EXPECT_NEAR(ops::sum_of_squares(x), want, 1e-9 * want);
  Tensor w = Tensor::zeros({3}, DType::kF32), m = Tensor::zeros({3}, DType::kF32);
  Tensor v = Tensor::zeros({4}, DType::kF32);
  EXPECT_THROW(ops::adamw_step(w, w, m, v, {}), Error);
}

// The norm of a gradient held in parts (train::DataParallel's): each part's sum of squares
// against f64, the norm from the parts against f64, the clip factor's rule, the one-call form
// equal to its two halves bit for bit, and bad parts refused by name.
TEST(OptimKernels, ClipGradNormFromPartsIsTheNormOfEveryPartAndTheOneCallForm) {
  const Tensor a = test::random_tensor({300, 7}, DType::kF32, 41, 2.f);
  const Tensor b = ops::cast(test::random_tensor({5000}, DType::kF32, 42), DType::kBF16);
  const Tensor c = test::random_tensor({77}, DType::kF32, 43, 3.f);
  auto squares = [](const std::vector<const Tensor*>& xs) {
    double sum = 0;
    for (const Tensor* x : xs) {
      for (double v : test::to_doubles(*x)) sum += v * v;
    }
    return sum;
  };
  const double want_ab = squares({&a, &b}), want_c = squares({&c});
  const Tensor part_ab = ops::sum_of_squares_part({&a, &b}, Device::cpu());
  const Tensor part_c = ops::sum_of_squares_part({&c}, Device::cpu());
  EXPECT_NEAR(ops::read_f64(part_ab), want_ab, 1e-12 * want_ab);
  EXPECT_NEAR(ops::read_f64(part_c), want_c, 1e-12 * want_c);
  EXPECT_EQ(ops::read_f64(ops::sum_of_squares_part({}, Device::cpu())), 0.0);
  Tensor parts = Tensor::empty({2}, DType::kI64);
  parts.slice(0, 1).copy_bytes_from(part_ab);
  parts.slice(1, 2).copy_bytes_from(part_c);
  const double want_norm = std::sqrt(want_ab + want_c);
  for (double max_norm : {0.0, 1.0, 1e9}) {
    SCOPED_TRACE("max_norm " + std::to_string(max_norm));
    Tensor ga = a.clone(), gb = b.clone(), gc = c.clone();
    const double norm =
        ops::read_f64(ops::clip_grad_norm_from_parts_({&ga, &gb, &gc}, parts, max_norm));
    EXPECT_NEAR(norm, want_norm, 1e-12 * want_norm);
    const bool clips = max_norm > 0 && norm > max_norm;
    const auto factor = static_cast<float>(max_norm / (norm + 1e-6));
    for (const auto& [got, was] :
         {std::pair<const Tensor*, const Tensor*>{&ga, &a}, {&gb, &b}, {&gc, &c}}) {
      EXPECT_TRUE(test::same_bits(*got, clips ? ops::scale(*was, factor) : *was));
    }
    // One call over the same tensors: its single part is the sum of all three.
    Tensor oa = a.clone(), ob = b.clone(), oc = c.clone();
    Tensor one_part = ops::sum_of_squares_part({&a, &b, &c}, Device::cpu());
    Tensor x = a.clone(), y = b.clone(), z = c.clone();
    EXPECT_EQ(ops::read_f64(ops::clip_grad_norm_({&oa, &ob, &oc}, max_norm)),
              ops::read_f64(ops::clip_grad_norm_from_parts_({&x, &y, &z}, one_part, max_norm)));
    EXPECT_TRUE(test::same_bits(oa, x) && test::same_bits(ob, y) && test::same_bits(oc, z));
  }
  Tensor g = a.clone();
  const Tensor f32_parts = Tensor::zeros({2}, DType::kF32);
  EXPECT_NE(test::error_of([&] {
              ops::clip_grad_norm_from_parts_({&g}, f32_parts, 1.0);
            }).find("parts must be a (k,) i64 tensor of f64 bits"),
            std::string::npos);
  const Tensor ints = Tensor::zeros({3}, DType::kI32);
  EXPECT_NE(test::error_of([&] {
              ops::sum_of_squares_part({&ints}, Device::cpu());
            }).find("gradients must be defined f32 or bf16 tensors"),
            std::string::npos);
}

TEST(OptimKernels, BiasCorrectionByRepeatedSquaringIsLibmsPowInF32) {
  // The kernels' 1 - beta^t (math::bias_correction, the same bits on a GPU) against the f64 pow
  // of the C library, rounded to f32 as before: equal at every step checked.
  for (float beta : {0.9f, 0.95f, 0.999f, 0.8f, 0.9999f}) {
    for (int64_t t = 1; t <= 20000; t += (t < 2000 ? 1 : 37)) {
      const auto want = static_cast<float>(1.0 - std::pow(static_cast<double>(beta), t));
      ASSERT_EQ(math::bias_correction(beta, t), want) << "beta " << beta << " step " << t;
    }
  }
  // Powers of two are exact: repeated squaring must give them exactly.
  EXPECT_EQ(math::pow_by_squaring(0.5, 37), std::ldexp(1.0, -37));
  EXPECT_EQ(math::pow_by_squaring(0.9, 0), 1.0);
}

// w, m, v and a gradient of one shape, for the device-step tests.
struct AdamWCase {
  Tensor w = test::random_tensor({333}, DType::kF32, 31);
  Tensor m = test::random_tensor({333}, DType::kF32, 32, 0.1f);
  Tensor v = ops::scale(test::random_tensor({333}, DType::kF32, 33, 0.1f), 0.f);
  Tensor g = test::random_tensor({333}, DType::kF32, 34);
};

TEST(OptimKernels, DeviceStepShutLeavesEverythingOpenIsTheHostsStep) {
  ops::AdamWHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.1f;
  for (float open : {0.f, 1.f}) {
    SCOPED_TRACE(open != 0.f ? "gate open" : "gate shut");
    AdamWCase device, host;
    const Tensor w0 = device.w.clone(), m0 = device.m.clone(), v0 = device.v.clone();
    const Tensor gate = Tensor::full({1}, open, DType::kF32);
    Tensor steps = Tensor::zeros({1}, DType::kI64);
    steps.data_as<int64_t>()[0] = 4;
    ops::advance_steps(gate, steps);
    EXPECT_EQ(steps.data_as<int64_t>()[0], open != 0.f ? 5 : 4);
    ops::AdamWHyper dh = h;
    dh.step = 1;  // unused: the count comes from `steps`
    dh.device_step = {&gate, &steps};
    ops::adamw_step(device.w, device.g, device.m, device.v, dh);
    if (open == 0.f) {
      EXPECT_TRUE(test::same_bits(device.w, w0));
      EXPECT_TRUE(test::same_bits(device.m, m0));
      EXPECT_TRUE(test::same_bits(device.v, v0));
      continue;
    }
    h.step = 5;
    ops::adamw_step(host.w, host.g, host.m, host.v, h);
    EXPECT_TRUE(test::same_bits(device.w, host.w));
    EXPECT_TRUE(test::same_bits(device.m, host.m));
    EXPECT_TRUE(test::same_bits(device.v, host.v));
    EXPECT_FALSE(test::same_bits(device.w, w0));
  }
  // SGD: the count decides the first step (buffer = gradient) too.
  for (int64_t before : {0, 1}) {
    SCOPED_TRACE("SGD after " + std::to_string(before) + " steps");
    AdamWCase device, host;
    const Tensor gate = Tensor::full({1}, 1.f, DType::kF32);
    Tensor steps = Tensor::zeros({1}, DType::kI64);
    steps.data_as<int64_t>()[0] = before;
    ops::advance_steps(gate, steps);
    ops::sgd_step(device.w, device.g, device.m, 0.1f, 0.9f, 0.01f, 1, {&gate, &steps});
    ops::sgd_step(host.w, host.g, host.m, 0.1f, 0.9f, 0.01f, before + 1);
    EXPECT_TRUE(test::same_bits(device.w, host.w));
    EXPECT_TRUE(test::same_bits(device.m, host.m));
    const Tensor shut = Tensor::full({1}, 0.f, DType::kF32), w1 = device.w.clone();
    ops::sgd_step(device.w, device.g, device.m, 0.1f, 0.9f, 0.01f, 1, {&shut, &steps});
    EXPECT_TRUE(test::same_bits(device.w, w1));
  }
  // Half a device step is a caller's mix-up.
  AdamWCase c;
  const Tensor gate = Tensor::full({1}, 1.f, DType::kF32);
  ops::AdamWHyper half = h;
  half.device_step = {&gate, nullptr};
  const std::string message = test::error_of([&] { ops::adamw_step(c.w, c.g, c.m, c.v, half); });
  EXPECT_NE(message.find("device step's count"), std::string::npos) << message;
}

// The model weight AdamW writes in its pass is, bit for bit, the copy of the updated master that
// copy_ would make after the step: bf16 rounded to nearest even (ties and values whose low bits
// matter included), f32 as it is; a shut device gate leaves it; the wrong kind of tensor is
// refused.
TEST(OptimKernels, AdamWModelWeightIsTheCopyOfTheUpdatedMaster) {
  ops::AdamWHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.1f;
  h.step = 3;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    AdamWCase fused, separate;
    Tensor model = ops::cast(fused.w, dtype);
    const Tensor model0 = model.clone();
    ops::adamw_step({{&fused.w, &fused.g, &fused.m, &fused.v, &model}}, h);
    ops::adamw_step(separate.w, separate.g, separate.m, separate.v, h);
    Tensor copied = ops::cast(separate.w, dtype);
    EXPECT_TRUE(test::same_bits(fused.w, separate.w));
    EXPECT_TRUE(test::same_bits(model, copied));
    EXPECT_FALSE(test::same_bits(model, model0));
    // A shut gate: nothing moves, the model weight neither.
    const Tensor shut = Tensor::full({1}, 0.f, DType::kF32);
    Tensor steps = Tensor::zeros({1}, DType::kI64);
    ops::AdamWHyper dh = h;
    dh.device_step = {&shut, &steps};
    const Tensor before = model.clone();
    ops::adamw_step({{&fused.w, &fused.g, &fused.m, &fused.v, &model}}, dh);
    EXPECT_TRUE(test::same_bits(model, before));
  }
  AdamWCase c;
  Tensor wrong = Tensor::zeros({2}, DType::kBF16), f16 = ops::cast(c.w, DType::kF16);
  EXPECT_NE(test::error_of([&] {
              ops::adamw_step({{&c.w, &c.g, &c.m, &c.v, &wrong}}, h);
            }).find("differ in shape"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              ops::adamw_step({{&c.w, &c.g, &c.m, &c.v, &f16}}, h);
            }).find("must be f32 or bf16"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              ops::adamw_step({{&c.w, &c.g, &c.m, &c.v, &c.w}}, h);
            }).find("shares the master's storage"),
            std::string::npos);
}

TEST(OptimKernels, FiniteGateIsOneOnlyWhenEveryValueAndTheNormAre) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  auto bits_of = [](double d) {
    Tensor t = Tensor::empty({1}, DType::kI64);
    std::memcpy(t.data(), &d, sizeof(d));
    return t;
  };
  const Tensor finite_norm = bits_of(2.5), nan_norm = bits_of(std::nan("")),
               inf_norm = bits_of(std::numeric_limits<double>::infinity());
  const std::vector<float> good = {1.f, -2.f, 3.0e38f, 0.f};
  EXPECT_EQ(ops::finite_gate(Tensor::from_floats(good, {4}), &finite_norm).item(), 1.f);
  EXPECT_EQ(ops::finite_gate(Tensor::from_floats(good, {4}), nullptr).item(), 1.f);
  EXPECT_EQ(ops::finite_gate(Tensor::from_floats(good, {4}), &nan_norm).item(), 0.f);
  EXPECT_EQ(ops::finite_gate(Tensor::from_floats(good, {4}), &inf_norm).item(), 0.f);
  for (float bad : {nan, inf, -inf}) {
    std::vector<float> v = good;
    v[2] = bad;
    EXPECT_EQ(ops::finite_gate(Tensor::from_floats(v, {4}), &finite_norm).item(), 0.f) << bad;
  }
  const std::string message =
      test::error_of([&] { ops::finite_gate(Tensor::zeros({2}, DType::kBF16), &finite_norm); });
  EXPECT_NE(message.find("values must be an f32 tensor"), std::string::npos) << message;
}

}  // namespace
}  // namespace octet
