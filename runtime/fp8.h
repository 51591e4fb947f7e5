// FP8 (E4M3, E5M2) and E8M0 block-scale conversions on raw bits, shared by host and CUDA device
// code so that CPU and GPU casts agree bit for bit; the rules are CUDA's (__NV_SATFINITE).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/float16.h"
#include "runtime/macros.h"

namespace octet {

struct DeviceCastStats;  // runtime/fp8_stats.h

constexpr float kE4M3Max = 448.f;
constexpr float kE5M2Max = 57344.f;

// What FP8 casts did to their elements, summed over one or more casts (ops::quantize_fp8 and
// ops::norm_fp8 add to it when given one). The sums are exact integers so that a fraction read
// from them is reproducible run to run, whatever the thread count.
struct FP8CastCounts {
  int64_t saturated = 0;  // |x * scale| above the format's max finite value (inf included): clamped
  int64_t flushed = 0;    // x != 0 and not NaN, but fp8(x * scale) is +-0
  int64_t total = 0;      // elements cast (NaNs included)
  // Where CUDA casts count saturated and flushed elements (and a stateless slot's block scales):
  // on the device, with no wait; settle_device_stats (runtime/fp8_stats.h) adds them in when the
  // counts are taken. Null until a CUDA cast counts; `total` is always on the host.
  std::shared_ptr<DeviceCastStats> device;

  OCTET_HD FP8CastCounts& operator+=(const FP8CastCounts& o) {
    saturated += o.saturated;
    flushed += o.flushed;
    total += o.total;
    return *this;
  }
};

// f32 -> E4M3 (bias 7, no inf, 0x7F/0xFF NaN). Round to nearest even; anything that rounds past
// 448, and +-inf, saturates to +-448; underflow gives a signed zero. NaN -> 0x7F with the sign
// dropped, as CUDA's host conversion does.
OCTET_HD uint8_t to_e4m3(float x) {
  const uint32_t u = detail::float_to_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t code = detail::round_magnitude_rne<3, 7>(a);
  code = code < 0x7Eu ? code : 0x7Eu;  // 0x7F would be NaN: 464 (the tie) rounds to even 448
  return static_cast<uint8_t>(a > 0x7F800000u ? 0x7Fu : sign | code);
}

// f32 -> E5M2 (bias 15, IEEE-like). Round to nearest even; anything that rounds past 57344
// (x >= 61440), and +-inf, saturates to +-57344. NaN -> 0x7F with the sign dropped, as CUDA does.
OCTET_HD uint8_t to_e5m2(float x) {
  const uint32_t u = detail::float_to_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t code = detail::round_magnitude_rne<2, 15>(a);
  code = code < 0x7Bu ? code : 0x7Bu;
  return static_cast<uint8_t>(a > 0x7F800000u ? 0x7Fu : sign | code);
}

// E4M3 -> f32, exact. 0x7F and 0xFF give a quiet NaN carrying the code's sign.
OCTET_HD float from_e4m3(uint8_t b) {
  const uint32_t sign = (static_cast<uint32_t>(b) & 0x80u) << 24;
  const uint32_t em = b & 0x7Fu;
  // Normal: exponent rebias 7 -> 127 by adding (127 - 7) to the shifted exponent field.
  uint32_t bits = (em << 20) + (120u << 23);
  // Subnormal (and zero): mant * 2^-9, exact in f32; done as a product of normal floats so that
  // flush-to-zero modes cannot touch it.
  const float sub = static_cast<float>(em) * 0x1p-9f;
  bits = (em >> 3) == 0 ? detail::float_to_bits(sub) : bits;
  bits = em == 0x7Fu ? 0x7FC00000u : bits;
  return detail::bits_to_float(sign | bits);
}

// E5M2 -> f32, exact. E5M2 is the top byte of an IEEE half, with inf (0x7C) and NaNs (0x7D-0x7F).
OCTET_HD float from_e5m2(uint8_t b) { return from_f16(static_cast<uint16_t>(b << 8)); }

// f32 -> E8M0 scale (value 2^(e-127), 0xFF NaN), rounding the magnitude UP to a power of two:
// the smallest e with 2^(e-127) >= |x|, clamped to [0, 254]. This is CUDA's
// __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf), whose consequences are: the sign is
// ignored, zero and tiny values give 0 (2^-127), +-inf saturates to 254 (2^127), only NaN gives
// 0xFF.
OCTET_HD uint8_t to_e8m0(float x) {
  const uint32_t a = detail::float_to_bits(x) & 0x7FFFFFFFu;
  // A non-zero mantissa bumps the exponent: ceil(log2) for normal floats. Subnormal floats are
  // all below 2^-126, so they get 1 unless they are <= 2^-127 (bits 0x00400000).
  uint32_t e = (a + 0x7FFFFFu) >> 23;
  e = a <= 0x00400000u ? 0u : e;
  e = e < 254u ? e : 254u;
  return static_cast<uint8_t>(a > 0x7F800000u ? 0xFFu : e);
}

// E8M0 -> f32, exact: 2^(e-127); e = 0 is the f32 subnormal 2^-127, 0xFF is NaN.
OCTET_HD float from_e8m0(uint8_t e) {
  const uint32_t u = e;
  // 2^-127 is f32 mantissa bit 22 with a zero exponent; for 0xFF the same bit makes inf a quiet
  // NaN.
  const uint32_t extra = (u == 0u || u == 0xFFu) ? 0x00400000u : 0u;
  return detail::bits_to_float((u << 23) | extra);
}

// Decode tables for CPU kernels: one load per element instead of the select chain above. Plain
// host functions, deliberately not hidden behind !__CUDA_ARCH__: nvcc's device pass also parses
// the host code of a .cu file, so hiding them would break host callers there, while a device
// caller still gets a clear "host function called from device" error.
namespace detail {
template <float (*kDecode)(uint8_t)>
const float* decode_table() {
  static const struct Table {
    float values[256];
    Table() {
      for (int i = 0; i < 256; ++i) values[i] = kDecode(static_cast<uint8_t>(i));
    }
  } table;
  return table.values;
}
}  // namespace detail

inline const float* e4m3_to_float_table() { return detail::decode_table<from_e4m3>(); }
inline const float* e5m2_to_float_table() { return detail::decode_table<from_e5m2>(); }

}  // namespace octet
