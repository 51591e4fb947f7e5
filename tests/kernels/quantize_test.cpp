// Per-tensor FP8 quantization through the quantizers, against references written here: round
// trips within TE's tolerances, current scaling bit for bit from its formula (f64 math and CUDA's
// host cast), saturation, quantize_into, amax recording, usages and memory tags.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <tuple>

#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/fp8.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using test::reference_cast;

std::shared_ptr<DelayedScalingQuantizer> delayed(float scale, DType fp8, int64_t history = 1) {
  return std::make_shared<DelayedScalingQuantizer>(Tensor::from_floats({scale}, {1}),
                                                   Tensor::zeros({history}, DType::kF32), fp8);
}

std::shared_ptr<Float8Tensor> as_float8(std::shared_ptr<QuantizedTensor> t) {
  auto f = std::dynamic_pointer_cast<Float8Tensor>(t);
  EXPECT_NE(f, nullptr);
  return f;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return {p, p + t.nbytes()};
}

// max |x| in f64, NaN ignored.
double reference_amax(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) {
    if (!std::isnan(v)) m = std::max(m, std::fabs(static_cast<double>(v)));
  }
  return m;
}

// ---- 1. round trip ----

using RoundTripParam = std::tuple<Shape, float, DType, DType>;  // shape, scale, fp8, input
class RoundTrip : public ::testing::TestWithParam<RoundTripParam> {};

TEST_P(RoundTrip, DequantizedWithinTolerance) {
  const auto [shape, scale, fp8, input] = GetParam();
  const Tensor x = test::random_tensor(shape, input, 11, 1.5f);
  auto t = as_float8(
      delayed(scale, fp8)->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord));
  EXPECT_EQ(t->shape(), shape);
  EXPECT_EQ(t->scale_inv().item(), static_cast<float>(1.0 / scale));
  // TE's tolerances for an FP8 round trip.
  const test::Tolerance tol =
      fp8 == DType::kE4M3 ? test::Tolerance{0.0675, 0.125} : test::Tolerance{0.125, 0.25};
  const std::vector<double> want = test::to_doubles(x);
  for (DType out : {DType::kF32, DType::kBF16}) {
    const Tensor y = ops::dequantize(*t, out);
    EXPECT_EQ(y.shape(), shape);
    EXPECT_EQ(y.dtype(), out);
    EXPECT_TRUE(test::all_close(y.to_floats(), want, tol)) << "output " << out;
  }
  // The same values from column-wise data alone (transposed back).
  const std::vector<float> from_rows = ops::dequantize(*t, DType::kF32).to_floats();
  ops::update_usage(*t, Usage::kColumnwise);
  EXPECT_EQ(ops::dequantize(*t, DType::kF32).to_floats(), from_rows);
}

INSTANTIATE_TEST_SUITE_P(PerTensor, RoundTrip,
                         ::testing::Combine(::testing::Values(Shape{}, Shape{1}, Shape{23},
                                                              Shape{311}, Shape{7, 11},
                                                              Shape{7, 5, 3}, Shape{2, 3, 5, 3}),
                                            ::testing::Values(0.375f, 1.f, 3.5f),
                                            ::testing::Values(DType::kE4M3, DType::kE5M2),
                                            ::testing::Values(DType::kF32, DType::kBF16)));

// ---- 2. current scaling, bit for bit ----

// The scale of current scaling from DESIGN.md, in f64: fp8_max / max(amax, eps); amax 0, inf or
// NaN -> 1; past FLT_MAX -> FLT_MAX (f32 rounding gives FLT_MAX or inf, both end there);
// power_2_scale -> 2^floor(log2(scale)).
float reference_current_scale(double amax, DType fp8, bool power_2, float eps) {
  if (amax == 0 || !std::isfinite(amax)) return 1.f;
  const double s = (fp8 == DType::kE4M3 ? 448.0 : 57344.0) / std::max(amax, double{eps});
  float scale = s > FLT_MAX ? FLT_MAX : static_cast<float>(s);
  if (power_2) {
    int e = 0;
    std::frexp(static_cast<double>(scale), &e);  // scale = m * 2^e, m in [0.5, 1)
    scale = static_cast<float>(std::ldexp(1.0, e - 1));
  }
  return scale;
}

void expect_current_scaling_exact(const Tensor& x, DType fp8, bool power_2, float eps) {
  const CurrentScalingQuantizer q(fp8, power_2 ? Power2Scale::kOn : Power2Scale::kOff, eps);
  auto t = as_float8(q.quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord));
  const std::vector<float> v = x.to_floats();
  const float scale = reference_current_scale(reference_amax(v), fp8, power_2, eps);
  ASSERT_EQ(t->scale_inv().item(), static_cast<float>(1.0 / scale)) << "scale " << scale;
  const uint8_t* row = t->rowwise_data().data_as<uint8_t>();
  const uint8_t* col = t->columnwise_data().data_as<uint8_t>();
  const int64_t rows = x.rows(), cols = x.cols();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < rows * cols; ++i) {
    // The product of two floats is exact in f64; one rounding to f32 is the f32 product.
    const uint8_t want = reference_cast(static_cast<float>(static_cast<double>(v[i]) * scale), fp8);
    const bool ok = row[i] == want && col[(i % cols) * rows + i / cols] == want;
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << "first mismatch at " << first << " (x = " << v[first] << ")";
}

using CurrentParam = std::tuple<DType, DType, bool, float, Shape, float>;  // fp8, input, pow2,
                                                                           // eps, shape, std
class CurrentScaling : public ::testing::TestWithParam<CurrentParam> {};

TEST_P(CurrentScaling, BitExactWithTheFormula) {
  const auto [fp8, input, power_2, eps, shape, std] = GetParam();
  expect_current_scaling_exact(test::random_tensor(shape, input, 21, std), fp8, power_2, eps);
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, CurrentScaling,
    ::testing::Combine(::testing::Values(DType::kE4M3, DType::kE5M2),
                       ::testing::Values(DType::kF32, DType::kBF16), ::testing::Bool(),
                       ::testing::Values(0.f, 1e-6f),
                       ::testing::Values(Shape{1}, Shape{17, 33}, Shape{128, 256}, Shape{611, 782}),
                       // std 1e-8: the amax falls under eps = 1e-6, so the clamp decides
                       ::testing::Values(1.f, 1e-8f)));

TEST(CurrentScaling, EdgeAmaxes) {
  for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
    for (bool power_2 : {false, true}) {
      // all zeros (amax 0 -> scale 1), an inf (-> 1), NaNs are ignored, a tiny amax whose
      // quotient overflows f32 (-> FLT_MAX)
      expect_current_scaling_exact(Tensor::zeros({4, 8}, DType::kF32), fp8, power_2, 0.f);
      expect_current_scaling_exact(Tensor::zeros({4, 8}, DType::kF32), fp8, power_2, 1e-6f);
      expect_current_scaling_exact(Tensor::from_floats({1.f, -kInf, 3.f, 0.5f}, {4}), fp8, power_2,
                                   0.f);
      expect_current_scaling_exact(Tensor::from_floats({1.f, kNaN, -3.f, kNaN}, {4}), fp8, power_2,
                                   0.f);
      expect_current_scaling_exact(Tensor::from_floats({1e-39f, -5e-40f}, {2}), fp8, power_2, 0.f);
    }
  }
  const CurrentScalingQuantizer q(DType::kE4M3, Power2Scale::kOff, 0.f);
  EXPECT_EQ(q.scale_for(0.f), 1.f);
  EXPECT_EQ(q.scale_for(kInf), 1.f);
  EXPECT_EQ(q.scale_for(kNaN), 1.f);
  EXPECT_EQ(q.scale_for(1e-39f), FLT_MAX);
  EXPECT_EQ(q.scale_for(2.f), 224.f);
  EXPECT_EQ(CurrentScalingQuantizer(DType::kE4M3, Power2Scale::kOn, 0.f).scale_for(2.f), 128.f);
}

// ---- 6. saturation ----

TEST(PerTensorQuantize, SaturatesOverRangeAndInfinityKeepsNaN) {
  for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
    const uint8_t max_code = fp8 == DType::kE4M3 ? 0x7E : 0x7B;
    const float max = fp8_max(fp8);
    const Tensor x =
        Tensor::from_floats({2 * max, -2 * max, kInf, -kInf, kNaN, max, 1e30f, -1e30f}, {8});
    auto t = as_float8(delayed(1.f, fp8)->quantize(x, Usage::kRowwise, Ownership::kInternal,
                                                   AmaxRecording::kSkip));
    const uint8_t* q = t->rowwise_data().data_as<uint8_t>();
    const std::vector<uint8_t> want = {max_code, static_cast<uint8_t>(0x80 | max_code),
                                       max_code, static_cast<uint8_t>(0x80 | max_code),
                                       0x7F,     max_code,
                                       max_code, static_cast<uint8_t>(0x80 | max_code)};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(q[i], want[i]) << fp8 << " element " << i;
    const std::vector<float> y = ops::dequantize(*t, DType::kF32).to_floats();
    EXPECT_EQ(y[2], max);
    EXPECT_EQ(y[3], -max);
    EXPECT_TRUE(std::isnan(y[4]));
  }
}

// ---- delayed scaling: scale read at cast time, amax into history[0] ----

TEST(DelayedScaling, ReadsTheScaleAndRecordsAmaxInTheSamePass) {
  auto q = delayed(2.f, DType::kE4M3, 8);
  std::vector<float> v = test::random_tensor({64, 48}, DType::kF32, 31, 3.f).to_floats();
  v[5] = kNaN;  // ignored by the amax
  const Tensor x = Tensor::from_floats(v, {64, 48});
  Tensor history_t = q->amax_history();  // a handle on the quantizer's history
  float* history = history_t.data_as<float>();
  history[1] = 99.f;  // only element 0 is written
  auto t = as_float8(q->quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kRecord));
  EXPECT_EQ(history[0], static_cast<float>(reference_amax(v)));
  EXPECT_EQ(history[1], 99.f);
  const uint8_t* row = t->rowwise_data().data_as<uint8_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(row[i], reference_cast(v[i] * 2.f, DType::kE4M3)) << i;
  }
  EXPECT_EQ(t->scale_inv().item(), 0.5f);

  // kSkip leaves the history alone; a later scale change is seen by the next cast.
  history[0] = 0.f;
  Tensor scale_t = q->scale();
  *scale_t.data_as<float>() = 0.75f;
  auto u = as_float8(q->quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip));
  EXPECT_EQ(history[0], 0.f);
  EXPECT_EQ(u->scale_inv().item(), static_cast<float>(1.0 / 0.75));
  EXPECT_EQ(u->rowwise_data().data_as<uint8_t>()[7], reference_cast(v[7] * 0.75f, DType::kE4M3));
}

TEST(DelayedScaling, QuantizerForAnFP8MetaSlotUsesTheSlotsState) {
  auto meta = std::make_shared<FP8Meta>(Recipe::delayed(FP8Format::kHybrid, 0, 16), 1);
  const SlotId dy = backward_slot(0, BackwardTensor::kGradOutput);
  auto q = make_quantizer(meta->recipe(), meta.get(), dy);
  EXPECT_EQ(q->dtype(), DType::kE5M2);  // hybrid: gradients in e5m2
  const Tensor x = test::random_tensor({16, 16}, DType::kF32, 32);
  q->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);
  EXPECT_EQ(meta->slot(dy).amax_history.to_floats()[0],
            static_cast<float>(reference_amax(x.to_floats())));
  // A meta made for another recipe is refused rather than silently mixed.
  EXPECT_THROW(make_quantizer(Recipe::delayed(FP8Format::kE4M3), meta.get(), dy), Error);
  EXPECT_THROW(make_quantizer(Recipe::delayed(), nullptr, dy), Error);
  EXPECT_EQ(make_quantizer(Recipe::current(), nullptr, dy)->dtype(), DType::kE5M2);
  EXPECT_EQ(make_quantizer(Recipe::mxfp8(), nullptr, dy)->format(), kMXFP8Format);
}

// The slot's cast counts: casts that record amax (quantize and quantize_into) add their
// saturated / flushed / total counts; kSkip casts (validation, recompute, the initial weight
// cast) add nothing; take_cast_counts hands them over and starts again from zero.
TEST(DelayedScaling, RecordingCastsAddToTheSlotsCastCountsAndSkippingCastsDoNot) {
  auto meta = std::make_shared<FP8Meta>(Recipe::delayed(), 1);
  const SlotId in = forward_slot(0, ForwardTensor::kInput);
  meta->slot(in).scale.data_as<float>()[0] = 1000.f;
  auto q = make_quantizer(meta->recipe(), meta.get(), in);
  // e4m3 at scale 1000: 0.5 -> 500 saturates, 1e-7 -> 1e-4 flushes, 0 is neither, 0.01 is fine.
  std::vector<float> v(64, 0.01f);
  v[0] = 0.5f;
  v[1] = -0.6f;
  v[2] = 1e-7f;
  v[3] = 0.f;
  v[4] = kNaN;
  const Tensor x = Tensor::from_floats(v, {8, 8});
  auto expect = [&](int64_t saturated, int64_t flushed, int64_t total, const char* what) {
    const FP8CastCounts c = meta->take_cast_counts(in);
    EXPECT_EQ(c.saturated, saturated) << what;
    EXPECT_EQ(c.flushed, flushed) << what;
    EXPECT_EQ(c.total, total) << what;
  };
  expect(0, 0, 0, "a new slot");
  auto t = q->quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kRecord);
  q->quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kRecord);
  expect(4, 2, 128, "two recording casts");
  expect(0, 0, 0, "taken: reset to zero");
  q->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip);
  ops::quantize_into(*t, x, AmaxRecording::kSkip);
  expect(0, 0, 0, "skipping casts");
  ops::quantize_into(*t, x, AmaxRecording::kRecord);
  expect(2, 1, 64, "a recording quantize_into");
  // Through the fused norm path the module uses, with the counts the quantizer hands out.
  const auto& dq = dynamic_cast<const DelayedScalingQuantizer&>(*q);
  EXPECT_EQ(dq.counts_for(AmaxRecording::kSkip), nullptr);
  EXPECT_EQ(dq.counts_for(AmaxRecording::kRecord), meta->slot(in).cast_counts.get());
  // A quantizer without counts (a frozen copy for recompute) counts nothing anywhere.
  auto plain = delayed(1000.f, DType::kE4M3);
  plain->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);
  EXPECT_EQ(plain->counts_for(AmaxRecording::kRecord), nullptr);
  expect(0, 0, 0, "another quantizer's cast");
}

// ---- 7. quantize_into ----

TEST(QuantizeInto, DelayedEqualsAFreshQuantizeAndFusesTheAmax) {
  auto q = delayed(1.5f, DType::kE4M3, 4);
  const Tensor x1 = test::random_tensor({32, 48}, DType::kF32, 41, 2.f);
  const Tensor x2 = test::random_tensor({32, 48}, DType::kF32, 42, 5.f);
  auto dst = as_float8(q->quantize(x1, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  const Tensor row = dst->rowwise_data(), col = dst->columnwise_data();
  const uint64_t version = dst->version();
  Tensor history_t = q->amax_history();  // a handle on the quantizer's history
  float* history = history_t.data_as<float>();
  history[0] = 0.f;
  Tensor scale_t = q->scale();
  *scale_t.data_as<float>() = 0.625f;  // the slot's scale moved since dst was made

  ops::quantize_into(*dst, x2, AmaxRecording::kRecord);
  EXPECT_EQ(history[0], static_cast<float>(reference_amax(x2.to_floats())));
  EXPECT_GT(dst->version(), version);
  EXPECT_TRUE(dst->rowwise_data().shares_storage(row)) << "not in place";
  EXPECT_TRUE(dst->columnwise_data().shares_storage(col)) << "not in place";
  auto fresh = as_float8(q->quantize(x2, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  EXPECT_EQ(bytes_of(dst->rowwise_data()), bytes_of(fresh->rowwise_data()));
  EXPECT_EQ(bytes_of(dst->columnwise_data()), bytes_of(fresh->columnwise_data()));
  EXPECT_EQ(dst->scale_inv().item(), fresh->scale_inv().item());
  EXPECT_EQ(dst->scale_inv().item(), static_cast<float>(1.0 / 0.625));

  // The amax max-accumulates into what the step already recorded; kSkip records nothing.
  history[0] = 1000.f;
  ops::quantize_into(*dst, x1, AmaxRecording::kRecord);
  EXPECT_EQ(history[0], 1000.f);
  history[0] = 0.f;
  ops::quantize_into(*dst, x1, AmaxRecording::kSkip);
  EXPECT_EQ(history[0], 0.f);
}

TEST(QuantizeInto, CurrentScalingEqualsAFreshQuantize) {
  auto q = std::make_shared<CurrentScalingQuantizer>(DType::kE5M2, Power2Scale::kOn, 0.f);
  const Tensor x1 = test::random_tensor({24, 32}, DType::kBF16, 43, 1.f);
  const Tensor x2 = test::random_tensor({24, 32}, DType::kBF16, 44, 300.f);
  auto dst = as_float8(q->quantize(x1, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kRecord));
  ops::quantize_into(*dst, x2, AmaxRecording::kRecord);
  auto fresh =
      as_float8(q->quantize(x2, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kRecord));
  EXPECT_EQ(bytes_of(dst->rowwise_data()), bytes_of(fresh->rowwise_data()));
  EXPECT_EQ(dst->scale_inv().item(), fresh->scale_inv().item());
  EXPECT_FALSE(dst->has(Usage::kColumnwise));
}

TEST(QuantizeInto, ClearErrors) {
  auto q = delayed(1.f, DType::kE4M3);
  const Tensor x = test::random_tensor({16, 16}, DType::kF32, 45);
  auto dst = q->quantize(x, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
  EXPECT_THROW(ops::quantize_into(*dst, test::random_tensor({16, 8}, DType::kF32, 46),
                                  AmaxRecording::kRecord),
               Error);
  EXPECT_THROW(delayed(1.f, DType::kE5M2)->quantize_into(*dst, x, AmaxRecording::kRecord), Error);
  Float8Tensor raw({16}, Tensor::zeros({16}, DType::kE4M3), Tensor(),
                   Tensor::from_floats({1.f}, {1}), Ownership::kOwned);
  try {
    ops::quantize_into(raw, Tensor::zeros({16}, DType::kF32), AmaxRecording::kRecord);
    FAIL() << "a tensor without a quantizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no quantizer"), std::string::npos) << e.what();
  }
}

// ---- 5 (per-tensor). column-wise = byte transpose; usage rules ----

TEST(PerTensorUsage, ColumnwiseIsTheByteTransposeAndIsMadeOnDemand) {
  for (const Shape& shape : {Shape{1, 32}, Shape{16, 64}, Shape{993, 512}, Shape{8, 32, 1024}}) {
    const Tensor x = test::random_tensor(shape, DType::kBF16, 51, 4.f);
    auto q = delayed(3.f, DType::kE4M3);
    auto both = as_float8(q->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip));
    const int64_t rows = both->rows(), cols = both->cols();
    ASSERT_EQ(both->columnwise_data().shape(), Shape({cols, rows}));
    const uint8_t* r = both->rowwise_data().data_as<uint8_t>();
    const uint8_t* c = both->columnwise_data().data_as<uint8_t>();
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) bad += c[j * rows + i] != r[i * cols + j];
    }
    EXPECT_EQ(bad, 0) << shape_str(shape);
    // Made later from row-wise data: the same bytes as the fused cast.
    auto rows_only =
        as_float8(q->quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip));
    ops::update_usage(*rows_only, Usage::kBoth);
    EXPECT_EQ(bytes_of(rows_only->columnwise_data()), bytes_of(both->columnwise_data()));
  }
}

TEST(PerTensorUsage, DroppingFreesAndRowwiseCannotComeFromColumnwise) {
  const Tensor x = test::random_tensor({64, 32}, DType::kF32, 52);
  auto t = as_float8(delayed(1.f, DType::kE4M3)
                         ->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip));
  const int64_t before = memory_stats().current_of(MemTag::kOther);
  ops::update_usage(*t, Usage::kColumnwise);
  EXPECT_EQ(memory_stats().current_of(MemTag::kOther), before - 64 * 32);
  try {
    ops::update_usage(*t, Usage::kBoth);
    FAIL() << "row-wise data made from column-wise data";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row-wise data cannot be made from column-wise data"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ops::update_usage(*t, Usage::kNone), Error);
  EXPECT_EQ(t->usage(), Usage::kColumnwise);
}

TEST(PerTensorQuantize, BuffersUseTheCallersMemoryTag) {
  const Tensor x = test::random_tensor({32, 32}, DType::kF32, 53);
  for (MemTag tag : {MemTag::kWeights, MemTag::kActivations}) {
    MemTagScope scope(tag);
    auto t =
        as_float8(delayed(1.f, DType::kE4M3)
                      ->quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip));
    ops::update_usage(*t, Usage::kBoth);
    EXPECT_EQ(t->rowwise_data().storage()->tag(), tag);
    EXPECT_EQ(t->columnwise_data().storage()->tag(), tag);
    EXPECT_EQ(t->scale_inv().storage()->tag(), tag);
  }
}

}  // namespace
}  // namespace octet
