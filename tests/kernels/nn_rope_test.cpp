// Rotary positions and grouped-query heads (ops::pack_heads) against an f64 reference written out
// here from Hugging Face's Llama definition (rotate_half, repeat_kv), the backward against the
// reference's transpose, the table against cos/sin of t / theta^(2i/D), bf16 inputs, and bad
// shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/nn.h"
#include "kernels/ops.h"
#include "tests/kernels/nn_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ::testing::HasSubstr;

struct Dims {
  int64_t B, T, H, G, D;
};

// packed (B, T, 3, H, D) in f64 from qkv (B, T, H + 2G, D) and the table (rows t: D/2 cos, D/2
// sin).
std::vector<double> reference_pack(const Dims& s, const std::vector<float>& qkv,
                                   const std::vector<float>& table, bool rotate) {
  std::vector<double> out(static_cast<size_t>(s.B * s.T * 3 * s.H * s.D));
  const int64_t half = s.D / 2, rep = s.H / s.G;
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t t = 0; t < s.T; ++t) {
      const float* x = qkv.data() + (b * s.T + t) * (s.H + 2 * s.G) * s.D;
      double* y = out.data() + (b * s.T + t) * 3 * s.H * s.D;
      for (int64_t part = 0; part < 3; ++part) {
        for (int64_t h = 0; h < s.H; ++h) {
          const int64_t src = part == 0 ? h : part == 1 ? s.H + h / rep : s.H + s.G + h / rep;
          for (int64_t d = 0; d < s.D; ++d) {
            double v = x[src * s.D + d];
            if (rotate && part < 2) {
              // q * cos + rotate_half(q) * sin, rotate_half(q) = (-q[half:], q[:half]).
              const int64_t i = d < half ? d : d - half;
              const double c = table[static_cast<size_t>(t * s.D + i)];
              const double sn = table[static_cast<size_t>(t * s.D + half + i)];
              const double other = d < half ? -static_cast<double>(x[src * s.D + d + half])
                                            : static_cast<double>(x[src * s.D + d - half]);
              v = v * c + other * sn;
            }
            y[(part * s.H + h) * s.D + d] = v;
          }
        }
      }
    }
  }
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

TEST(PackHeads, MatchesTheReferenceWithAndWithoutRotation) {
  for (const Dims& s :
       {Dims{2, 5, 4, 2, 8}, Dims{1, 7, 6, 3, 4}, Dims{3, 3, 4, 4, 6}, Dims{1, 9, 8, 1, 16}}) {
    SCOPED_TRACE(testing::Message()
                 << s.B << "x" << s.T << " H " << s.H << " G " << s.G << " D " << s.D);
    const Tensor qkv = test::random_tensor({s.B, s.T, (s.H + 2 * s.G) * s.D}, DType::kF32, 11);
    const Tensor table = ops::rope_table(s.T + 3, s.D, 10000.0);
    for (const bool rotate : {false, true}) {
      test::recycle_poisoned(static_cast<size_t>(s.B * s.T * 3 * s.H * s.D) * 4);
      const Tensor packed = ops::pack_heads(qkv, s.H, s.G, rotate ? table : Tensor());
      const std::vector<double> want =
          reference_pack(s, qkv.to_floats(), table.to_floats(), rotate);
      const std::vector<float> got = packed.to_floats();
      ASSERT_EQ(got.size(), want.size());
      // Each rotated value is two rounded products and a rounded sum: within 2 ulps of the
      // pair's magnitude; copies are exact.
      const double tol = rotate ? 4 * 0x1p-24 * 2 * max_abs(qkv.to_floats()) : 0.0;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol) << "element " << i << (rotate ? " rotated" : " copied");
    }
  }
}

TEST(PackHeads, BackwardIsTheTransposeOfTheForward) {
  // <pack(x), dy> = <x, pack_backward(dy)> for every x, dy: the backward is the forward's
  // adjoint, each repeated head's gradients summed and rotated back.
  const Dims s{2, 6, 6, 2, 8};
  const Tensor table = ops::rope_table(s.T, s.D, 500000.0);
  for (const bool rotate : {false, true}) {
    const Tensor rope = rotate ? table : Tensor();
    const Tensor x = test::random_tensor({s.B, s.T, (s.H + 2 * s.G) * s.D}, DType::kF32, 21);
    const Tensor dy = test::random_tensor({s.B, s.T, 3 * s.H * s.D}, DType::kF32, 22);
    const std::vector<float> y = ops::pack_heads(x, s.H, s.G, rope).to_floats();
    const std::vector<float> dx = ops::pack_heads_backward(dy, s.H, s.G, rope).to_floats();
    const std::vector<float> xv = x.to_floats(), dyv = dy.to_floats();
    double lhs = 0, rhs = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      lhs += static_cast<double>(y[i]) * dyv[i];
      scale += std::fabs(static_cast<double>(y[i]) * dyv[i]);
    }
    for (size_t i = 0; i < dx.size(); ++i) rhs += static_cast<double>(xv[i]) * dx[i];
    EXPECT_NEAR(lhs, rhs, 1e-6 * scale) << (rotate ? "rotated" : "copied");
  }
}

TEST(PackHeads, BackwardSumsTheRepeatedHeadsInOrder) {
  // Without rotation each key/value head's gradient is the f32 sum of its group's, in head order.
  const Dims s{1, 2, 4, 1, 2};
  const Tensor dy = test::random_tensor({s.B, s.T, 3 * s.H * s.D}, DType::kF32, 31);
  const std::vector<float> d = dy.to_floats();
  const std::vector<float> dx = ops::pack_heads_backward(dy, s.H, s.G, Tensor()).to_floats();
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t part = 1; part <= 2; ++part) {
      for (int64_t k = 0; k < s.D; ++k) {
        float sum = d[static_cast<size_t>(t * 3 * s.H * s.D + part * s.H * s.D + k)];
        for (int64_t h = 1; h < s.H; ++h)
          sum += d[static_cast<size_t>(t * 3 * s.H * s.D + (part * s.H + h) * s.D + k)];
        EXPECT_EQ(dx[static_cast<size_t>(t * (s.H + 2) * s.D + (s.H + part - 1) * s.D + k)], sum);
      }
    }
  }
}

TEST(RopeHeads, RotatesWithoutRepeatingAsTheReference) {
  // rope_heads keeps (B, T, H + 2G, D): query head h, key head g and value head g are the
  // reference's packed query h and its key and value at the group's first query head g * H/G.
  for (const Dims& s : {Dims{2, 5, 4, 2, 8}, Dims{1, 7, 6, 3, 4}, Dims{1, 9, 8, 1, 16}}) {
    SCOPED_TRACE(testing::Message() << "H " << s.H << " G " << s.G << " D " << s.D);
    const Tensor qkv = test::random_tensor({s.B, s.T, (s.H + 2 * s.G) * s.D}, DType::kF32, 13);
    const Tensor table = ops::rope_table(s.T, s.D, 10000.0);
    const std::vector<float> got = ops::rope_heads(qkv, s.H, s.G, table).to_floats();
    const std::vector<double> want = reference_pack(s, qkv.to_floats(), table.to_floats(), true);
    ASSERT_EQ(got.size(), qkv.to_floats().size());
    const double tol = 4 * 0x1p-24 * 2 * max_abs(qkv.to_floats());
    const int64_t rep = s.H / s.G, slots = s.H + 2 * s.G;
    for (int64_t r = 0; r < s.B * s.T; ++r) {
      for (int64_t slot = 0; slot < slots; ++slot) {
        const int64_t packed_head = slot < s.H         ? slot
                                    : slot < s.H + s.G ? s.H + (slot - s.H) * rep
                                                       : 2 * s.H + (slot - s.H - s.G) * rep;
        for (int64_t d = 0; d < s.D; ++d) {
          ASSERT_NEAR(got[static_cast<size_t>((r * slots + slot) * s.D + d)],
                      want[static_cast<size_t>((r * 3 * s.H + packed_head) * s.D + d)],
                      slot >= s.H + s.G ? 0.0 : tol)
              << "row " << r << " slot " << slot << " d " << d;
        }
      }
    }
    // Repeating the rotated heads afterwards is pack_heads, bit for bit.
    EXPECT_TRUE(test::bitwise_equal(
        ops::pack_heads(ops::rope_heads(qkv, s.H, s.G, table), s.H, s.G, Tensor()),
        ops::pack_heads(qkv, s.H, s.G, table)));
  }
}

TEST(RopeHeads, BackwardIsTheTransposeOfTheForward) {
  const Dims s{2, 6, 6, 2, 8};
  const Tensor rope = ops::rope_table(s.T, s.D, 500000.0);
  const Tensor x = test::random_tensor({s.B, s.T, (s.H + 2 * s.G) * s.D}, DType::kF32, 23);
  const Tensor dy = test::random_tensor({s.B, s.T, (s.H + 2 * s.G) * s.D}, DType::kF32, 24);
  const std::vector<float> y = ops::rope_heads(x, s.H, s.G, rope).to_floats();
  const std::vector<float> dx = ops::rope_heads_backward(dy, s.H, s.G, rope).to_floats();
  const std::vector<float> xv = x.to_floats(), dyv = dy.to_floats();
  double lhs = 0, rhs = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    lhs += static_cast<double>(y[i]) * dyv[i];
    rhs += static_cast<double>(xv[i]) * dx[i];
    scale += std::fabs(static_cast<double>(y[i]) * dyv[i]);
  }
  EXPECT_NEAR(lhs, rhs, 1e-6 * scale);
  EXPECT_THAT(test::error_of([&] { ops::rope_heads_backward(dy, s.H, 4, rope); }),
              HasSubstr("kv_heads 4"));
}

TEST(RopeTable, HoldsTheCosineAndSineOfEachPositionsAngle) {
  const int64_t T = 40, D = 16;
  for (const double theta : {10000.0, 500000.0}) {
    const std::vector<float> t = ops::rope_table(T, D, theta).to_floats();
    for (int64_t pos = 0; pos < T; ++pos) {
      for (int64_t i = 0; i < D / 2; ++i) {
        const double angle = static_cast<double>(pos) / std::pow(theta, 2.0 * i / D);
        // The angle is an f32 product: within an ulp of the exact one (|angle| < 40).
        EXPECT_NEAR(t[static_cast<size_t>(pos * D + i)], std::cos(angle), 1e-5);
        EXPECT_NEAR(t[static_cast<size_t>(pos * D + D / 2 + i)], std::sin(angle), 1e-5);
      }
    }
  }
  EXPECT_THAT(test::error_of([] { ops::rope_table(4, 7, 10000.0); }), HasSubstr("even"));
  EXPECT_THAT(test::error_of([] { ops::rope_table(4, 8, 0.5); }), HasSubstr("theta"));
}

TEST(PackHeads, Bf16InputGivesTheF32ResultRoundedToBf16) {
  const Dims s{1, 4, 4, 2, 8};
  const Tensor x = ops::cast(
      test::random_tensor({s.B, s.T, (s.H + 2 * s.G) * s.D}, DType::kF32, 41), DType::kBF16);
  const Tensor rope = ops::rope_table(s.T, s.D, 10000.0);
  const Tensor got = ops::pack_heads(x, s.H, s.G, rope);
  ASSERT_EQ(got.dtype(), DType::kBF16);
  const Tensor want =
      ops::cast(ops::pack_heads(ops::cast(x, DType::kF32), s.H, s.G, rope), DType::kBF16);
  EXPECT_TRUE(test::bitwise_equal(got, want));
}

TEST(PackHeads, BadShapesAreClearErrors) {
  const Tensor qkv = test::random_tensor({1, 4, 8 * 8}, DType::kF32, 51);  // H 4, G 2, D 8
  EXPECT_THAT(test::error_of([&] { ops::pack_heads(qkv, 4, 3, Tensor()); }),
              HasSubstr("kv_heads 3 must divide heads 4"));
  EXPECT_THAT(test::error_of([&] { ops::pack_heads(qkv, 3, 3, Tensor()); }), HasSubstr("width 64"));
  EXPECT_THAT(test::error_of([&] { ops::pack_heads(qkv, 4, 2, ops::rope_table(3, 8, 1e4)); }),
              HasSubstr("max_len >= 4"));
  const Tensor odd = test::random_tensor({1, 4, 3 * 5}, DType::kF32, 52);  // H 1, G 1, D 5
  EXPECT_THAT(test::error_of([&] { ops::pack_heads(odd, 1, 1, ops::rope_table(4, 6, 1e4)); }),
              HasSubstr("even head dimension"));
}

}  // namespace
}  // namespace octet
