// The FP8/FP4 scale rules (delayed and current scaling; TE's blockwise FP8 and NVFP4 block
// scales), shared by the CPU and the CUDA kernels so that both compute the same scale bit for
// bit. Only bit tricks and correctly rounded f32 arithmetic: no library call whose device version
// could round differently from the host's.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "runtime/float16.h"
#include "runtime/fp4.h"
#include "runtime/fp8.h"
#include "runtime/macros.h"

namespace octet {
namespace detail {

OCTET_HD bool is_finite_f32(float x) { return (float_to_bits(x) & 0x7F800000u) != 0x7F800000u; }
OCTET_HD bool is_inf_f32(float x) { return (float_to_bits(x) & 0x7FFFFFFFu) == 0x7F800000u; }

// 2^e exactly as std::ldexp(1.f, e) gives it: f32 subnormals below 2^-126, 0 below 2^-149, inf
// above 2^127.
OCTET_HD float exp2_int(int e) {
  if (e > 127) return bits_to_float(0x7F800000u);
  if (e >= -126) return bits_to_float(static_cast<uint32_t>(e + 127) << 23);
  if (e >= -149) return bits_to_float(1u << (e + 149));
  return 0.f;
}

// a / b rounded to nearest even on both sides, whatever nvcc's -prec-div or -use_fast_math say.
OCTET_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace detail

// Delayed scaling's scale from the amax of the history window: (fp8_max / amax) / 2^margin when
// amax is finite and > 0, else the old scale is kept; an infinite result becomes FLT_MAX.
OCTET_HD float delayed_scale(float amax, float old_scale, float fp8_max, int margin) {
  if (!(detail::is_finite_f32(amax) && amax > 0.f)) return old_scale;
  const float s = detail::div_rn(detail::div_rn(fp8_max, amax), detail::exp2_int(margin));
  return detail::is_inf_f32(s) ? FLT_MAX : s;
}

// Current scaling's scale from this tensor's amax: 1 when amax is 0 or not finite, else
// fp8_max / max(amax, amax_epsilon), an infinite result FLT_MAX, and with power_2 rounded down to
// a power of two (the scale is positive and normal then, so clearing the mantissa does it).
OCTET_HD float current_scale(float amax, float fp8_max, float amax_epsilon, bool power_2) {
  if (amax == 0.f || !detail::is_finite_f32(amax)) return 1.f;
  // std::max(amax, amax_epsilon), spelled out so host and device pick the same operand.
  float scale = detail::div_rn(fp8_max, amax < amax_epsilon ? amax_epsilon : amax);
  if (detail::is_inf_f32(scale)) scale = FLT_MAX;
  if (power_2) scale = detail::bits_to_float(detail::float_to_bits(scale) & 0x7F800000u);
  return scale;
}

// 1 / scale, the scale_inv stored beside a scale, rounded to nearest even.
OCTET_HD float scale_inverse(float scale) { return detail::div_rn(1.f, scale); }

// ---- blockwise FP8 (TE's Float8BlockScaling) ----

// One block's scale from its amax (TE's compute_scale_from_amax): an amax below amax_epsilon is
// amax_epsilon; then amax inf, 0 or NaN gives 1; else fp8_max / amax, an infinite result becomes
// value_for_inf (the input dtype's largest finite value), and with power_2 it is rounded down to a
// power of two by clearing the mantissa. The block stores scale_inverse of it.
OCTET_HD float blockwise_scale(float amax, float fp8_max, float amax_epsilon, bool power_2,
                               float value_for_inf) {
  if (amax < amax_epsilon) amax = amax_epsilon;  // a NaN compares false and stays
  if (amax == 0.f || !detail::is_finite_f32(amax)) return 1.f;
  float scale = detail::div_rn(fp8_max, amax);
  if (detail::is_inf_f32(scale)) scale = value_for_inf;
  if (power_2) scale = detail::bits_to_float(detail::float_to_bits(scale) & 0xFF800000u);
  return scale;
}

// ---- NVFP4 (TE's NVFP4BlockScaling, the rules of TE 2.14 and later) ----

// The per-tensor level, from the tensor's amax: encode = 6 * e4m3_max / amax (e4m3_max 448, the
// largest E4M3 block scale, so 2688 = 448 * 6; 256 under 4over6, which leaves a block scale room
// to grow 1.5x), FLT_MAX when that overflows, 1 for an amax of 0 or inf; decode = 1 / encode; the
// block multiplier = encode * RN(1/6).
struct NVFP4GlobalScale {
  float encode;
  float decode;
  float multiplier;
};
OCTET_HD NVFP4GlobalScale nvfp4_global_scale(float amax, float e4m3_max = kE4M3Max) {
  float encode = detail::div_rn(e4m3_max * kE2M1Max, amax);
  encode = encode > FLT_MAX ? FLT_MAX : encode;
  if (amax == 0.f || encode == 0.f || encode != encode) encode = 1.f;
  const float rcp6 = detail::bits_to_float(0x3E2AAAABu);  // RN(1 / 6)
  return {encode, detail::div_rn(1.f, encode), encode * rcp6};
}

// A block's E4M3 scale code from its amax: e4m3(min(block_amax * multiplier, FLT_MAX)).
OCTET_HD uint8_t nvfp4_block_scale(float block_amax, float multiplier) {
  float sd = block_amax * multiplier;
  sd = sd > FLT_MAX ? FLT_MAX : sd;
  return to_e4m3(sd);
}

// What the elements of a block with scale code `sf` are multiplied by before the E2M1 cast:
// min(1 / (sf * decode), FLT_MAX); a zero scale gives FLT_MAX (its elements saturate to +-6).
OCTET_HD float nvfp4_block_encode(uint8_t sf, float decode) {
  const float enc = detail::div_rn(1.f, from_e4m3(sf) * decode);
  return enc > FLT_MAX ? FLT_MAX : enc;
}

// ---- NVFP4 4over6 (TE's nvfp4_4over6: "Four Over Six", Cook et al. 2025) ----
// Each block is cast twice: with a scale mapping its amax to 6 (map6) and with one 1.5x larger,
// mapping it to 4 (map4), where E2M1's grid (3, 4) is finer relative to the block's largest
// values; the block keeps the candidate whose dequantized values are nearer x (its error: the sum
// over its elements of |d| or d^2), map6 on a tie. TE's rules, operation for operation.

// The two candidate scale codes: base = RN(RN(block_amax / 6) * encode) (TE divides here, unlike
// the plain rule's multiplier), map4 = e4m3(min(base * 1.5, 448)), map6 = e4m3(min(base, 448)).
struct NVFP4ScalePair {
  uint8_t map4;
  uint8_t map6;
};
OCTET_HD NVFP4ScalePair nvfp4_4over6_scales(float block_amax, float encode) {
  const float base = detail::div_rn(block_amax, kE2M1Max) * encode;
  const float map4 = base * 1.5f;
  // fminf's rule: min(NaN, 448) is 448.
  return {to_e4m3(map4 < kE4M3Max ? map4 : kE4M3Max), to_e4m3(base < kE4M3Max ? base : kE4M3Max)};
}

// One element's term of a candidate's error: value = RN(RN(RN(e2m1 * sf) * amax) / (6 *
// e4m3_max)), d = value - x; |d|, or d * d with `squared` (MSE). The caller sums a block's terms in
// element order.
OCTET_HD float nvfp4_4over6_term(float e2m1, float sf, float amax, float e4m3_max, float x,
                                 bool squared) {
  const float value = detail::div_rn((e2m1 * sf) * amax, kE2M1Max * e4m3_max);
  const float d = value - x;
  return squared ? d * d : (d < 0.f ? -d : d);
}

// A 16x16 tile's error from its rows' (e[0..15], overwritten): pairwise, as a 16-lane shuffle-down
// tree adds them (rows r and r + 8, then + 4, + 2, + 1).
OCTET_HD float nvfp4_4over6_tile_sum(float* e) {
  for (int half = 8; half > 0; half /= 2) {
    for (int i = 0; i < half; ++i) e[i] = e[i] + e[i + half];
  }
  return e[0];
}

// Stochastic rounding of a scaled value to E2M1 (TE's software rule, 8 random bits): v rounds up
// to the next grid point with probability (distance to the lower point) / (grid step), in steps
// of 1/256, saturating at 6; NaN gives +6.
// u * step is exact (8 bits times a power of two), so a + u * step rounds once, as TE's fma does;
// t / st is exact too (a power of two), so it is a product with 1 / st. No branches: a loop of
// these vectorizes.
OCTET_HD uint8_t e2m1_stochastic(float v, uint32_t random_bits) {
  const float u = static_cast<float>(random_bits & 0xFFu) * (1.f / 256.f);
  const float a = v < 0.f ? -v : v;
  const float step = a >= 4.f ? 2.f : (a >= 2.f ? 1.f : 0.5f);
  const float t = a + u * step;
  const float inv_st = t >= 4.f ? 0.5f : (t >= 2.f ? 1.f : 2.f);
  float q = floorf(t * inv_st) / inv_st;
  q = q < kE2M1Max ? q : kE2M1Max;
  const uint8_t code = to_e2m1(v < 0.f || (v == 0.f && detail::float_to_bits(v) >> 31) ? -q : q);
  return v != v ? uint8_t{0x7u} : code;
}

}  // namespace octet
