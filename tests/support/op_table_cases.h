// The op table's shared pieces (tests/devices/op_table*_test.cpp): the inputs and records its
// cases share, the dtype axes, and each op family's rows of the table (one file per family).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/fp8_stats.h"
#include "runtime/tensor.h"
#include "tests/support/op_table.h"
#include "tests/support/test_util.h"

namespace octet::op_table {

using ops::Accumulate;
using ops::Activation;
using ops::NormKind;
using ops::Transpose;
using ops::ZeroCenteredGamma;
using test::OpClass;
using test::OpRun;
using test::random_tensor;
using test::Within;

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kF16 = DType::kF16;
inline constexpr DType kE4M3 = DType::kE4M3, kE5M2 = DType::kE5M2;

// The dtype axes of the table's rows.
inline const std::vector<DType> kFloats = {kF32, kBF16, kF16};
inline const std::vector<DType> kCastInputs = {kF32, kBF16};
inline const std::vector<DType> kFp8 = {kE4M3, kE5M2};

inline std::string str(int64_t v) { return std::to_string(v); }
inline std::string name(DType d) { return std::string(dtype_name(d)); }
inline std::string hex(uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", u);
  return buf;
}

// (5, 64): every group of 4 whole; (5, 67): a tail of 3 after the groups, rows not a multiple of
// 4. Each in an aligned tensor (the kernels' vector loop) and a misaligned view (their
// one-element loop).
inline const Shape kVectorShapes[] = {{5, 64}, {5, 67}};

// Values over many magnitudes (blocks get very different scales) with the block casts' special
// cases planted: values that saturate, values that flush next to their block's amax, NaN, signed
// zeros, subnormals, and one block of zeros.
inline Tensor block_input(const Shape& shape, DType input, uint64_t seed) {
  std::vector<float> v = random_tensor(shape, kF32, seed, 1.f).to_floats();
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v[i] *= std::ldexp(1.f, static_cast<int>((i * 7919) % 31) - 15);
  const std::vector<float> planted = {1e30f,   -1e30f, kInf, -kInf, 1e-30f,
                                      -1e-25f, kNaN,   -0.f, 0.f,   3e-40f};
  for (size_t k = 0; k < planted.size() && k < n; ++k) v[k * n / planted.size()] = planted[k];
  if (n >= 64) {
    for (size_t i = n / 2; i < n / 2 + 16; ++i) v[i] = 0.f;
  }
  if (n > 2 * planted.size()) v[n - 1] = kNaN;  // in the ragged last block
  return Tensor::from_floats(v, shape, input);
}

// Ids or targets of `dtype` from values.
inline Tensor integers(const std::vector<int64_t>& v, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < v.size(); ++i)
    store_from_f32(dtype, t.data(), i, static_cast<float>(v[i]));
  return t;
}

// Every buffer of a quantized tensor (data of each usage, scale_inv, exponents or E4M3 scales, an
// NVFP4 amax) bit for bit, and its usage.
inline void record(OpRun& r, const std::string& what, const QuantizedTensor& q) {
  auto s = r.scope(what);
  r.fact("usage", static_cast<int64_t>(q.usage()));
  const std::vector<Tensor> held = q.held_tensors();
  for (size_t i = 0; i < held.size(); ++i) r.bits("buffer " + std::to_string(i), held[i]);
}

// A cast's counts, settled where the cast ran.
inline void counts(OpRun& r, FP8CastCounts& c) {
  settle_device_stats(c, nullptr);  // a device's counts are taken here
  r.fact("total", c.total);
  r.fact("saturated", c.saturated);
  r.fact("flushed", c.flushed);
}

// A delayed-scaling quantizer on the run's device, from its scale and amax history.
inline std::shared_ptr<DelayedScalingQuantizer> delayed(OpRun& r, float scale, DType fp8,
                                                        const std::vector<float>& history) {
  const Tensor h = Tensor::from_floats(history, {static_cast<int64_t>(history.size())});
  return std::make_shared<DelayedScalingQuantizer>(r.scalar(scale), r.in(h), fp8);
}

// ---- magnitudes: the sum of |terms| of each result, for the GEMM and sum rows ----

inline Tensor abs_f32(const Tensor& t) {
  std::vector<float> v = test::on_cpu(t).to_floats();
  for (float& e : v) e = std::fabs(e);
  return Tensor::from_floats(v, t.shape());
}
// factor * sum_k |op(a)_ik| |op(b)_kj| (a and b on the CPU, 2-D views; FP8 data as its code
// values), by an f32 GEMM of the absolute values: all terms positive, so within K u of exact.
inline std::vector<double> gemm_magnitude(const Tensor& a, Transpose ta, const Tensor& b,
                                          Transpose tb, double factor = 1) {
  const Tensor p = ops::gemm(abs_f32(a.flatten_2d()), ta, abs_f32(b.flatten_2d()), tb, kF32);
  std::vector<double> m;
  for (float e : p.to_floats()) m.push_back(std::fabs(factor) * e);
  return m;
}
// |bias_j| (broadcast over rows) or |old_ij| added: terms of the output's sum.
inline void add_row_terms(std::vector<double>& mag, const Tensor& bias) {
  const std::vector<float> b = test::on_cpu(bias).to_floats();
  for (size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(b[i % b.size()]);
}
inline void add_terms(std::vector<double>& mag, const Tensor& old) {
  const std::vector<float> o = test::on_cpu(old).to_floats();
  for (size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(o[i]);
}

// Each op family's rows of the table, in the order the harness lists them.
std::vector<test::OpCase> elementwise_cases();  // elementwise and reductions
std::vector<test::OpCase> fp8_cast_cases();     // per-tensor, MXFP8, blockwise, row-wise FP8
std::vector<test::OpCase> nvfp4_cases();
std::vector<test::OpCase> gemm_cases();
std::vector<test::OpCase> nn_cases();         // activations, norms, embedding, attention...
std::vector<test::OpCase> optimizer_cases();  // optimizers and scaling state

}  // namespace octet::op_table
