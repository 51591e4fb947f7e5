// f32 exp without libm: Cody-Waite range reduction and a degree-6 polynomial (within 2 ulp of
// exp on normal results). Branch-free, so CPU loops that call it vectorise (libm's expf does not
// without -ffast-math) and the CUDA kernels compute the same numbers.
#pragma once

#include <cstdint>

#include "runtime/float16.h"
#include "runtime/macros.h"

namespace octet::math {

// exp(x) in f32: +inf above ~88.72, 0 below ~-103.3 (subnormal results in between, gradual
// underflow), NaN stays NaN.
OCTET_HD float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 split in two: kLn2Hi has 9 significant bits, so n * kLn2Hi is exact for |n| <= 150.
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  // Adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits (no float-to-int
  // conversion, which is undefined for NaN and slow to vectorise).
  constexpr float kRound = 12582912.f;
  // Past these every result is inf or 0; the clamp keeps n inside [-150, 129].
  constexpr float kHi = 89.f, kLo = -104.f;
  float xc = x < kLo ? kLo : x;  // NaN compares false and passes through both clamps
  xc = xc > kHi ? kHi : xc;
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const int32_t ni = static_cast<int32_t>(detail::float_to_bits(t) - detail::float_to_bits(kRound));
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln2 / 2
  // Minimax coefficients of (exp(r) - 1 - r) / r^2 on [-ln2/2, ln2/2] (Cephes expf).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  // 2^n as two normal factors: n reaches 129 (overflow to inf) and -150 (underflow to 0), which
  // a single exponent field cannot hold.
  const int32_t half = ni / 2;
  const float s1 = detail::bits_to_float(static_cast<uint32_t>(half + 127) << 23);
  const float s2 = detail::bits_to_float(static_cast<uint32_t>(ni - half + 127) << 23);
  return p * s1 * s2;
}

// 1 / (1 + exp(-x)): 0 and 1 at the extremes, never NaN for finite x.
OCTET_HD float sigmoid(float x) { return 1.f / (1.f + exp_f32(-x)); }

}  // namespace octet::math
