// Hand-worked FP8 / E8M0 conversion cases, round trips of every code, and a brute-force
// nearest-value reference; runs without the CUDA headers (fp8_exhaustive_test.cpp compares with
// CUDA).
#include "runtime/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "tests/support/test_util.h"

namespace octet {
namespace {

// Codes as int so that failures print numbers, not characters.
int e4m3(float x) { return to_e4m3(x); }
int e5m2(float x) { return to_e5m2(x); }
int e8m0(float x) { return to_e8m0(x); }

using test::bits_of;
using test::float_from_bits;
using test::kInf;
using test::kNaN;

TEST(Fp8, E4m3HandWorked) {
  // E4M3: s eeee mmm, bias 7. 1.0 = 2^0 -> exponent field 7: 0 0111 000.
  EXPECT_EQ(e4m3(1.f), 0x38);
  EXPECT_EQ(e4m3(-1.f), 0xB8);
  // 448 = 1.75 * 2^8: exponent field 15, mantissa 110. The largest finite value (111 is NaN).
  EXPECT_EQ(e4m3(448.f), 0x7E);
  EXPECT_EQ(e4m3(kE4M3Max), 0x7E);
  // 464 is halfway between 448 (mantissa 110, even) and 480 (the NaN code): ties to 448.
  EXPECT_EQ(e4m3(464.f), 0x7E);
  // Past the tie, 480 and beyond saturate to +-448 instead of becoming NaN.
  EXPECT_EQ(e4m3(std::nextafter(464.f, 1e9f)), 0x7E);
  EXPECT_EQ(e4m3(480.f), 0x7E);
  EXPECT_EQ(e4m3(1e30f), 0x7E);
  EXPECT_EQ(e4m3(-500.f), 0xFE);
  EXPECT_EQ(e4m3(kInf), 0x7E);
  EXPECT_EQ(e4m3(-kInf), 0xFE);
  // 0.1 = 1.6 * 2^-4: exponent field 3, mantissa 0.6 * 8 = 4.8 -> 5: 0 0011 101.
  EXPECT_EQ(e4m3(0.1f), 0x1D);
  // Ties to even in the normal range (ulp at 1 is 1/8): 1.0625 lies between 1.0 (mantissa 000)
  // and 1.125 (001) -> 1.0; 1.1875 between 1.125 (001) and 1.25 (010) -> 1.25.
  EXPECT_EQ(e4m3(1.0625f), 0x38);
  EXPECT_EQ(e4m3(1.1875f), 0x3A);
  EXPECT_EQ(e4m3(std::nextafter(1.0625f, 2.f)), 0x39);  // just above the tie rounds up
  // 1.9375 is between 1.875 (111, odd) and 2.0: rounding carries into the exponent, 0 1000 000.
  EXPECT_EQ(e4m3(1.9375f), 0x40);
  // Subnormals are multiples of 2^-9 = 0.001953125 (exponent field 0).
  EXPECT_EQ(e4m3(0.001953125f), 0x01);
  EXPECT_EQ(e4m3(-0.001953125f), 0x81);
  // 2^-10 is half the smallest subnormal: ties to even 0; anything above rounds to 2^-9.
  EXPECT_EQ(e4m3(0x1p-10f), 0x00);
  EXPECT_EQ(e4m3(-0x1p-10f), 0x80);
  EXPECT_EQ(e4m3(std::nextafter(0x1p-10f, 1.f)), 0x01);
  // Ties to even among subnormals: 1.5 * 2^-9 -> 2 * 2^-9; 2.5 * 2^-9 -> 2 * 2^-9.
  EXPECT_EQ(e4m3(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(e4m3(5 * 0x1p-10f), 0x02);
  // 7.5 * 2^-9 is between the largest subnormal 7 * 2^-9 and the smallest normal 2^-6 = 8 * 2^-9.
  EXPECT_EQ(e4m3(15 * 0x1p-10f), 0x08);
  EXPECT_EQ(e4m3(0x1p-6f), 0x08);
  // Underflow keeps the sign; so does -0.
  EXPECT_EQ(e4m3(1e-30f), 0x00);
  EXPECT_EQ(e4m3(-1e-30f), 0x80);
  EXPECT_EQ(e4m3(float_from_bits(0x80000001u)), 0x80);  // -smallest f32 subnormal
  EXPECT_EQ(e4m3(0.f), 0x00);
  EXPECT_EQ(e4m3(-0.f), 0x80);
  // NaN of either sign -> 0x7F (CUDA's host conversion drops the sign).
  EXPECT_EQ(e4m3(kNaN), 0x7F);
  EXPECT_EQ(e4m3(-kNaN), 0x7F);
  EXPECT_EQ(e4m3(float_from_bits(0x7F800001u)),
            0x7F);  // signalling NaN, payload in the low bit only
}

TEST(Fp8, E5m2HandWorked) {
  // E5M2: s eeeee mm, bias 15. 1.0 -> exponent field 15: 0 01111 00.
  EXPECT_EQ(e5m2(1.f), 0x3C);
  // 57344 = 1.75 * 2^15: exponent field 30, mantissa 11. 0x7C is inf.
  EXPECT_EQ(e5m2(57344.f), 0x7B);
  EXPECT_EQ(e5m2(kE5M2Max), 0x7B);
  // 61440 is halfway between 57344 (mantissa 11, odd) and 65536: RNE goes up, past the max, so it
  // saturates; just below the tie it rounds down to the max anyway.
  EXPECT_EQ(e5m2(61440.f), 0x7B);
  EXPECT_EQ(e5m2(std::nextafter(61440.f, 0.f)), 0x7B);
  EXPECT_EQ(e5m2(1e30f), 0x7B);
  EXPECT_EQ(e5m2(kInf), 0x7B);
  EXPECT_EQ(e5m2(-kInf), 0xFB);
  // Ties to even (ulp at 1 is 1/4): 1.125 -> 1.0 (00); 1.375 -> 1.5 (10).
  EXPECT_EQ(e5m2(1.125f), 0x3C);
  EXPECT_EQ(e5m2(1.375f), 0x3E);
  // Subnormals are multiples of 2^-16; 2^-17 is the tie with 0.
  EXPECT_EQ(e5m2(0x1p-16f), 0x01);
  EXPECT_EQ(e5m2(0x1p-17f), 0x00);
  EXPECT_EQ(e5m2(-0x1p-17f), 0x80);
  EXPECT_EQ(e5m2(std::nextafter(0x1p-17f, 1.f)), 0x01);
  EXPECT_EQ(e5m2(3 * 0x1p-17f), 0x02);
  EXPECT_EQ(e5m2(0x1p-14f), 0x04);  // smallest normal: exponent field 1
  EXPECT_EQ(e5m2(-0.f), 0x80);
  EXPECT_EQ(e5m2(kNaN), 0x7F);
  EXPECT_EQ(e5m2(-kNaN), 0x7F);
}

TEST(Fp8, DecodeHandWorked) {
  EXPECT_EQ(from_e4m3(0x38), 1.f);
  EXPECT_EQ(from_e4m3(0x7E), 448.f);
  EXPECT_EQ(from_e4m3(0xFE), -448.f);
  EXPECT_EQ(from_e4m3(0x01), 0.001953125f);
  EXPECT_EQ(from_e4m3(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(from_e4m3(0x08), 0x1p-6f);
  EXPECT_EQ(from_e4m3(0x1D), 0.1015625f);
  EXPECT_EQ(bits_of(from_e4m3(0x80)), 0x80000000u);  // -0
  EXPECT_TRUE(std::isnan(from_e4m3(0x7F)));
  EXPECT_TRUE(std::isnan(from_e4m3(0xFF)));

  EXPECT_EQ(from_e5m2(0x3C), 1.f);
  EXPECT_EQ(from_e5m2(0x7B), 57344.f);
  EXPECT_EQ(from_e5m2(0x01), 0x1p-16f);
  EXPECT_EQ(from_e5m2(0x03), 3 * 0x1p-16f);
  EXPECT_EQ(bits_of(from_e5m2(0x80)), 0x80000000u);
  EXPECT_EQ(from_e5m2(0x7C), kInf);
  EXPECT_EQ(from_e5m2(0xFC), -kInf);
  for (int code : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) {
    EXPECT_TRUE(std::isnan(from_e5m2(static_cast<uint8_t>(code)))) << code;
  }
}

// Decoding then encoding gives the code back for every non-NaN code, both signs (-0 included).
// E5M2 inf saturates to max by design, so 0x7C/0xFC come back as 0x7B/0xFB.
TEST(Fp8, RoundTripEveryCode) {
  for (int i = 0; i < 256; ++i) {
    const uint8_t code = static_cast<uint8_t>(i);
    if ((i & 0x7F) != 0x7F) {
      EXPECT_EQ(e4m3(from_e4m3(code)), i) << "e4m3 code " << i;
    } else {
      EXPECT_EQ(e4m3(from_e4m3(code)), 0x7F) << "e4m3 NaN code " << i;
    }
    const int a = i & 0x7F;
    if (a < 0x7C) {
      EXPECT_EQ(e5m2(from_e5m2(code)), i) << "e5m2 code " << i;
    } else if (a == 0x7C) {
      EXPECT_EQ(e5m2(from_e5m2(code)), (i & 0x80) | 0x7B) << "e5m2 inf code " << i;
    } else {
      EXPECT_EQ(e5m2(from_e5m2(code)), 0x7F) << "e5m2 NaN code " << i;
    }
  }
}

TEST(Fp8, TablesMatchDecoders) {
  const float* e4m3_table = e4m3_to_float_table();
  const float* e5m2_table = e5m2_to_float_table();
  for (int i = 0; i < 256; ++i) {
    const uint8_t code = static_cast<uint8_t>(i);
    // Bitwise, so that -0 and NaN are checked too.
    EXPECT_EQ(bits_of(e4m3_table[i]), bits_of(from_e4m3(code))) << i;
    EXPECT_EQ(bits_of(e5m2_table[i]), bits_of(from_e5m2(code))) << i;
  }
}

// Independent reference: the nearest finite code by f64 distance over all positive codes, ties to
// the even code. Saturation falls out of it, since the max is the largest candidate.
int nearest_code(float x, float (*decode)(uint8_t), int max_code) {
  if (std::isnan(x)) return 0x7F;
  const double ax = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_dist = ax;
  for (int c = 1; c <= max_code; ++c) {
    const double dist = std::fabs(static_cast<double>(decode(static_cast<uint8_t>(c))) - ax);
    if (dist < best_dist || (dist == best_dist && (c & 1) == 0)) {
      best = c;
      best_dist = dist;
    }
  }
  return (std::signbit(x) ? 0x80 : 0) | best;
}

TEST(Fp8, MatchesNearestValueReferenceOnRandomInputs) {
  std::mt19937 rng(20240611);
  // Random sign and mantissa; exponents from well below the subnormals to well above the max, so
  // most draws land where rounding is non-trivial.
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7FFFFF);
  std::uniform_int_distribution<uint32_t> exponent(127 - 30, 127 + 20);
  std::uniform_int_distribution<uint32_t> sign(0, 1);
  int e4m3_bad = 0, e5m2_bad = 0;
  for (int i = 0; i < 100000; ++i) {
    const float x = float_from_bits(sign(rng) << 31 | exponent(rng) << 23 | mantissa(rng));
    if (e4m3(x) != nearest_code(x, from_e4m3, 0x7E) && e4m3_bad++ < 5) {
      ADD_FAILURE() << "e4m3(" << x << ") = " << e4m3(x) << ", want "
                    << nearest_code(x, from_e4m3, 0x7E);
    }
    if (e5m2(x) != nearest_code(x, from_e5m2, 0x7B) && e5m2_bad++ < 5) {
      ADD_FAILURE() << "e5m2(" << x << ") = " << e5m2(x) << ", want "
                    << nearest_code(x, from_e5m2, 0x7B);
    }
  }
  EXPECT_EQ(e4m3_bad, 0);
  EXPECT_EQ(e5m2_bad, 0);
}

TEST(Fp8, E8m0HandWorked) {
  // Rounds up to a power of two: 2^(e-127) >= |x|.
  EXPECT_EQ(e8m0(1.f), 127);
  EXPECT_EQ(e8m0(2.f), 128);
  EXPECT_EQ(e8m0(1.5f), 128);
  EXPECT_EQ(e8m0(std::nextafter(1.f, 2.f)), 128);
  EXPECT_EQ(e8m0(0.75f), 127);
  EXPECT_EQ(e8m0(0.5f), 126);
  // A typical MXFP8 scale: block amax 1.0 over the E4M3 max: 1/448 = 0.00223 lies in (2^-9, 2^-8].
  EXPECT_EQ(e8m0(1.f / 448.f), 127 - 8);
  // CUDA ignores the sign: -2 -> 2^1.
  EXPECT_EQ(e8m0(-2.f), 128);
  // Zero and anything up to 2^-127 give 0 (2^-127, the smallest scale); just above gives 2^-126.
  EXPECT_EQ(e8m0(0.f), 0);
  EXPECT_EQ(e8m0(-0.f), 0);
  EXPECT_EQ(e8m0(float_from_bits(0x00000001u)), 0);  // smallest f32 subnormal
  EXPECT_EQ(e8m0(0x1p-127f), 0);                     // f32 subnormal 0x00400000
  EXPECT_EQ(e8m0(float_from_bits(0x00400001u)), 1);
  EXPECT_EQ(e8m0(0x1p-126f), 1);  // FLT_MIN
  EXPECT_EQ(e8m0(std::nextafter(0x1p-126f, 1.f)), 2);
  // The top: 2^127 is code 254; bigger values and inf saturate to it (__NV_SATFINITE).
  EXPECT_EQ(e8m0(0x1p127f), 254);
  EXPECT_EQ(e8m0(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(e8m0(kInf), 254);
  EXPECT_EQ(e8m0(-kInf), 254);
  // Only NaN gives the NaN code.
  EXPECT_EQ(e8m0(kNaN), 0xFF);
  EXPECT_EQ(e8m0(-kNaN), 0xFF);

  EXPECT_EQ(from_e8m0(127), 1.f);
  EXPECT_EQ(from_e8m0(128), 2.f);
  EXPECT_EQ(from_e8m0(254), 0x1p127f);
  EXPECT_EQ(bits_of(from_e8m0(0)), 0x00400000u);  // 2^-127, an f32 subnormal
  EXPECT_EQ(from_e8m0(1), 0x1p-126f);
  EXPECT_TRUE(std::isnan(from_e8m0(0xFF)));
}

TEST(Fp8, E8m0RoundTripAndRoundsUp) {
  for (int e = 0; e < 255; ++e) {
    EXPECT_EQ(e8m0(from_e8m0(static_cast<uint8_t>(e))), e);
  }
  // For positive x the scale is the smallest power of two >= x: the code covers x and the one
  // below does not.
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(1, 0x7F7FFFFF);  // positive finite, not zero
  for (int i = 0; i < 100000; ++i) {
    const float x = float_from_bits(bits(rng));
    const int e = e8m0(x);
    if (x <= 0x1p127f) {  // above, the scale saturates at 2^127
      ASSERT_GE(from_e8m0(static_cast<uint8_t>(e)), x) << x;
    }
    if (e > 0) {
      ASSERT_LT(from_e8m0(static_cast<uint8_t>(e - 1)), x) << x;
    }
  }
}

}  // namespace
}  // namespace octet
