// The harness of the CUDA tests: an operation runs on the CPU (the reference backend) and on
// cuda:0 with the same inputs, and the results are compared here, bit for bit where both backends
// apply the same rule (FP8 casts, masks, conversions, single IEEE operations), else within one
// per-dtype tolerance table. Every test starts with OCTET_REQUIRE_CUDA().
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/float8_tensor.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/quantized_tensor.h"
#include "runtime/scaled_tensor.h"
#include "runtime/tensor.h"
#include "tests/support/test_util.h"

namespace octet::test {

inline Device gpu() { return Device::cuda(0); }
// The same values on the GPU (a new storage; undefined stays undefined); test::on_cpu the other
// way.
inline Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(gpu()) : t; }

// A one-element f32 tensor (a scale, a scale_inv, an amax) on `device`.
inline Tensor scalar(float value, Device device = Device::cpu()) {
  const Tensor t = Tensor::from_floats({value}, {1});
  return device.is_cpu() ? t : t.to(device);
}

// The one tolerance table of the CUDA tests, by the dtype a result was computed or stored in. It
// bounds |cuda - cpu|, where both backends have their own rounding error against the exact value.
inline Tolerance parity_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      // The same f32 formulas, but nvcc contracts a * b + c into one FMA, the GPU evaluates exp,
      // tanh and rsqrt with its own few-ulp routines, and reductions add in a tree instead of the
      // CPU's order: a few ulps per operation, more after cancellation in a sum. 1e-4 relative is
      // about 800 ulps; the absolute floor covers results that cancel to near zero.
      return {1e-5, 1e-4};
    case DType::kBF16:
      // Computed with bf16 operands: cuDNN's attention rounds Q, K, V and the probabilities to
      // bf16 (2^-9 relative each) through a softmax and two products of length T and D; the
      // tolerance TransformerEngine's fused-attention tests use for bf16. Also covers a bf16
      // store of f32 values that differ by a few ulps (one bf16 step, 2^-7 relative).
      return {2.5e-2, 2.5e-2};
    case DType::kF16:
      // An f16 store of f32 values that differ by a few ulps: one f16 step (2^-10 relative).
      return {1e-3, 1.0 / 512};
    default:
      // FP8 data, E8M0 exponents, u8 masks and integers are compared bit for bit (same_bits):
      // both backends apply the same conversion rule (runtime/fp8.h) to the same inputs.
      return {0.0, 0.0};
  }
}

// The GEMM rows of the table, per output element as a multiple of sum_k |a_ik b_kj| (the sum of
// the absolute products), for a CUDA GEMM against an f32 or exact sum of the same products:
// - f32 and bf16 operands: both backends accumulate in f32 (a product of two bf16 values is exact
//   in f32), and any order of a length-K f32 sum is within K u (u = 2^-24) of the exact sum, so
//   two results are within 2 K u of each other (cuBLASLt's f32 compute, no TF32).
// - FP8 operands on tensor cores: Hopper's FP8 tensor cores keep about 14 bits of the running sum
//   between promotions to f32 (DeepSeek-V3 report, section 3.3.2; the forward's fast
//   accumulation does not promote at all, and the block-scaled modes promote once per 128-wide
//   K-block, where the block scales are applied); errors of ~2^-13 relative per addition add up
//   like a random walk, sqrt(K). 4 sqrt(K) 2^-13 leaves several times the worst case seen on a
//   Hopper GPU (2^-13 of the sum for K = 128; docs/perf) and still fails a wrong layout, a
//   missing scale or a missing bias by orders of magnitude. The emulation build's
//   cuBLASLt sums in f32, so there the f32 row holds (fp8_tensor_cores() is false).
inline double gemm_accumulation_bound(bool fp8_tensor_cores, int64_t k) {
  const double kd = static_cast<double>(k);
  return fp8_tensor_cores ? 4 * std::sqrt(kd) * std::ldexp(1.0, -13)
                          : 2 * kd * std::ldexp(1.0, -24);
}
// Whether cuBLASLt's FP8 GEMMs run on real tensor cores here (not in the emulation build).
constexpr bool fp8_tensor_cores() {
#if defined(OCTET_CUDA_EMULATION) && OCTET_CUDA_EMULATION
  return false;
#else
  return true;
#endif
}

// The environment variable set for one scope (tests run one at a time), the old value restored.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// A tolerance widened by `factor` for results that pass through longer chains of roundings than
// one operation or one reduction (an attention backward, a norm backward): the reason is stated
// where it is used.
inline Tolerance scaled(Tolerance tol, double factor) {
  return {tol.abs * factor, tol.rel * factor};
}

// `got` (a CUDA result, or one brought back) equals the CPU result `want` in shape and dtype and
// is within `tol` of it everywhere; equal values (infinities included) always match, NaN matches
// only NaN.
inline ::testing::AssertionResult close_to(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (!got.defined() || !want.defined()) {
    return ::testing::AssertionFailure()
           << "undefined tensor: got " << got.defined() << ", want " << want.defined();
  }
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got << ", want " << want;
  }
  std::vector<float> g = on_cpu(got).to_floats();
  std::vector<float> w = on_cpu(want).to_floats();
  // all_close measures |got - want|, which is NaN for two equal infinities: equal values are
  // taken out first.
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) g[i] = w[i] = 0.f;
  }
  return all_close(g, std::vector<double>(w.begin(), w.end()), tol);
}

// Every buffer of two quantized tensors (data of each usage, scale_inv or E8M0 exponents) bit for
// bit, and the same usages, shape and dtype.
inline ::testing::AssertionResult same_quantized(const QuantizedTensor& got,
                                                 const QuantizedTensor& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype() || got.usage() != want.usage() ||
      got.format() != want.format()) {
    return ::testing::AssertionFailure()
           << "got " << got.describe() << ", want " << want.describe();
  }
  struct Buffer {
    const char* name;
    Tensor got, want;
  };
  std::vector<Buffer> buffers;
  if (want.format() == kPerTensorFormat) {
    const auto& g = dynamic_cast<const Float8Tensor&>(got);
    const auto& w = dynamic_cast<const Float8Tensor&>(want);
    buffers.push_back({"scale_inv", g.scale_inv(), w.scale_inv()});
    if (want.has(Usage::kRowwise)) {
      buffers.push_back({"row-wise data", g.rowwise_data(), w.rowwise_data()});
    }
    if (want.has(Usage::kColumnwise)) {
      buffers.push_back({"column-wise data", g.columnwise_data(), w.columnwise_data()});
    }
  } else {
    // MXFP8, blockwise FP8, NVFP4: per direction data, scales (E8M0 exponents, f32 scale_inv,
    // E4M3 codes) and, for NVFP4, the direction's amax.
    const auto& g = dynamic_cast<const ScaledTensor&>(got);
    const auto& w = dynamic_cast<const ScaledTensor&>(want);
    if (want.has(Usage::kRowwise)) {
      buffers.push_back({"row-wise scales", g.rowwise_scales(), w.rowwise_scales()});
      buffers.push_back({"row-wise data", g.rowwise_data(), w.rowwise_data()});
      if (w.rowwise_extra().defined()) {
        buffers.push_back({"row-wise extra", g.rowwise_extra(), w.rowwise_extra()});
      }
    }
    if (want.has(Usage::kColumnwise)) {
      buffers.push_back({"column-wise scales", g.columnwise_scales(), w.columnwise_scales()});
      buffers.push_back({"column-wise data", g.columnwise_data(), w.columnwise_data()});
      if (w.columnwise_extra().defined()) {
        buffers.push_back({"column-wise extra", g.columnwise_extra(), w.columnwise_extra()});
      }
    }
  }
  for (const Buffer& b : buffers) {
    ::testing::AssertionResult r = same_bits(b.got, b.want);
    if (!r) return ::testing::AssertionFailure() << b.name << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace octet::test
