// Inputs for the block-scaled casts' tests (tests/kernels/mxfp8_test.cpp, the op table): values
// whose blocks get very different scales, with the values a block cast must handle planted.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"
#include "tests/support/test_util.h"

namespace octet::test {

// Values whose magnitude changes from 32-block to 32-block in both directions (2^-40 .. 2^40), plus
// a zero block, a block with +-inf, a block with NaN and a block of subnormals where they fit.
inline Tensor mixed_magnitudes(const Shape& shape, DType input, uint64_t seed) {
  std::vector<float> v = random_tensor(shape, DType::kF32, seed).to_floats();
  const int64_t cols = shape.back();
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / cols, c = static_cast<int64_t>(i) % cols;
    v[i] = std::ldexp(v[i], static_cast<int>((r / 32 * 13 + r * 5 + c / 32 * 7) % 81) - 40);
  }
  if (v.size() >= 4 * 32) {
    for (size_t i = 0; i < 32; ++i) v[i] = 0.f;
    v[32 + 3] = kInf;
    v[64 + 9] = -kInf;
    v[96 + 1] = kNaN;
  }
  if (v.size() >= 6 * 32) {
    for (size_t i = 128; i < 160; ++i) v[i] = 1e-40f * static_cast<float>(i - 140);
  }
  // Block maxima of exactly fp8_max times a power of two: the quotient is an exact power of two
  // and must not round up (a multiply by an inexact 1/fp8_max would).
  if (v.size() >= 8 * 32) {
    v[160 + 5] = -448.f * 0x1p-3f;
    v[192 + 30] = 57344.f * 0x1p5f;
  }
  return Tensor::from_floats(v, shape, input);
}

}  // namespace octet::test
