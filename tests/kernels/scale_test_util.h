// What the blockwise and rowwise quantizer tests share: the FP8 scale rule written again from its
// description (TE's compute_scale_from_amax), not from octet's code, and the GEMM shape rule check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/quantized.h"
#include "runtime/fp8.h"
#include "tests/support/test_util.h"

namespace octet::test {

// amax below eps is eps; amax 0, inf or NaN gives 1; else fp8_max / amax, an overflow
// `inf_value`, rounded down to a power of two when `pow2`.
inline float reference_scale(float amax, float fp8_max, bool pow2, float eps, float inf_value) {
  if (amax < eps) amax = eps;
  if (std::isinf(amax) || amax == 0.f || std::isnan(amax)) return 1.f;
  float s = fp8_max / amax;
  if (std::isinf(s)) s = inf_value;
  if (pow2) {
    int e = 0;
    std::frexp(s, &e);  // s = m * 2^e, m in [0.5, 1): round down to 2^(e - 1)
    s = std::ldexp(1.f, e - 1);
  }
  return s;
}

// A reference quantization: the FP8 bytes, the scale inverses, and how many values saturated or
// were flushed to zero.
struct ExpectedCast {
  std::vector<uint8_t> data;
  std::vector<float> scale_inv;
  int64_t saturated = 0, flushed = 0;
};

// Casts v times scale s into e.data[at] by the reference cast, counting saturations and flushes.
inline void reference_cast_into(ExpectedCast& e, size_t at, float v, float s, DType fp8) {
  const uint8_t q = reference_cast(v * s, fp8);
  e.data[at] = q;
  e.saturated += std::fabs(v * s) > fp8_max(fp8) ? 1 : 0;
  e.flushed += (v != 0.f && !std::isnan(v) && (q & 0x7F) == 0) ? 1 : 0;
}

// A (24, 40) GEMM operand of `format` is refused with its shape and the multiple-of-16 rule;
// (2, 8, 48) is supported.
inline void expect_shape_rule_names_the_shape(std::string_view format) {
  const std::string message = error_of([&] {
    ops::check_fp8_gemm_shape(format, {24, 40}, "Linear input");
  });
  EXPECT_NE(message.find("Linear input has shape (24, 40)"), std::string::npos) << message;
  EXPECT_NE(message.find("multiples of 16"), std::string::npos) << message;
  EXPECT_TRUE(ops::fp8_gemm_shape_supported(format, {2, 8, 48}));
}

}  // namespace octet::test
