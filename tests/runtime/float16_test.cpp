// Hand-worked bf16 / f16 conversion cases and round trips of every code
// (fp8_exhaustive_test.cpp compares all 2^32 inputs with CUDA).
#include "runtime/float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tests/support/test_util.h"

namespace octet {
namespace {

int bf16(float x) { return to_bf16(x); }
int f16(float x) { return to_f16(x); }

using test::bits_of;
using test::float_from_bits;
using test::kInf;
using test::kNaN;

TEST(Float16, Bf16HandWorked) {
  // bf16 is the top 16 bits of an f32, rounded to nearest even on the low 16.
  EXPECT_EQ(bf16(1.f), 0x3F80);
  EXPECT_EQ(bf16(-2.f), 0xC000);
  // The bf16 ulp at 1 is 2^-7: 1 + 2^-8 ties to 1.0 (even); 1 + 3 * 2^-8 ties to 1 + 2^-6 (even).
  EXPECT_EQ(bf16(1.f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(bf16(1.f + 3 * 0x1p-8f), 0x3F82);
  EXPECT_EQ(bf16(1.f + 0x1p-8f + 0x1p-23f), 0x3F81);  // just above the tie
  // FLT_MAX is past the largest bf16 (0x7F7F) by more than half an ulp: rounds to inf.
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(bf16(kInf), 0x7F80);
  EXPECT_EQ(bf16(-kInf), 0xFF80);
  EXPECT_EQ(bf16(-0.f), 0x8000);
  // f32 subnormals round like any other bits: 0x00008000 ties to 0, 0x00018000 ties to 2.
  EXPECT_EQ(bf16(float_from_bits(0x00000001u)), 0x0000);
  EXPECT_EQ(bf16(float_from_bits(0x00008000u)), 0x0000);
  EXPECT_EQ(bf16(float_from_bits(0x00018000u)), 0x0002);
  // NaN stays a quiet NaN with its sign, even when its payload sits only in the dropped bits.
  EXPECT_EQ(bf16(kNaN), 0x7FC0);
  EXPECT_EQ(bf16(-kNaN), 0xFFC0);
  EXPECT_EQ(bf16(float_from_bits(0x7F800001u)), 0x7FC0);

  EXPECT_EQ(from_bf16(0x3F80), 1.f);
  EXPECT_EQ(from_bf16(0xC000), -2.f);
  EXPECT_EQ(from_bf16(0x7F80), kInf);
  EXPECT_EQ(bits_of(from_bf16(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isnan(from_bf16(0x7FC0)));
}

TEST(Float16, F16HandWorked) {
  // IEEE binary16: s eeeee mmmmmmmmmm, bias 15.
  EXPECT_EQ(f16(1.f), 0x3C00);
  EXPECT_EQ(f16(-2.f), 0xC000);
  // 0.1 = 1.6 * 2^-4: exponent field 11, mantissa 0.6 * 1024 = 614.4 -> 614 = 0x266.
  EXPECT_EQ(f16(0.1f), 0x2E66);
  // 1/3 = 1.333 * 2^-2: exponent field 13, mantissa 341.33 -> 341 = 0x155.
  EXPECT_EQ(f16(1.f / 3.f), 0x3555);
  // Ties to even at 1 (ulp 2^-10): 1 + 2^-11 -> 1.0; 1 + 3 * 2^-11 -> 1 + 2^-9.
  EXPECT_EQ(f16(1.f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(f16(1.f + 3 * 0x1p-11f), 0x3C02);
  // 65504 is the max; 65520 is the tie between 65504 (mantissa odd) and 65536, so it is inf.
  EXPECT_EQ(f16(65504.f), 0x7BFF);
  EXPECT_EQ(f16(std::nextafter(65520.f, 0.f)), 0x7BFF);
  EXPECT_EQ(f16(65520.f), 0x7C00);
  EXPECT_EQ(f16(1e6f), 0x7C00);
  EXPECT_EQ(f16(kInf), 0x7C00);
  EXPECT_EQ(f16(-kInf), 0xFC00);
  // Subnormals are multiples of 2^-24; 2^-25 ties to 0, 3 * 2^-25 ties to 2 * 2^-24.
  EXPECT_EQ(f16(0x1p-24f), 0x0001);
  EXPECT_EQ(f16(0x1p-25f), 0x0000);
  EXPECT_EQ(f16(-0x1p-25f), 0x8000);
  EXPECT_EQ(f16(std::nextafter(0x1p-25f, 1.f)), 0x0001);
  EXPECT_EQ(f16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(f16(1023 * 0x1p-24f), 0x03FF);     // largest subnormal
  EXPECT_EQ(f16(1023.5f * 0x1p-24f), 0x0400);  // tie with the smallest normal (even)
  EXPECT_EQ(f16(0x1p-14f), 0x0400);
  EXPECT_EQ(f16(-0.f), 0x8000);
  EXPECT_EQ(f16(1e-30f), 0x0000);
  EXPECT_EQ(f16(kNaN) & 0x7FFF, 0x7E00);
  EXPECT_EQ(f16(-kNaN), 0xFE00);

  EXPECT_EQ(from_f16(0x3C00), 1.f);
  EXPECT_EQ(from_f16(0x7BFF), 65504.f);
  EXPECT_EQ(from_f16(0x0001), 0x1p-24f);
  EXPECT_EQ(from_f16(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(from_f16(0x8001), -0x1p-24f);
  EXPECT_EQ(from_f16(0x7C00), kInf);
  EXPECT_EQ(from_f16(0xFC00), -kInf);
  EXPECT_EQ(bits_of(from_f16(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isnan(from_f16(0x7E00)));
  EXPECT_TRUE(std::isnan(from_f16(0x7C01)));
}

// Every non-NaN code survives decode + encode (the decode is exact and the encode then exact too).
TEST(Float16, RoundTripEveryCode) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t code = static_cast<uint16_t>(i);
    if ((i & 0x7FFF) <= 0x7F80) {
      ASSERT_EQ(bf16(from_bf16(code)), static_cast<int>(i)) << "bf16 code " << i;
    } else {
      ASSERT_TRUE(std::isnan(from_bf16(code))) << "bf16 code " << i;
      ASSERT_GT(bf16(from_bf16(code)) & 0x7FFF, 0x7F80) << "bf16 code " << i;
    }
    if ((i & 0x7FFF) <= 0x7C00) {
      ASSERT_EQ(f16(from_f16(code)), static_cast<int>(i)) << "f16 code " << i;
    } else {
      ASSERT_TRUE(std::isnan(from_f16(code))) << "f16 code " << i;
      ASSERT_GT(f16(from_f16(code)) & 0x7FFF, 0x7C00) << "f16 code " << i;
    }
  }
}

}  // namespace
}  // namespace octet
