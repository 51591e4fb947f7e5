// NVFP4 (TE's NVFP4BlockScaling) against a reference written here from TE's rules: the tensor
// scale 2688 / amax, E4M3 block scales cast with CUDA's host FP8 conversion, E2M1 elements with
// CUDA's host FP4 conversion (cuda_fp4.h); TE 2.14's discriminating vectors; 16x16 tiles; the
// Hadamard transform against an f64 matrix product; stochastic rounding's statistics and
// determinism; the GEMM against f64; 4over6's choice between map-to-4 and map-to-6 per block.
#include "kernels/nvfp4.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/fp4.h"
#include "runtime/fp8.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

constexpr int64_t kB = 16;

float bits(uint32_t u) { return test::float_from_bits(u); }

uint8_t nibble(const Tensor& data, int64_t cols, int64_t r, int64_t c) {
  const uint8_t byte = data.data_as<uint8_t>()[r * (cols / 2) + c / 2];
  return (c & 1) ? byte >> 4 : byte & 0xF;
}

struct Expected {
  std::vector<uint8_t> codes;  // one E2M1 code per element
  std::vector<uint8_t> sf;     // one E4M3 code per row and block
  float amax = 0;
  int64_t saturated = 0, flushed = 0;  // filled by reference_4over6 only
};

// An Expected sized for x (rows, cols) with its amax (NaNs left out).
Expected sized_for(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Expected e{std::vector<uint8_t>(x.size()),
             std::vector<uint8_t>(static_cast<size_t>(rows * (cols / kB)))};
  for (float v : x) {
    if (!std::isnan(v)) e.amax = std::max(e.amax, std::fabs(v));
  }
  return e;
}

// The tensor's encode scale, 6 * e4m3_max / amax: FLT_MAX at most, 1 for an amax of 0.
float tensor_encode(float amax, float e4m3_max) {
  float s_enc = (e4m3_max * 6.f) / amax;
  s_enc = std::min(s_enc, FLT_MAX);
  if (amax == 0.f || s_enc == 0.f) s_enc = 1.f;
  return s_enc;
}

// The amax of the block (band 1) or tile (band 16) at (r0, c0), NaNs left out.
float block_amax(const std::vector<float>& x, int64_t cols, int64_t r0, int64_t c0, int64_t band) {
  float bamax = 0.f;
  for (int64_t r = r0; r < r0 + band; ++r) {
    for (int64_t c = c0; c < c0 + kB; ++c) {
      const float a = std::fabs(x[static_cast<size_t>(r * cols + c)]);
      if (!std::isnan(a)) bamax = std::max(bamax, a);
    }
  }
  return bamax;
}

// TE's cast of x (rows, cols), 1x16 blocks or 16x16 tiles, in plain f32 arithmetic.
Expected reference(const std::vector<float>& x, int64_t rows, int64_t cols, bool tiles) {
  Expected e = sized_for(x, rows, cols);
  const float s_enc = tensor_encode(e.amax, 448.f);
  const float s_dec = 1.f / s_enc;
  const float mult = s_enc * (1.f / 6.f);
  const int64_t band = tiles ? kB : 1;
  for (int64_t r0 = 0; r0 < rows; r0 += band) {
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      const float bamax = block_amax(x, cols, r0, c0, band);
      const uint8_t sf = test::reference_cast(std::min(bamax * mult, FLT_MAX), DType::kE4M3);
      const float enc = std::min(1.f / (from_e4m3(sf) * s_dec), FLT_MAX);
      for (int64_t r = r0; r < r0 + band; ++r) {
        e.sf[static_cast<size_t>(r * (cols / kB) + c0 / kB)] = sf;
        for (int64_t c = c0; c < c0 + kB; ++c) {
          e.codes[static_cast<size_t>(r * cols + c)] =
              test::reference_e2m1(x[static_cast<size_t>(r * cols + c)] * enc);
        }
      }
    }
  }
  return e;
}

struct Cast {
  Tensor data, scales, amax;
};
Cast cast(const std::vector<float>& x, int64_t rows, int64_t cols, const ops::NVFP4Cast& c) {
  Cast out{Tensor::empty(nvfp4_data_shape(rows, cols), DType::kU8),
           Tensor::empty(nvfp4_scale_shape(rows, cols), DType::kE4M3),
           Tensor::empty({1}, DType::kF32)};
  test::poison(out.data);
  test::poison(out.scales);
  ops::quantize_nvfp4(Tensor::from_floats(x, {rows, cols}), c, out.data, out.scales, out.amax);
  return out;
}

::testing::AssertionResult matches(const Cast& got, const Expected& want, int64_t rows,
                                   int64_t cols) {
  if (got.amax.item() != want.amax) {
    return ::testing::AssertionFailure() << "amax " << got.amax.item() << " != " << want.amax;
  }
  const int64_t stride = got.scales.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / kB; ++b) {
      const uint8_t g = got.scales.data_as<uint8_t>()[r * stride + b];
      if (g != want.sf[static_cast<size_t>(r * (cols / kB) + b)]) {
        return ::testing::AssertionFailure()
               << "scale (" << r << ", " << b << "): 0x" << std::hex << int{g} << " != 0x"
               << int{want.sf[static_cast<size_t>(r * (cols / kB) + b)]};
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      if (nibble(got.data, cols, r, c) != want.codes[static_cast<size_t>(r * cols + c)]) {
        return ::testing::AssertionFailure()
               << "element (" << r << ", " << c << "): " << int{nibble(got.data, cols, r, c)}
               << " != " << int{want.codes[static_cast<size_t>(r * cols + c)]};
      }
    }
  }
  // The layout's padding is zero.
  for (int64_t i = rows * stride; i < got.scales.numel(); ++i) {
    if (got.scales.data_as<uint8_t>()[i] != 0) return ::testing::AssertionFailure() << "padding";
  }
  return ::testing::AssertionSuccess();
}

// Magnitudes that vary by 2^+-12 from block to block, a zero block, a NaN, and a block whose
// amax is too small for its E4M3 scale (it becomes 0: TE's values then saturate to +-6 codes).
std::vector<float> mixed(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v = test::random_tensor({rows, cols}, DType::kF32, seed).to_floats();
  for (int64_t i = 0; i < rows * cols; ++i) {
    v[static_cast<size_t>(i)] =
        std::ldexp(v[static_cast<size_t>(i)], static_cast<int>((i / kB * 5) % 25) - 12);
  }
  for (int64_t c = 0; c < kB; ++c) v[static_cast<size_t>(c)] = 0.f;
  v[static_cast<size_t>(cols + 3)] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t c = 0; c < kB; ++c) v[static_cast<size_t>(2 * cols + c)] = c == 1 ? 1e-30f : 0.f;
  return v;
}

TEST(NVFP4Cast, OneByOneSixteenBlocksMatchTheReference) {
  const int64_t rows = 48, cols = 96;
  const std::vector<float> x = mixed(rows, cols, 3);
  EXPECT_TRUE(matches(cast(x, rows, cols, {}), reference(x, rows, cols, false), rows, cols));
}

TEST(NVFP4Cast, SixteenBySixteenTilesMatchTheReference) {
  const int64_t rows = 64, cols = 48;
  const std::vector<float> x = mixed(rows, cols, 4);
  ops::NVFP4Cast c;
  c.tiles_2d = true;
  EXPECT_TRUE(matches(cast(x, rows, cols, c), reference(x, rows, cols, true), rows, cols));
}

TEST(NVFP4Cast, VectorsThatTellTe214FromEarlierVersions) {
  // (tensor amax, block amax) -> E4M3 block scale: TE >= 2.14 folds 1/6 into the tensor
  // multiplier (block * RN(enc * RN(1/6))); TE <= 2.13 divided the block amax by 6 first.
  const struct {
    uint32_t tensor, block;
    float want_new, want_old;
  } cases[] = {{0x446f0239u, 0x43911cc8u, 144.f, 128.f}, {0x44080b9fu, 0x4072f030u, 3.25f, 3.f}};
  // (16 rows, the shape rule's minimum; only row 0 holds values.)
  for (const auto& k : cases) {
    std::vector<float> x(kB * 2 * kB, 0.f);
    x[0] = bits(k.block);
    x[kB] = bits(k.tensor);
    const Cast got = cast(x, kB, 2 * kB, {});
    EXPECT_EQ(from_e4m3(got.scales.data_as<uint8_t>()[0]), k.want_new) << std::hex << k.tensor;
    EXPECT_NE(k.want_new, k.want_old);
  }
  // The plain case: tensor amax 2688 gives the tensor scale 1; a block with amax 12 gets scale 2;
  // 12 -> 6 (code 7), 5 -> 2.5, a tie between 2 and 3, -> 2 (the even code 4).
  std::vector<float> x(kB * 2 * kB, 0.f);
  x[0] = 12.f;
  x[1] = 5.f;
  x[kB] = 2688.f;
  const Cast got = cast(x, kB, 2 * kB, {});
  EXPECT_EQ(from_e4m3(got.scales.data_as<uint8_t>()[0]), 2.f);
  EXPECT_EQ(nibble(got.data, 2 * kB, 0, 0), 7);
  EXPECT_EQ(nibble(got.data, 2 * kB, 0, 1), 4);
}

TEST(NVFP4Quantizer, TiledColumnwiseIsTheNibbleTransposeAndCanBeRebuilt) {
  const int64_t rows = 48, cols = 64;
  const Tensor w = test::random_tensor({rows, cols}, DType::kF32, 5);
  const auto q = std::make_shared<NVFP4Quantizer>(NVFP4Role::kWeight, true, true, false, Tensor());
  auto t = q->quantize(w, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
  const auto& n = dynamic_cast<const NVFP4Tensor&>(*t);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(nibble(n.columnwise_data(), rows, c, r), nibble(n.rowwise_data(), cols, r, c));
    }
  }
  auto rebuilt = q->quantize(w, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
  ops::update_usage(*rebuilt, Usage::kBoth);  // no source: 16x16 tiles transpose
  const auto& m = dynamic_cast<const NVFP4Tensor&>(*rebuilt);
  EXPECT_EQ(std::memcmp(m.columnwise_data().data(), n.columnwise_data().data(),
                        n.columnwise_data().nbytes()),
            0);
  EXPECT_EQ(std::memcmp(m.columnwise_scales().data(), n.columnwise_scales().data(),
                        n.columnwise_scales().nbytes()),
            0);
}

TEST(Hadamard16, IsTheSignedNormalisedSylvesterMatrixRoundedToBf16) {
  const Tensor x = test::random_tensor({4, 32}, DType::kF32, 6);
  const std::vector<float> xv = x.to_floats(), y = ops::hadamard16(x).to_floats();
  const uint32_t signs = 0xD7E8u;  // TE's fixed random sign vector
  for (int64_t g = 0; g < 8; ++g) {
    for (int j = 0; j < 16; ++j) {
      double want = 0;
      for (int i = 0; i < 16; ++i) {
        const double h = (__builtin_popcount(static_cast<unsigned>(i & j)) & 1) ? -1 : 1;
        const double s = (signs >> i) & 1u ? -1 : 1;
        want += xv[static_cast<size_t>(g * 16 + i)] * s * h / 4;
      }
      EXPECT_EQ(test::bits_of(y[static_cast<size_t>(g * 16 + j)]),
                test::bits_of(from_bf16(to_bf16(static_cast<float>(want)))))
          << "group " << g << " output " << j;
    }
  }
  // Orthogonal: the inverse gives x back up to the bf16 rounding of the forward.
  const std::vector<float> back = ops::hadamard16(ops::hadamard16(x), true).to_floats();
  EXPECT_TRUE(test::all_close(back, test::to_doubles(x), {1e-2, 1.0 / 128}));
}

TEST(NVFP4Gemm, WgradWithTheTransformOnBothOperandsEqualsThePlainProductInF64) {
  // wgrad: dW (N, K) = dYᵀ X over M tokens; both column-wise copies carry the transform along M,
  // which cancels. Compared with f64 of dequantized operands (without the transform the GEMM is
  // checked the same way).
  const int64_t m = 64, n = 32, k = 48;
  const Tensor dy = test::random_tensor({m, n}, DType::kF32, 7);
  const Tensor x = test::random_tensor({m, k}, DType::kF32, 8);
  for (bool rht : {false, true}) {
    const NVFP4Quantizer qg(NVFP4Role::kGradient, false, rht, false, Tensor());
    const NVFP4Quantizer qx(NVFP4Role::kActivation, false, rht, false, Tensor());
    auto a = qg.quantize(dy, Usage::kColumnwise, Ownership::kInternal, AmaxRecording::kSkip);
    auto b = qx.quantize(x, Usage::kColumnwise, Ownership::kInternal, AmaxRecording::kSkip);
    const std::vector<float> got =
        ops::fp8_gemm(*a, *b, ops::GemmLayout::kWgrad, DType::kF32).to_floats();
    // The operands as the GEMM sees them: column-wise values dequantized (transform kept).
    const auto& na = dynamic_cast<const NVFP4Tensor&>(*a);
    const auto& nb = dynamic_cast<const NVFP4Tensor&>(*b);
    const std::vector<float> av =
        ops::dequantize_nvfp4(na.columnwise_data(), na.columnwise_scales(), na.columnwise_extra(),
                              n, m, DType::kF32)
            .to_floats();
    const std::vector<float> bv =
        ops::dequantize_nvfp4(nb.columnwise_data(), nb.columnwise_scales(), nb.columnwise_extra(),
                              k, m, DType::kF32)
            .to_floats();
    const std::vector<float> dyv = dy.to_floats(), xv = x.to_floats();
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        double want = 0, exact = 0, mag = 0;
        for (int64_t t = 0; t < m; ++t) {
          want += static_cast<double>(av[static_cast<size_t>(i * m + t)]) *
                  bv[static_cast<size_t>(j * m + t)];
          mag += std::fabs(static_cast<double>(av[static_cast<size_t>(i * m + t)]) *
                           bv[static_cast<size_t>(j * m + t)]);
          exact += static_cast<double>(dyv[static_cast<size_t>(t * n + i)]) *
                   xv[static_cast<size_t>(t * k + j)];
        }
        ASSERT_LE(std::fabs(got[static_cast<size_t>(i * k + j)] - want), 1e-5 + 1e-4 * mag)
            << "element (" << i << ", " << j << "), rht " << rht;
        worst = std::max(worst, std::fabs(got[static_cast<size_t>(i * k + j)] - exact));
        scale = std::max(scale, std::fabs(exact));
      }
    }
    // And against the unquantized product: FP4's error, whose transform is undone by the GEMM.
    EXPECT_LT(worst, 0.35 * scale) << "rht " << rht;
  }
  const NVFP4Quantizer with(NVFP4Role::kGradient, false, true, false, Tensor());
  const NVFP4Quantizer without(NVFP4Role::kActivation, false, false, false, Tensor());
  auto a = with.quantize(dy, Usage::kColumnwise, Ownership::kInternal, AmaxRecording::kSkip);
  auto b = without.quantize(x, Usage::kColumnwise, Ownership::kInternal, AmaxRecording::kSkip);
  EXPECT_NE(test::error_of([&] {
              ops::fp8_gemm(*a, *b, ops::GemmLayout::kWgrad, DType::kF32);
            }).find("Hadamard"),
            std::string::npos);
}

TEST(NVFP4StochasticRounding, UnbiasedOnNeighboursAndDeterministic) {
  // 16 copies of one value v per block, next to a block that fixes the tensor scale at 1 (amax
  // 2688) and a block scale of 1 (amax 6): the cast sees v itself.
  const int64_t cols = 4 * kB;
  for (float v : {0.3f, 1.2f, 2.7f, -4.6f, 5.5f}) {
    std::vector<float> x(static_cast<size_t>(kB * cols), 0.f);  // 16 rows; row 0 holds values
    for (int64_t c = 0; c < kB; ++c) x[static_cast<size_t>(c)] = v;
    x[static_cast<size_t>(kB - 1)] = 6.f;  // this block's amax: scale 1
    x[static_cast<size_t>(3 * kB)] = 2688.f;
    double sum = 0;
    int64_t n = 0;
    const float lo = std::copysign(
        std::floor(std::fabs(v) / (std::fabs(v) < 2 ? 0.5f : (std::fabs(v) < 4 ? 1.f : 2.f))) *
            (std::fabs(v) < 2 ? 0.5f : (std::fabs(v) < 4 ? 1.f : 2.f)),
        v);
    for (uint64_t draw = 0; draw < 400; ++draw) {
      ops::NVFP4Cast c;
      c.stochastic = true;
      c.seed = 99;
      c.offset = draw * static_cast<uint64_t>(cols);
      const Cast got = cast(x, kB, cols, c);
      ASSERT_EQ(from_e4m3(got.scales.data_as<uint8_t>()[0]), 1.f);
      for (int64_t e = 0; e + 1 < kB; ++e) {
        const float q = from_e2m1(nibble(got.data, cols, 0, e));
        const float step = std::fabs(lo) < 2 ? 0.5f : (std::fabs(lo) < 4 ? 1.f : 2.f);
        ASSERT_TRUE(q == lo || q == lo + std::copysign(step, v)) << v << " -> " << q;
        sum += q;
        ++n;
      }
    }
    EXPECT_NEAR(sum / static_cast<double>(n), v, 0.02) << "mean of stochastic rounding of " << v;
  }
  // The same seed and offset give the same codes; another offset others.
  std::vector<float> x = test::random_tensor({16, 32}, DType::kF32, 9).to_floats();
  ops::NVFP4Cast c;
  c.stochastic = true;
  c.seed = 5;
  const Cast a = cast(x, 16, 32, c), b = cast(x, 16, 32, c);
  c.offset = 512;
  const Cast d = cast(x, 16, 32, c);
  EXPECT_EQ(std::memcmp(a.data.data(), b.data.data(), a.data.nbytes()), 0);
  EXPECT_NE(std::memcmp(a.data.data(), d.data.data(), a.data.nbytes()), 0);
}

TEST(NVFP4Quantizer, TheStochasticStreamAdvancesByTheElementsCast) {
  Tensor rng = Tensor::empty({2}, DType::kI64);
  rng.data_as<int64_t>()[0] = 7;
  rng.data_as<int64_t>()[1] = 0;
  const NVFP4Quantizer q(NVFP4Role::kGradient, false, true, true, rng);
  const Tensor g = test::random_tensor({32, 48}, DType::kF32, 10);
  q.quantize(g, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);
  EXPECT_EQ(rng.data_as<int64_t>()[1], 2 * 32 * 48);  // both directions drew
}

TEST(NVFP4Recipe, JsonKeysAndTheirRoles) {
  const Recipe r = parse_recipe(R"({"recipe": "nvfp4"})");
  EXPECT_EQ(r, Recipe::nvfp4());
  EXPECT_TRUE(r.random_hadamard_transform && r.stochastic_rounding && r.weight_2d_quantization);
  const Recipe off = parse_recipe(
      R"({"recipe": "nvfp4", "disable_rht": true, "disable_stochastic_rounding": true,
          "disable_2d_quantization": true})");
  EXPECT_FALSE(off.random_hadamard_transform || off.stochastic_rounding ||
               off.weight_2d_quantization);
  EXPECT_EQ(recipe_from_json(recipe_to_json(off)), off);
  EXPECT_NE(make_quantizer(r, nullptr, backward_slot(0, BackwardTensor::kGradOutput))
                ->describe()
                .find("gradient 1x16 rht sr"),
            std::string::npos);
  EXPECT_NE(make_quantizer(r, nullptr, forward_slot(0, ForwardTensor::kWeight))
                ->describe()
                .find("weight 16x16"),
            std::string::npos);
  EXPECT_NE(make_quantizer(off, nullptr, forward_slot(0, ForwardTensor::kInput))
                ->describe()
                .find("activation 1x16"),
            std::string::npos);
}

// ---- 4over6 (TE's nvfp4_4over6) ----

float e2m1_value(uint8_t code) {
  const float magnitudes[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  return (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
}

// TE's 4over6 cast (reference_nvfp4.py's rule) in plain f32: the tensor scale from
// 6 * e4m3_max / amax, per block the map-to-6 scale e4m3(min(RN(amax_b / 6) * s_enc, 448)) and the
// map-to-4 one 1.5x that, each candidate cast, its error summed in element order (|d| or d^2 of
// the value dequantized with amax / (6 * e4m3_max)), a tile's rows added pairwise (r + 8, + 4, +
// 2, + 1); map-to-4 kept only when strictly nearer. `picked4` counts the blocks that took it.
// `divide_first` false takes the plain cast's order instead, amax_b * (s_enc * RN(1 / 6)): what the
// cast must not do (BaseScaleDividesTheBlockAmaxBySixFirst).
Expected reference_4over6(const std::vector<float>& x, int64_t rows, int64_t cols, bool tiles,
                          bool mse, float e4m3_max, int64_t* picked4, bool divide_first = true) {
  Expected e = sized_for(x, rows, cols);
  const float s_enc = tensor_encode(e.amax, e4m3_max);
  const float s_dec = 1.f / s_enc;
  const int64_t band = tiles ? kB : 1;
  *picked4 = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += band) {
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      const float bamax = block_amax(x, cols, r0, c0, band);
      const float base = divide_first ? (bamax / 6.f) * s_enc : bamax * (s_enc * (1.f / 6.f));
      const uint8_t sf[2] = {test::reference_cast(std::min(base * 1.5f, 448.f), DType::kE4M3),
                             test::reference_cast(std::min(base, 448.f), DType::kE4M3)};
      std::vector<uint8_t> codes[2];
      float err[2][kB] = {};
      int64_t saturated[2] = {}, flushed[2] = {};
      for (int k = 0; k < 2; ++k) {
        const float scale = from_e4m3(sf[k]);
        const float enc = std::min(1.f / (scale * s_dec), FLT_MAX);
        for (int64_t r = r0; r < r0 + band; ++r) {
          for (int64_t c = c0; c < c0 + kB; ++c) {
            const float xv = x[static_cast<size_t>(r * cols + c)];
            const uint8_t code = test::reference_e2m1(xv * enc);
            codes[k].push_back(code);
            saturated[k] += std::fabs(xv * enc) > 6.f;
            flushed[k] += xv != 0.f && !std::isnan(xv) && (code & 7) == 0;
            const float value = ((e2m1_value(code) * scale) * e.amax) / (6.f * e4m3_max);
            const float d = value - xv;
            err[k][r - r0] += mse ? d * d : std::fabs(d);
          }
        }
      }
      float total[2];
      for (int k = 0; k < 2; ++k) {
        float* rowerr = err[k];
        if (band == 1) {
          total[k] = rowerr[0];
          continue;
        }
        float s8[8], s4[4], s2[2];
        for (int i = 0; i < 8; ++i) s8[i] = rowerr[i] + rowerr[i + 8];
        for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
        for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
        total[k] = s2[0] + s2[1];
      }
      const int kept = total[0] < total[1] ? 0 : 1;
      *picked4 += kept == 0;
      e.saturated += saturated[kept];
      e.flushed += flushed[kept];
      size_t i = 0;
      for (int64_t r = r0; r < r0 + band; ++r) {
        e.sf[static_cast<size_t>(r * (cols / kB) + c0 / kB)] = sf[kept];
        for (int64_t c = c0; c < c0 + kB; ++c)
          e.codes[static_cast<size_t>(r * cols + c)] = codes[kept][i++];
      }
    }
  }
  return e;
}

TEST(NVFP4FourOverSix, BlocksAndTilesMatchTheReference) {
  const int64_t rows = 64, cols = 96;
  const std::vector<float> x = mixed(rows, cols, 11);
  for (bool tiles : {false, true}) {
    for (bool mse : {false, true}) {
      for (float bound : {448.f, 256.f}) {
        SCOPED_TRACE(std::string(tiles ? "16x16" : "1x16") + (mse ? " MSE " : " MAE ") +
                     std::to_string(bound));
        ops::NVFP4Cast c;
        c.tiles_2d = tiles;
        c.four_over_six = true;
        c.squared_error = mse;
        c.e4m3_max = bound;
        int64_t picked4 = 0;
        const Expected want = reference_4over6(x, rows, cols, tiles, mse, bound, &picked4);
        EXPECT_TRUE(matches(cast(x, rows, cols, c), want, rows, cols));
        // The kept candidate's saturated and flushed elements are the ones counted.
        Cast counted = cast(x, rows, cols, c);
        FP8CastCounts counts;
        ops::quantize_nvfp4(Tensor::from_floats(x, {rows, cols}), c, counted.data, counted.scales,
                            counted.amax, &counts);
        EXPECT_EQ(counts.total, rows * cols);
        EXPECT_EQ(counts.saturated, want.saturated);
        EXPECT_EQ(counts.flushed, want.flushed);
        EXPECT_GT(want.flushed, 0);
        // Both candidates win somewhere, so the choice itself is checked.
        const int64_t blocks = rows / (tiles ? kB : 1) * (cols / kB);
        EXPECT_GT(picked4, 0);
        EXPECT_LT(picked4, blocks);
      }
    }
  }
}

TEST(NVFP4FourOverSix, BaseScaleDividesTheBlockAmaxBySixFirst) {
  // TE's 4over6 base scale is RN(amax_b / 6) * s_enc, the plain cast's amax_b * (s_enc * RN(1 /
  // 6)). The two differ by an ulp at most, which changes the E4M3 code only next to a midpoint
  // between two E4M3 values: block amaxes a few ulps either side of each midpoint's preimage are
  // tried, and where the two rules keep different codes the cast must keep the first rule's.
  const int64_t rows = kB, cols = 2 * kB;  // row 0 holds both blocks, the other rows zeros
  const float amax = 3.7f;                 // the tensor amax, in the first block
  for (float bound : {448.f, 256.f}) {
    SCOPED_TRACE("bound " + std::to_string(bound));
    const float s_enc = tensor_encode(amax, bound);
    ops::NVFP4Cast c;
    c.four_over_six = true;
    c.e4m3_max = bound;
    int found = 0;
    for (int e = -6; e <= 8 && found < 8; ++e) {
      for (int m = 0; m < 8 && found < 8; ++m) {
        const double mid = std::ldexp(1.0 + (m + 0.5) / 8.0, e);  // between two E4M3 values
        float b = static_cast<float>(mid * 6.0 / s_enc);
        if (b >= amax) continue;
        for (int step = 0; step < 64; ++step) b = std::nextafter(b, 0.f);
        for (int step = 0; step < 128 && found < 8; ++step, b = std::nextafter(b, amax)) {
          // Only a block amax where either candidate's code differs can keep different codes.
          const float base[2] = {(b / 6.f) * s_enc, b * (s_enc * (1.f / 6.f))};
          bool differ = false;
          for (float f : {1.f, 1.5f}) {
            differ |= test::reference_cast(std::min(base[0] * f, 448.f), DType::kE4M3) !=
                      test::reference_cast(std::min(base[1] * f, 448.f), DType::kE4M3);
          }
          if (!differ) continue;
          std::vector<float> x(static_cast<size_t>(rows * cols), 0.f);
          x[0] = amax;
          x[kB] = b;
          int64_t picked4 = 0;
          const Expected want = reference_4over6(x, rows, cols, false, false, bound, &picked4);
          const Expected plain =
              reference_4over6(x, rows, cols, false, false, bound, &picked4, false);
          if (want.sf[1] == plain.sf[1]) continue;
          ++found;
          EXPECT_TRUE(matches(cast(x, rows, cols, c), want, rows, cols))
              << "block amax " << b << " (bits " << std::bit_cast<uint32_t>(b) << ")";
        }
      }
    }
    EXPECT_EQ(found, 8) << "too few block amaxes tell the two rules apart";
  }
}

TEST(NVFP4FourOverSix, MapToFourWinsWhereItsGridFitsTheBlock) {
  // Tensor scale 1 (amax 2688 elsewhere, bound 448). The block {3, 4, 0...}: map6's scale
  // e4m3(4 / 6) = 0.6875 casts 3 -> 4 (2.75) and 4 -> 6 (4.125); map4's e4m3(1) casts both
  // exactly, so 4over6 keeps it; the plain cast keeps 0.6875.
  std::vector<float> x(kB * 2 * kB, 0.f);
  x[0] = 3.f;
  x[1] = 4.f;
  x[kB] = 2688.f;
  ops::NVFP4Cast c;
  const Cast plain = cast(x, kB, 2 * kB, c);
  EXPECT_EQ(from_e4m3(plain.scales.data_as<uint8_t>()[0]), 0.6875f);
  c.four_over_six = true;
  c.e4m3_max = 448.f;
  const Cast got = cast(x, kB, 2 * kB, c);
  EXPECT_EQ(from_e4m3(got.scales.data_as<uint8_t>()[0]), 1.f);
  EXPECT_EQ(e2m1_value(nibble(got.data, 2 * kB, 0, 0)), 3.f);
  EXPECT_EQ(e2m1_value(nibble(got.data, 2 * kB, 0, 1)), 4.f);
  // The block holding the tensor amax maps it to 6 (the 448 bound leaves map4 no room: its scale
  // clamps to 448, both candidates are the same cast and the tie keeps map6).
  EXPECT_EQ(e2m1_value(nibble(got.data, 2 * kB, 0, kB)), 6.f);
}

TEST(NVFP4FourOverSix, QuantizerDequantizesAndMultipliesWithItsBound) {
  // Weights (16x16) and activations under 4over6 with the 256 bound: the tensor scale is
  // amax / 1536, which the dequantization and the GEMM's alpha must use (amax / 2688 would be
  // 1.75x off); the fprop GEMM against f64 of the dequantized operands.
  const int64_t m = 32, n = 48, k = 64;
  const Tensor x = test::random_tensor({m, k}, DType::kF32, 12);
  const Tensor w = test::random_tensor({n, k}, DType::kF32, 13);
  const NVFP4FourOverSix on{true, false, true};
  const NVFP4Quantizer qx(NVFP4Role::kActivation, true, false, false, Tensor(), nullptr, on);
  const NVFP4Quantizer qw(NVFP4Role::kWeight, true, false, false, Tensor(), nullptr, on);
  auto a = qx.quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
  auto b = qw.quantize(w, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
  EXPECT_EQ(dynamic_cast<const NVFP4Tensor&>(*b).layout().e4m3_max, 256.f);
  EXPECT_NE(qw.describe().find("weight 16x16 4over6-mae e4m3-256"), std::string::npos)
      << qw.describe();
  const std::vector<float> av = ops::dequantize(*a, DType::kF32).to_floats();
  const std::vector<float> bv = ops::dequantize(*b, DType::kF32).to_floats();
  EXPECT_TRUE(test::all_close(av, test::to_doubles(x), {0.2, 0.2}));
  EXPECT_TRUE(test::all_close(bv, test::to_doubles(w), {0.2, 0.2}));
  const std::vector<float> got =
      ops::fp8_gemm(*a, *b, ops::GemmLayout::kFprop, DType::kF32).to_floats();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int64_t t = 0; t < k; ++t) {
        const double p = static_cast<double>(av[static_cast<size_t>(i * k + t)]) *
                         bv[static_cast<size_t>(j * k + t)];
        want += p;
        mag += std::fabs(p);
      }
      ASSERT_LE(std::fabs(got[static_cast<size_t>(i * n + j)] - want), 1e-5 + 1e-5 * mag)
          << "element (" << i << ", " << j << ")";
    }
  }
  // Neither the transform nor stochastic rounding goes with it.
  EXPECT_NE(test::error_of([&] {
              NVFP4Quantizer(NVFP4Role::kActivation, false, true, false, Tensor(), nullptr, on);
            }).find("4over6 goes with neither"),
            std::string::npos);
}

TEST(NVFP4FourOverSix, RecipeKeysScopesAndTheTransformRule) {
  const Recipe plain = parse_recipe(R"({"recipe": "nvfp4"})");
  EXPECT_EQ(plain.four_over_six, NVFP4Scope::kNone);
  EXPECT_EQ(recipe_to_json(plain)["nvfp4_4over6"], "none");
  const Recipe w = parse_recipe(R"({"recipe": "nvfp4", "nvfp4_4over6": "weights"})");
  EXPECT_EQ(recipe_from_json(recipe_to_json(w)), w);
  EXPECT_NE(make_quantizer(w, nullptr, forward_slot(0, ForwardTensor::kWeight))
                ->describe()
                .find("4over6-mae e4m3-256"),
            std::string::npos);
  EXPECT_EQ(
      make_quantizer(w, nullptr, forward_slot(0, ForwardTensor::kInput))->describe().find("4over6"),
      std::string::npos);
  const Recipe all = parse_recipe(
      R"({"recipe": "nvfp4", "disable_rht": true, "nvfp4_4over6": "all",
          "nvfp4_4over6_e4m3_use_256": "none", "nvfp4_4over6_err_mode": "MSE"})");
  EXPECT_EQ(recipe_from_json(recipe_to_json(all)), all);
  const std::string input =
      make_quantizer(all, nullptr, forward_slot(0, ForwardTensor::kInput))->describe();
  EXPECT_NE(input.find("activation 1x16 4over6-mse"), std::string::npos) << input;
  EXPECT_EQ(input.find("e4m3-256"), std::string::npos) << input;
  // Gradients never take it.
  EXPECT_EQ(make_quantizer(all, nullptr, backward_slot(0, BackwardTensor::kGradOutput))
                ->describe()
                .find("4over6"),
            std::string::npos);
  const std::string rht =
      test::error_of([] { parse_recipe(R"({"recipe": "nvfp4", "nvfp4_4over6": "activations"})"); });
  EXPECT_NE(rht.find("recipe.nvfp4_4over6: \"activations\""), std::string::npos) << rht;
  EXPECT_NE(rht.find("disable_rht"), std::string::npos) << rht;
  const std::string bad =
      test::error_of([] { parse_recipe(R"({"recipe": "nvfp4", "nvfp4_4over6": "inputs"})"); });
  EXPECT_NE(bad.find("nvfp4_4over6"), std::string::npos) << bad;
  EXPECT_NE(bad.find("inputs"), std::string::npos) << bad;
}

TEST(NVFP4Gemm, ShapeRuleNamesTheShape) {
  const std::string message = test::error_of([] {
    ops::check_fp8_gemm_shape(kNVFP4Format, {16, 40}, "Linear weight");
  });
  EXPECT_NE(message.find("Linear weight has shape (16, 40)"), std::string::npos) << message;
  EXPECT_NE(message.find("NVFP4 GEMMs need"), std::string::npos) << message;
}

}  // namespace
}  // namespace octet
