// Quartet II's backward cast (docs/recipes.md "NVFP4's methods"): the 128-point random-sign
// Hadamard transform and MS-EDEN (E2M1 values rounded to nearest, each 1x16 block's scale
// corrected by <u, u> / <u, q(u)> and rounded stochastically to E4M3). Shared by the CPU and CUDA
// kernels so both compute the same bits (no contraction on either).
#pragma once

#include <cstdint>

#include "runtime/float16.h"
#include "runtime/fp4.h"
#include "runtime/fp8.h"
#include "runtime/macros.h"
#include "runtime/philox.h"

namespace octet::math {

inline constexpr int kRht128 = 128;
inline constexpr int kEdenBlock = 16;
// 1 / F with F = 6 / (17/16 * 0.93): a block's amax maps a little above 6, so its largest values
// saturate and the rest use more of the grid (the method's backward_scale_override).
inline constexpr float kEdenInvF = 0.1646875f;

// Sign i of the transform whose signs start at draw `offset` of `seed`'s stream: -1 when the
// draw's low bit is set.
OCTET_HD double rht128_sign(uint64_t seed, uint64_t offset, int i) {
  return (detail::philox_word(seed, offset + static_cast<uint64_t>(i)) & 1u) ? -1.0 : 1.0;
}

// One chunk of 128 values: y = H (d ⊙ x) / sqrt(128), H the Sylvester Hadamard matrix
// (H[i][j] = (-1)^popcount(i & j)), summed in f64 by 7 butterfly stages (pairs (k, k + h) for
// h = 1, 2, .., 64), scaled in f64 and rounded once to f32. `inverse`: x = d ⊙ (H y) / sqrt(128)
// (H is symmetric and H H = 128 I). A NaN output is the quiet NaN 0x7FC00000.
OCTET_HD void rht128(const float* x, const double* signs, bool inverse, float* y) {
  double v[kRht128];
  for (int i = 0; i < kRht128; ++i) v[i] = inverse ? double{x[i]} : double{x[i]} * signs[i];
  for (int h = 1; h < kRht128; h *= 2) {
    for (int j = 0; j < kRht128; j += 2 * h) {
      for (int k = j; k < j + h; ++k) {
        const double a = v[k], b = v[k + h];
        v[k] = a + b;
        v[k + h] = a - b;
      }
    }
  }
  constexpr double kScale = 0.088388347648318440550;  // 1 / sqrt(128)
  for (int i = 0; i < kRht128; ++i) {
    const double s = v[i] * kScale;
    // A NaN is the quiet NaN on every backend (payloads differ between x86 and a GPU).
    y[i] = s != s ? detail::bits_to_float(0x7FC00000u)
                  : static_cast<float>(inverse ? s * signs[i] : s);
  }
}

// A block's scale before the correction: amax / F with the mantissa cut to 4 bits (toward zero).
OCTET_HD float eden_base_scale(float block_amax) {
  return detail::bits_to_float(detail::float_to_bits(block_amax * kEdenInvF) & 0xFFF80000u);
}

// One block of 16 values (pass one of MS-EDEN): u = v * RN(1 / m) with m = eden_base_scale(amax),
// codes RNE E2M1 of u packed two to a byte into q (8 bytes, element 2j in the low nibble); returns
// the corrected scale m * <u, u> / <u, q> (sums in f32 in element order; m when <u, q> is 0; 0
// for a block of zeros). NaN is ignored by the amax and propagates through the scale.
OCTET_HD float eden_block(const float* v, uint8_t* q) {
  float amax = 0.f;
  for (int i = 0; i < kEdenBlock; ++i) {
    const float a = v[i] < 0.f ? -v[i] : v[i];
    amax = a > amax ? a : amax;
  }
  const float m = eden_base_scale(amax);
  if (m == 0.f) {
    for (int i = 0; i < kEdenBlock / 2; ++i) q[i] = 0;
    return 0.f;
  }
  const float r = 1.f / m;
  float uu = 0.f, uq = 0.f;
  uint8_t codes[kEdenBlock];
  for (int i = 0; i < kEdenBlock; ++i) {
    const float u = v[i] * r;
    codes[i] = to_e2m1(u);
    const float uu_term = u * u;
    const float uq_term = u * from_e2m1(codes[i]);
    uu = uu + uu_term;
    uq = uq + uq_term;
  }
  for (int i = 0; i < kEdenBlock; i += 2) q[i / 2] = pack_e2m1(codes[i], codes[i + 1]);
  return uq != 0.f ? m * (uu / uq) : m;
}

// t (>= 0, at most 256 here) rounded stochastically to E4M3 with the 24-bit uniform
// u = (word >> 8) * 2^-24: its neighbours lo <= t < hi, hi when u < (t - lo) / (hi - lo), so the
// expected value is t (subnormals included). NaN stays NaN.
OCTET_HD uint8_t e4m3_stochastic(float t, uint32_t word) {
  if (!(t >= 0.f)) return to_e4m3(t);
  uint8_t lo_code = to_e4m3(t);
  if (from_e4m3(lo_code) > t) --lo_code;  // positive codes count up with their values
  const float lo = from_e4m3(lo_code);
  if (lo == t) return lo_code;
  const float hi = from_e4m3(static_cast<uint8_t>(lo_code + 1));
  const float p = (t - lo) / (hi - lo);
  const float u = static_cast<float>(word >> 8) * 0x1p-24f;
  return u < p ? static_cast<uint8_t>(lo_code + 1) : lo_code;
}

// Pass two: the block scale code of corrected scale f under the tensor's decode scale g
// (g = max f / 256, so t = f / g <= 256), drawn with `word`; 0 when g is 0.
OCTET_HD uint8_t eden_scale_code(float f, float g, uint32_t word) {
  return g > 0.f ? e4m3_stochastic(f / g, word) : uint8_t{0};
}

}  // namespace octet::math
