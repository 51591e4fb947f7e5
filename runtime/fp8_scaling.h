// The per-tensor FP8 scale rules (delayed and current scaling), shared by the CPU (fp8_meta.cpp,
// kernels/quantizer.cpp) and the CUDA kernels (kernels/cuda/fp8_meta.cu) so that both compute
// the same scale bit for bit. Only bit tricks and correctly rounded f32 arithmetic: no library
// call whose device version could round differently from the host's.
#pragma once

#include <cfloat>
#include <cstdint>

#include "runtime/float16.h"
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

}  // namespace octet
