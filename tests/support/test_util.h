// Shared test helpers: one per-dtype tolerance table, a comparison that reports the mismatch
// count and the first mismatch, random tensors from a fixed seed, and the CUDA skip.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/fp8.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace octet::test {

struct Tolerance {
  double abs;
  double rel;
};

// Rounding of one value stored in `dtype` (half an ulp, relative), plus a small absolute floor.
inline Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {1e-6, 1e-5};
    case DType::kBF16:
      return {1e-3, 1.0 / 128};
    case DType::kF16:
      return {1e-4, 1.0 / 1024};
    case DType::kE4M3:
      return {0.0, 0.0};  // FP8 casts are compared bit for bit
    case DType::kE5M2:
      return {0.0, 0.0};
    default:
      return {0.0, 0.0};
  }
}

// A module's output under a recipe against f64 (one GEMM's worth of quantization): TE's FP8
// tolerance for the FP8 recipes; for NVFP4, E2M1's one mantissa bit (half a step is 1/6 to 1/4
// of a value) on both operands, four times FP8's.
inline Tolerance recipe_tolerance(const Recipe& recipe) {
  if (recipe.kind == RecipeKind::kNVFP4) return {0.27, 0.5};
  return {0.0675, 0.125};
}

// Passes when |got - want| <= abs + rel * |want| everywhere (NaN only matches NaN).
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<double>& want, Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!both_nan && !(err <= tol.abs + tol.rel * std::fabs(want[i]))) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements differ; first at " << first << ": got "
         << got[first] << ", want " << want[first] << " (abs " << tol.abs << ", rel " << tol.rel
         << ")";
}

inline std::vector<double> to_doubles(const Tensor& t) {
  const std::vector<float> f = t.to_floats();
  return std::vector<double>(f.begin(), f.end());
}

// Normal(0, std) values in a new CPU tensor of `dtype`, from a fixed seed.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, float std = 1.f) {
  Tensor t = Tensor::empty(shape, dtype);
  Generator gen(seed);
  gen.fill_normal(t, 0.f, std);
  return t;
}

// The same values on the host (a new storage; undefined stays undefined).
inline Tensor on_cpu(const Tensor& t) { return t.defined() ? t.to(Device::cpu()) : t; }

// The same shape, dtype and bytes (FP8 data, exponents, masks, conversions).
inline ::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (!got.defined() || !want.defined()) {
    return ::testing::AssertionFailure()
           << "undefined tensor: got " << got.defined() << ", want " << want.defined();
  }
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got << ", want " << want;
  }
  const Tensor g = on_cpu(got), w = on_cpu(want);
  const auto* pg = static_cast<const uint8_t*>(g.data());
  const auto* pw = static_cast<const uint8_t*>(w.data());
  const size_t n = g.nbytes(), es = g.element_size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (pg[i] != pw[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  uint64_t got_bits = 0, want_bits = 0;
  const size_t at = first / es * es;
  std::memcpy(&got_bits, pg + at, es);
  std::memcpy(&want_bits, pw + at, es);
  return ::testing::AssertionFailure()
         << bad << " of " << n << " bytes differ in " << want << "; first in element " << first / es
         << ": got 0x" << std::hex << got_bits << ", want 0x" << want_bits << std::dec << " ("
         << load_as_f32(g.dtype(), g.data(), first / es) << " vs "
         << load_as_f32(w.dtype(), w.data(), first / es) << ")";
}

// The message of the octet::Error that `f` throws ("" and a test failure if it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an octet::Error";
  return "";
}

inline float float_from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

// The f32 specials the cast tests feed in.
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Fills a tensor's bytes with 0xAB so a kernel that skips an element is caught.
inline void poison(Tensor& t) {
  std::vector<uint8_t> bytes(t.nbytes(), 0xAB);
  if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
}

// The FP8 cast reference: CUDA's own host conversion where the toolkit's headers exist (the
// rule octet must match bit for bit), else runtime/fp8.h (itself verified on all 2^32 inputs
// against CUDA in tests/runtime/fp8_exhaustive_test.cpp).
uint8_t reference_cast(float v, DType dtype);
// The E2M1 cast reference: CUDA's __nv_cvt_float_to_fp4(v, __NV_E2M1, cudaRoundNearest) where
// the toolkit's headers exist, else runtime/fp4.h (verified on all 2^32 inputs against CUDA).
uint8_t reference_e2m1(float v);

}  // namespace octet::test

#define OCTET_REQUIRE_CUDA()                                 \
  do {                                                       \
    if (::octet::cuda_device_count() == 0) {                 \
      GTEST_SKIP() << "skipped: " << ::octet::cuda_status(); \
    }                                                        \
  } while (0)
