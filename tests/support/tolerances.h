// The one tolerance table of the device tests (tests/devices/op_table_test.cpp, tests/cuda): how
// far a result of another backend may be from the CPU backend's, where the two do not apply the
// same IEEE operations in the same order (those are compared bit for bit). A row is the f32
// difference an op class leaves, plus one step of the format the result is stored in; the GEMM
// rows bound each element by its sum of |terms|.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/named.h"
#include "tests/support/test_util.h"

namespace octet::test {

// By the dtype a result was computed or stored in. It bounds |device - cpu|, where both backends
// have their own rounding error against the exact value.
inline Tolerance parity_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      // The same f32 formulas, but the GPU evaluates exp, tanh and rsqrt with its own few-ulp
      // routines, and reductions add in a tree instead of the CPU's order: a few ulps per
      // operation, more after cancellation in a sum. 1e-4 relative is about 800 ulps; the
      // absolute floor covers results that cancel to near zero.
      return {1e-5, 1e-4};
    case DType::kBF16:
      // Computed with bf16 operands: cuDNN's attention rounds Q, K, V and the probabilities to
      // bf16 (2^-9 relative each) through a softmax and two products of length T and D; the
      // tolerance TransformerEngine's fused-attention tests use for bf16.
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

// A tolerance widened by `factor` for results that pass through longer chains of roundings than
// one operation or one reduction: the reason is stated where it is used.
inline Tolerance scaled(Tolerance tol, double factor) {
  return {tol.abs * factor, tol.rel * factor};
}

// The classes of op, by how the backends' f32 results differ.
enum class OpClass : uint8_t {
  // A few f32 operations per element, exp, tanh, sqrt and divisions among them, or one row
  // reduction: activations, softmax, a norm's forward, dropout's scaling, the optimizer updates,
  // cross-entropy's loss, the own attention forward, cached attention, axpy.
  kPointwise,
  // Results that subtract nearly equal f32 values or sum thousands of terms: a norm's backward
  // (dx subtracts row means of dy * gamma and of dy * gamma * xhat; dgamma and dbeta sum over
  // every row), the forward of values with a large mean (every xhat moves with the mean's last
  // bit), a column sum over thousands of rows. Ten times the f32 row.
  kCancelling,
  // The own attention backward: T terms each made of two length-D dot products. Five times the
  // f32 row (a grouped key or value gradient also sums H / G heads: the case widens by that).
  kAttentionBackward,
  // cuDNN's attention, computed in bf16: the bf16 row.
  kCudnnAttention,
  // Cross-entropy's gradient: a probability over the counted rows, tiny, so the absolute floor
  // scales with it.
  kSmallGradient,
  // Sums accumulated in f64 in another order (sum of squares, gradient norms).
  kF64Sum,
};

inline constexpr Named<OpClass> kOpClassNames[] = {
    {OpClass::kPointwise, "pointwise"},
    {OpClass::kCancelling, "cancelling"},
    {OpClass::kAttentionBackward, "attention backward"},
    {OpClass::kCudnnAttention, "cuDNN attention"},
    {OpClass::kSmallGradient, "small gradient"},
    {OpClass::kF64Sum, "f64 sum"}};
inline const char* op_class_name(OpClass op_class) {
  return name_in(kOpClassNames, op_class).data();
}

// One step of `dtype` relative to a value (two roundings of f32 values a few ulps apart land at
// most one step apart), and the smallest step (subnormals), absolute. f32's own ulps are in the
// class rows.
inline double format_step(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return std::ldexp(1.0, -7);
    case DType::kF16:
      return std::ldexp(1.0, -10);
    case DType::kE4M3:
      return std::ldexp(1.0, -3);
    case DType::kE5M2:
      return std::ldexp(1.0, -2);
    default:
      return 0.0;
  }
}
inline double format_min_step(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return std::ldexp(1.0, -24);
    case DType::kE4M3:
      return std::ldexp(1.0, -9);
    case DType::kE5M2:
      return std::ldexp(1.0, -16);
    default:
      return 0.0;
  }
}

// The row of `op_class` for a result stored in `stored`.
inline Tolerance parity_tolerance(OpClass op_class, DType stored) {
  const Tolerance f32 = parity_tolerance(DType::kF32);
  Tolerance base{0.0, 0.0};
  switch (op_class) {
    case OpClass::kPointwise:
      base = f32;
      break;
    case OpClass::kCancelling:
      base = scaled(f32, 10);
      break;
    case OpClass::kAttentionBackward:
      base = scaled(f32, 5);
      break;
    case OpClass::kCudnnAttention:
      base = parity_tolerance(DType::kBF16);
      break;
    case OpClass::kSmallGradient:
      base = {1e-9, f32.rel};
      break;
    case OpClass::kF64Sum:
      base = {0.0, 1e-12};
      break;
  }
  return {base.abs + format_min_step(stored), base.rel + format_step(stored)};
}

// The GEMM rows, per output element as a multiple of sum_k |a_ik b_kj| (the sum of the absolute
// products), for a device GEMM against an f32 or exact sum of the same products:
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

// How a GEMM result stored in `out` may differ beyond the accumulation bound: per element,
// `per_magnitude` more of sum |terms|, `rel` of the larger of the two values and `abs` (in the
// stored format's units). f32: the output's own roundings (alpha, bias and accumulation each round
// once). bf16: one bf16 step where the f32 values differ slightly, plus one bf16 rounding (2^-8)
// of the terms: cuBLASLt's bf16 epilogue may round the product to bf16 before it adds C and the
// bias, where the CPU rounds once. FP8: one step of the format, and its smallest step near zero.
struct OutputRounding {
  double per_magnitude, rel, abs;
};
inline OutputRounding gemm_output_rounding(DType out) {
  switch (out) {
    case DType::kF32:
      return {0.0, 4 * std::ldexp(1.0, -24), 0.0};
    case DType::kBF16:
      return {std::ldexp(1.0, -8), format_step(out), 0.0};
    default:
      return {0.0, format_step(out), format_min_step(out)};
  }
}

// GELU's slope lies in [-0.13, 1.13]: inputs that differ by e give outputs within 1.13 e.
constexpr double kGeluLipschitz = 1.13;

}  // namespace octet::test
