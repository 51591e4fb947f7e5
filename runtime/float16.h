// f32 <-> bf16 / IEEE f16 conversions on raw bits, shared by host and CUDA device code; they
// match CUDA's host conversions (__float2bfloat16_rn, __float2half_rn) on every non-NaN input.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/macros.h"

namespace octet {
namespace detail {

OCTET_HD uint32_t float_to_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

OCTET_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

// Rounds the magnitude bits `a` (sign cleared, not NaN) of an f32 to nearest-even in a narrower
// binary format with kMantBits mantissa bits and exponent bias kBias, keeping IEEE-style
// subnormals. Returns the target's exponent|mantissa code without any overflow handling: codes
// past the target's largest finite value come out larger, and the caller clamps them (to max for
// saturating FP8, to inf for f16). Both paths are computed and one is selected, so the compiler
// emits conditional moves instead of branches that mispredict on mixed-magnitude data.
template <int kMantBits, int kBias>
OCTET_HD uint32_t round_magnitude_rne(uint32_t a) {
  constexpr uint32_t kNormShift = 23 - kMantBits;
  // f32 exponent field of the target's smallest normal, 2^(1 - kBias).
  constexpr uint32_t kMinNormExp = 128 - kBias;
  const uint32_t exp = a >> 23;
  const bool normal = exp >= kMinNormExp;
  // Normal: rebias the exponent in place; a carry out of the mantissa while rounding then bumps
  // the exponent, which is exactly the right result.
  const uint32_t norm = a - (static_cast<uint32_t>(127 - kBias) << 23);
  // Subnormal: the code is the value over the target's subnormal step 2^(1 - kBias - kMantBits),
  // i.e. the 24-bit significand shifted right. Shifts past 31 are clamped: any shift >= 25 already
  // rounds to 0. f32 zeros and subnormals get a wrong implicit bit, but they round to 0 anyway.
  const uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
  const int sub_shift = 151 - kBias - kMantBits - static_cast<int>(exp);
  const uint32_t v = normal ? norm : sig;
  const uint32_t shift =
      normal ? kNormShift : static_cast<uint32_t>(sub_shift < 31 ? sub_shift : 31);
  // Round half to even: add just under one half, plus one more when the kept LSB is odd.
  const uint32_t lsb = (v >> shift) & 1u;
  return (v + (1u << (shift - 1)) - 1u + lsb) >> shift;
}

}  // namespace detail

// f32 -> bf16, round to nearest even. Overflow rounds to inf as IEEE says; NaN stays a quiet NaN
// with its sign (CUDA's host path returns 0x7FFF for every NaN; both are NaN).
OCTET_HD uint16_t to_bf16(float x) {
  const uint32_t u = detail::float_to_bits(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  // Setting the quiet bit keeps a NaN whose payload lives only in the dropped low bits a NaN.
  return static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded);
}

// bf16 -> f32 is exact: bf16 is the top half of an f32.
OCTET_HD float from_bf16(uint16_t h) {
  return detail::bits_to_float(static_cast<uint32_t>(h) << 16);
}

// f32 -> IEEE binary16, round to nearest even, subnormals kept, overflow -> inf, NaN -> quiet NaN
// with its sign.
OCTET_HD uint16_t to_f16(float x) {
  const uint32_t u = detail::float_to_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t code = detail::round_magnitude_rne<10, 15>(a);
  code = code < 0x7C00u ? code : 0x7C00u;  // everything that rounds past 65504 (and inf) is inf
  return static_cast<uint16_t>(sign | (a > 0x7F800000u ? 0x7E00u : code));
}

// IEEE binary16 -> f32, exact.
OCTET_HD float from_f16(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;
  const uint32_t exp = em >> 10;
  // Normal: rebias 15 -> 127. Inf/NaN: exponent all ones, payload kept, NaNs made quiet (as a
  // hardware conversion does) so that using the result raises no invalid-operation flag.
  const uint32_t mant = em & 0x3FFu;
  const uint32_t special = 0x7F800000u | (mant << 13) | (mant != 0u ? 0x00400000u : 0u);
  const uint32_t normal_bits = exp == 31 ? special : (em << 13) + (112u << 23);
  // Subnormal (and zero): mant * 2^-24, computed in f32 where it is exact. Scaling the bits as a
  // subnormal f32 instead would break under flush-to-zero (nvcc -ftz, -ffast-math hosts).
  const float sub = static_cast<float>(em) * 0x1p-24f;
  const uint32_t bits = exp == 0 ? detail::float_to_bits(sub) : normal_bits;
  return detail::bits_to_float(sign | bits);
}

}  // namespace octet
