// FP4 E2M1 (NVFP4's element format) on raw bits, shared by host and CUDA device code: the rule is
// CUDA's __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest), tested on every f32 input.
#pragma once

#include <cstdint>

#include "runtime/float16.h"
#include "runtime/macros.h"

namespace octet {

constexpr float kE2M1Max = 6.f;

// f32 -> E2M1 code in the low nibble: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0;
// magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6. Round to nearest, ties to the even code; everything that
// rounds past 6, and +-inf, saturates to +-6; the sign is kept (-0 and tiny negatives give 0x8).
// There is no NaN: NaN gives 0x7 (+6), as CUDA's host conversion does.
// The code counts the rounding boundaries |x| is past: each midpoint between two grid values,
// strictly past it when the lower code is even (a tie goes there), from it on when it is odd.
// Branch-free compares, so a loop of casts vectorizes.
OCTET_HD uint8_t to_e2m1(float x) {
  const uint32_t u = detail::float_to_bits(x);
  const uint32_t sign = (u >> 28) & 0x8u;
  const float a = detail::bits_to_float(u & 0x7FFFFFFFu);
  const uint32_t code = static_cast<uint32_t>(a > 0.25f) + static_cast<uint32_t>(a >= 0.75f) +
                        static_cast<uint32_t>(a > 1.25f) + static_cast<uint32_t>(a >= 1.75f) +
                        static_cast<uint32_t>(a > 2.5f) + static_cast<uint32_t>(a >= 3.5f) +
                        static_cast<uint32_t>(a > 5.f);
  return static_cast<uint8_t>(a != a ? 0x7u : sign | code);  // NaN: +6
}

// E2M1 code (low nibble) -> f32, exact.
OCTET_HD float from_e2m1(uint8_t code) {
  const uint32_t m = code & 0x7u;
  // Codes 0-1 are 0 and 0.5 (subnormal); 2-7 are (1 + m/2) * 2^(e - 1).
  const float magnitude = m < 2u ? 0.5f * static_cast<float>(m)
                                 : (1.f + 0.5f * static_cast<float>(m & 1u)) *
                                       static_cast<float>(1u << ((m >> 1) - 1u));
  return (code & 0x8u) != 0u ? -magnitude : magnitude;
}

// Two E2M1 codes in one byte, as NVFP4 stores them: element 2j in the low nibble, 2j + 1 in the
// high one.
OCTET_HD uint8_t pack_e2m1(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xFu) | ((odd & 0xFu) << 4));
}

}  // namespace octet
