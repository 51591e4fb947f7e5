// The dtype table (sizes, names, classes) and the scalar f32 conversions of every dtype, worked out
// by hand: RNE for floats, ties-to-even and saturation for integers.
#include "runtime/dtype.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace octet {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Row {
  DType dtype;
  size_t size;
  const char* name;
  bool floating, fp8;
};

// Written out by hand: the reference the runtime's table is compared with.
constexpr Row kTable[] = {
    {DType::kF32, 4, "f32", true, false},  {DType::kBF16, 2, "bf16", true, false},
    {DType::kF16, 2, "f16", true, false},  {DType::kE4M3, 1, "e4m3", true, true},
    {DType::kE5M2, 1, "e5m2", true, true}, {DType::kE8M0, 1, "e8m0", true, false},
    {DType::kI32, 4, "i32", false, false}, {DType::kI64, 8, "i64", false, false},
    {DType::kU8, 1, "u8", false, false},
};

TEST(DType, TableMatchesHandWrittenSizesNamesAndClasses) {
  ASSERT_EQ(std::size(kAllDTypes), std::size(kTable));
  std::set<DType> seen(std::begin(kAllDTypes), std::end(kAllDTypes));
  EXPECT_EQ(seen.size(), std::size(kTable)) << "kAllDTypes has duplicates";
  for (const Row& row : kTable) {
    SCOPED_TRACE(row.name);
    EXPECT_TRUE(seen.count(row.dtype));
    EXPECT_EQ(dtype_size(row.dtype), row.size);
    EXPECT_EQ(dtype_name(row.dtype), row.name);
    EXPECT_EQ(is_floating(row.dtype), row.floating);
    EXPECT_EQ(is_fp8(row.dtype), row.fp8);
    std::ostringstream out;
    out << row.dtype;
    EXPECT_EQ(out.str(), row.name);
  }
}

TEST(DType, FromNameRoundTripsAndNamesTheBadOne) {
  for (DType dtype : kAllDTypes) EXPECT_EQ(dtype_from_name(dtype_name(dtype)), dtype);
  for (const char* bad : {"fp32", "F32", "float", "", "e4m3 ", "bfloat16"}) {
    try {
      dtype_from_name(bad);
      ADD_FAILURE() << "no error for \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("unknown dtype \"") + bad + "\""));
      EXPECT_THAT(e.what(), HasSubstr("f32, bf16, f16, e4m3, e5m2, e8m0, i32, i64, u8"));
    }
  }
}

TEST(DType, UnknownCodeIsAnError) {
  const auto bogus = static_cast<DType>(200);
  EXPECT_THROW(dtype_size(bogus), Error);
  EXPECT_THROW(dtype_name(bogus), Error);
}

TEST(DType, Fp8Max) {
  EXPECT_EQ(fp8_max(DType::kE4M3), 448.f);    // 0 1111 110 = 2^8 x 1.75
  EXPECT_EQ(fp8_max(DType::kE5M2), 57344.f);  // 0 11110 11 = 2^15 x 1.75
  for (DType dtype : {DType::kF32, DType::kE8M0, DType::kU8}) {
    try {
      fp8_max(dtype);
      ADD_FAILURE() << "no error for " << dtype;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("dtype ") + std::string(dtype_name(dtype)) +
                                      " is not an FP8 format"));
    }
  }
}

// Stores `in` as element 2 of a poisoned 4-element buffer, checks that the neighbours kept their
// poison, and returns the element's bytes (little endian, zero-extended) and its value read back.
struct Stored {
  uint64_t bits;
  float value;
};

Stored store_and_load(DType dtype, float in) {
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> buffer(4 * size, 0xA5);
  store_from_f32(dtype, buffer.data(), 2, in);
  for (size_t i = 0; i < buffer.size(); ++i) {
    if (i / size != 2) {
      EXPECT_EQ(buffer[i], 0xA5) << dtype << ": byte " << i << " overwritten";
    }
  }
  Stored s{0, load_as_f32(dtype, buffer.data(), 2)};
  std::memcpy(&s.bits, buffer.data() + 2 * size, size);
  return s;
}

float round_trip(DType dtype, float in) { return store_and_load(dtype, in).value; }
uint64_t bits_of(DType dtype, float in) { return store_and_load(dtype, in).bits; }

TEST(DType, F32IsExact) {
  for (float x : {0.f, -0.f, 1.f / 3.f, -1e-40f, 3.4e38f, kInf, -kInf}) {
    uint32_t want;
    std::memcpy(&want, &x, sizeof(want));
    EXPECT_EQ(bits_of(DType::kF32, x), want) << x;
  }
  EXPECT_TRUE(std::isnan(round_trip(DType::kF32, kNaN)));
}

TEST(DType, Bf16) {
  EXPECT_EQ(bits_of(DType::kBF16, 1.f), 0x3F80u);
  EXPECT_EQ(bits_of(DType::kBF16, -2.f), 0xC000u);
  // Ulp 2^-7 in [1, 2): 1 + 2^-8 ties to even 1; 1 + 3 * 2^-8 ties to even 1 + 2^-6.
  EXPECT_EQ(round_trip(DType::kBF16, 1.00390625f), 1.f);
  EXPECT_EQ(round_trip(DType::kBF16, 1.01171875f), 1.015625f);
  EXPECT_EQ(round_trip(DType::kBF16, 3.f), 3.f);
  EXPECT_EQ(round_trip(DType::kBF16, 3.4e38f), kInf);  // past the largest bf16, 0x7F7F
  EXPECT_TRUE(std::isnan(round_trip(DType::kBF16, kNaN)));
}

TEST(DType, F16) {
  EXPECT_EQ(bits_of(DType::kF16, 1.f), 0x3C00u);
  EXPECT_EQ(bits_of(DType::kF16, -0.f), 0x8000u);
  EXPECT_EQ(bits_of(DType::kF16, 65504.f), 0x7BFFu);
  EXPECT_EQ(bits_of(DType::kF16, 65519.f), 0x7BFFu);           // below the tie 65520
  EXPECT_EQ(bits_of(DType::kF16, 65520.f), 0x7C00u);           // the tie rounds to even: inf
  EXPECT_EQ(bits_of(DType::kF16, 0x1p-24f), 0x0001u);          // smallest subnormal
  EXPECT_EQ(bits_of(DType::kF16, 0x1p-25f), 0x0000u);          // half of it ties to even 0
  EXPECT_EQ(bits_of(DType::kF16, 0x1.8p-25f), 0x0001u);        // past the tie
  EXPECT_EQ(round_trip(DType::kF16, 1.00048828125f), 1.f);     // 1 + 2^-11 ties to 1
  EXPECT_EQ(round_trip(DType::kF16, 0.1f), 0.0999755859375f);  // 1638 / 2^14
  EXPECT_TRUE(std::isnan(round_trip(DType::kF16, kNaN)));
}

TEST(DType, E4m3AndE5m2Saturate) {
  EXPECT_EQ(bits_of(DType::kE4M3, 1.f), 0x38u);
  EXPECT_EQ(bits_of(DType::kE4M3, 448.f), 0x7Eu);
  EXPECT_EQ(bits_of(DType::kE4M3, 1e6f), 0x7Eu);
  EXPECT_EQ(bits_of(DType::kE4M3, -kInf), 0xFEu);
  EXPECT_EQ(bits_of(DType::kE4M3, 0x1p-9f), 0x01u);   // smallest subnormal
  EXPECT_EQ(round_trip(DType::kE4M3, 1.0625f), 1.f);  // tie between 1 and 1.125: even
  EXPECT_TRUE(std::isnan(round_trip(DType::kE4M3, kNaN)));
  EXPECT_EQ(bits_of(DType::kE5M2, 1.f), 0x3Cu);
  EXPECT_EQ(bits_of(DType::kE5M2, 57344.f), 0x7Bu);
  EXPECT_EQ(round_trip(DType::kE5M2, -1e9f), -57344.f);
  EXPECT_EQ(round_trip(DType::kE5M2, 1.125f), 1.f);         // tie between 1 and 1.25: even
  EXPECT_EQ(round_trip(DType::kE5M2, 0x1p-16f), 0x1p-16f);  // smallest subnormal
}

TEST(DType, E8m0RoundsUpToAPowerOfTwo) {
  EXPECT_EQ(bits_of(DType::kE8M0, 1.f), 127u);
  EXPECT_EQ(bits_of(DType::kE8M0, 3.f), 129u);  // up to 4 = 2^2
  EXPECT_EQ(round_trip(DType::kE8M0, 3.f), 4.f);
  EXPECT_EQ(round_trip(DType::kE8M0, 0.3f), 0.5f);
  EXPECT_EQ(round_trip(DType::kE8M0, -8.f), 8.f);  // the sign is dropped
  EXPECT_TRUE(std::isnan(round_trip(DType::kE8M0, kNaN)));
}

TEST(DType, IntegersRoundTiesToEven) {
  const std::pair<float, float> cases[] = {
      {0.5f, 0.f},   {1.5f, 2.f},  {2.5f, 2.f},  {3.5f, 4.f},  {-0.5f, 0.f}, {-1.5f, -2.f},
      {-2.5f, -2.f}, {1.49f, 1.f}, {1.51f, 2.f}, {-7.f, -7.f}, {0.f, 0.f},   {100.f, 100.f},
  };
  for (DType dtype : {DType::kI32, DType::kI64}) {
    for (auto [in, want] : cases) EXPECT_EQ(round_trip(dtype, in), want) << dtype << " " << in;
  }
  EXPECT_EQ(round_trip(DType::kU8, 0.5f), 0.f);
  EXPECT_EQ(round_trip(DType::kU8, 1.5f), 2.f);
  EXPECT_EQ(round_trip(DType::kU8, 2.5f), 2.f);
  EXPECT_EQ(round_trip(DType::kU8, 254.5f), 254.f);
}

TEST(DType, IntegersSaturate) {
  constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
  constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();
  constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
  auto i32 = [](float x) { return static_cast<int32_t>(bits_of(DType::kI32, x)); };
  auto i64 = [](float x) { return static_cast<int64_t>(bits_of(DType::kI64, x)); };
  // 2^31 - 128 is the largest f32 below 2^31: exact. 2^31 itself is one past the max.
  EXPECT_EQ(i32(2147483520.f), 2147483520);
  EXPECT_EQ(i32(2147483648.f), kI32Max);
  EXPECT_EQ(i32(-2147483648.f), kI32Min);  // exactly the minimum
  EXPECT_EQ(i32(1e10f), kI32Max);
  EXPECT_EQ(i32(-1e10f), kI32Min);
  EXPECT_EQ(i32(kInf), kI32Max);
  EXPECT_EQ(i32(-kInf), kI32Min);
  EXPECT_EQ(i32(kNaN), 0);
  EXPECT_EQ(i64(0x1p40f), int64_t{1} << 40);
  EXPECT_EQ(i64(0x1p62f), int64_t{1} << 62);
  EXPECT_EQ(i64(0x1p63f), kI64Max);
  EXPECT_EQ(i64(-0x1p63f), kI64Min);
  EXPECT_EQ(i64(1e30f), kI64Max);
  EXPECT_EQ(i64(-kInf), kI64Min);
  EXPECT_EQ(i64(kNaN), 0);
  EXPECT_EQ(bits_of(DType::kU8, 255.f), 255u);
  EXPECT_EQ(bits_of(DType::kU8, 255.5f), 255u);  // rounds to 256, saturates
  EXPECT_EQ(bits_of(DType::kU8, 300.f), 255u);
  EXPECT_EQ(bits_of(DType::kU8, -3.f), 0u);
  EXPECT_EQ(bits_of(DType::kU8, -0.4f), 0u);
  EXPECT_EQ(bits_of(DType::kU8, kNaN), 0u);
}

TEST(DType, IntegerLoadsAreExactUpTo2Pow24) {
  const int64_t i64[] = {-(int64_t{1} << 24), 16777216, 16777217, int64_t{1} << 40};
  EXPECT_EQ(load_as_f32(DType::kI64, i64, 0), -16777216.f);
  EXPECT_EQ(load_as_f32(DType::kI64, i64, 1), 16777216.f);
  EXPECT_EQ(load_as_f32(DType::kI64, i64, 2), 16777216.f);  // 2^24 + 1 is not an f32
  EXPECT_EQ(load_as_f32(DType::kI64, i64, 3), 0x1p40f);
  const int32_t i32[] = {-5, 123456};
  EXPECT_EQ(load_as_f32(DType::kI32, i32, 1), 123456.f);
  const uint8_t u8[] = {0, 200, 255};
  EXPECT_EQ(load_as_f32(DType::kU8, u8, 2), 255.f);  // unsigned, not -1
}

}  // namespace
}  // namespace octet
