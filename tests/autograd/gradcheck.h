// Gradient checks: the analytic gradient of an autograd function (f32) against central
// differences of an independent f64 reference written in the test, and, looser, against central
// differences of the function's own f32 forward.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "tests/support/test_util.h"

namespace octet::test {

using Values = std::vector<double>;
using Function = std::function<Tensor(const std::vector<Tensor>&)>;
using Reference = std::function<Values(const std::vector<Values>&)>;

struct GradCheckOptions {
  double f64_tolerance = 2e-3;  // |analytic - numeric| <= tol * max(1, |numeric|)
  double f32_step = 1e-2;
  double f32_tolerance = 3e-2;
  double forward_tolerance = 1e-4;   // forward vs the f64 reference, relative
  size_t f32_samples = 48;           // elements per input checked against the f32 differences
  std::vector<bool> differentiable;  // per input; empty = all floating inputs
};

inline double dot(const Values& a, const Values& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline void gradcheck(const std::string& name, const std::vector<Tensor>& inputs, const Function& f,
                      const Reference& ref, GradCheckOptions opt = {}) {
  SCOPED_TRACE(name);
  std::vector<Tensor> leaves;
  std::vector<Values> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = inputs[i].clone();
    const bool diff = opt.differentiable.empty() ? is_floating(t.dtype()) : opt.differentiable[i];
    if (diff) autograd::set_requires_grad(t, true);
    values.push_back(to_doubles(t));
    leaves.push_back(t);
  }
  const Tensor y = f(leaves);
  const Values want = ref(values);
  ASSERT_EQ(static_cast<size_t>(y.numel()), want.size()) << "output size vs reference";
  double worst_forward = 0;
  const std::vector<float> yv = y.to_floats();
  for (size_t i = 0; i < want.size(); ++i) {
    worst_forward =
        std::max(worst_forward, std::fabs(yv[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
  }
  EXPECT_LE(worst_forward, opt.forward_tolerance) << "forward differs from the f64 reference";

  const Tensor cotangent = random_tensor(y.shape(), y.dtype(), 1234);
  const Values v = to_doubles(cotangent);
  autograd::backward(y, cotangent);

  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!autograd::requires_grad(leaves[i])) continue;
    SCOPED_TRACE("input #" + std::to_string(i));
    const Tensor& g = autograd::grad(leaves[i]);
    ASSERT_TRUE(g.defined()) << "no gradient reached the input";
    ASSERT_EQ(g.shape(), leaves[i].shape());
    const std::vector<float> gv = g.to_floats();

    // f64 central differences of the reference, every element.
    size_t bad = 0, first = 0;
    double first_num = 0;
    for (size_t j = 0; j < values[i].size(); ++j) {
      std::vector<Values> plus = values, minus = values;
      const double h = 1e-6 * std::max(1.0, std::fabs(values[i][j]));
      plus[i][j] += h;
      minus[i][j] -= h;
      const double numeric = (dot(ref(plus), v) - dot(ref(minus), v)) / (2 * h);
      if (!(std::fabs(gv[j] - numeric) <= opt.f64_tolerance * std::max(1.0, std::fabs(numeric)))) {
        if (bad++ == 0) {
          first = j;
          first_num = numeric;
        }
      }
    }
    EXPECT_EQ(bad, 0u) << bad << " of " << gv.size() << " gradient elements differ from f64 "
                       << "central differences; first at " << first << ": analytic " << gv[first]
                       << ", numeric " << first_num;

    // f32 central differences through the function itself, on a sample of elements.
    autograd::NoGradGuard no_grad;
    const size_t n = values[i].size();
    const size_t stride = std::max<size_t>(1, n / opt.f32_samples);
    for (size_t j = 0; j < n; j += stride) {
      std::vector<Tensor> plus = leaves, minus = leaves;
      std::vector<float> p = leaves[i].to_floats(), m = p;
      p[j] += static_cast<float>(opt.f32_step);
      m[j] -= static_cast<float>(opt.f32_step);
      plus[i] = Tensor::from_floats(p, leaves[i].shape(), leaves[i].dtype());
      minus[i] = Tensor::from_floats(m, leaves[i].shape(), leaves[i].dtype());
      const double numeric =
          (dot(to_doubles(f(plus)), v) - dot(to_doubles(f(minus)), v)) / (2 * opt.f32_step);
      EXPECT_LE(std::fabs(gv[j] - numeric), opt.f32_tolerance * std::max(1.0, std::fabs(numeric)))
          << "f32 central difference at element " << j << ": analytic " << gv[j] << ", numeric "
          << numeric;
    }
  }
}

}  // namespace octet::test
