// Float8Tensor and MXFP8Tensor as data holders: construction checks, usage bookkeeping, and the
// save-for-backward hand-over (exactly the data buffers move; owned tensors are never emptied).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "runtime/error.h"
#include "runtime/float8_tensor.h"
#include "runtime/memory.h"
#include "runtime/mxfp8_tensor.h"

namespace octet {
namespace {

Tensor bytes(const Shape& shape, DType dtype, uint8_t first) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = t.data_as<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>(first + i);
  return t;
}

Float8Tensor make_float8(Ownership ownership) {
  return Float8Tensor({2, 3, 4}, bytes({2, 3, 4}, DType::kE4M3, 1), bytes({4, 6}, DType::kE4M3, 7),
                      Tensor::from_floats({0.5f}, {1}), ownership);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    FAIL() << "expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Float8Tensor, HoldsShapeDtypeUsagesAndBytes) {
  Float8Tensor t = make_float8(Ownership::kInternal);
  EXPECT_EQ(t.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(t.rows(), 6);
  EXPECT_EQ(t.cols(), 4);
  EXPECT_EQ(t.dtype(), DType::kE4M3);
  EXPECT_EQ(t.usage(), Usage::kBoth);
  EXPECT_EQ(t.format(), kPerTensorFormat);
  EXPECT_EQ(t.nbytes(), 24u + 24u + 4u);
  EXPECT_EQ(t.describe(), "e4m3 per-tensor (2, 3, 4) row-wise+column-wise internal");
  t.drop_usage(Usage::kRowwise);
  EXPECT_EQ(t.usage(), Usage::kColumnwise);
  EXPECT_FALSE(t.rowwise_data().defined());
  EXPECT_EQ(t.nbytes(), 24u + 4u);
  expect_error([&] { t.drop_usage(Usage::kColumnwise); }, "would leave no data");
}

TEST(Float8Tensor, ConstructionChecksShapesAndDtypes) {
  const Tensor s = Tensor::from_floats({1.f}, {1});
  expect_error(
      [&] {
        Float8Tensor({4, 6}, Tensor(), Tensor(), s, Ownership::kOwned);
      },
      "both are undefined");
  expect_error(
      [&] {
        Float8Tensor({4, 6}, Tensor(), bytes({4, 6}, DType::kE4M3, 0), s, Ownership::kOwned);
      },
      "(6, 4) (last dim, prod(leading dims))");
  expect_error(
      [&] {
        Float8Tensor({4, 6}, bytes({6, 4}, DType::kE4M3, 0), Tensor(), s, Ownership::kOwned);
      },
      "logical shape (4, 6)");
  expect_error(
      [&] { Float8Tensor({4}, bytes({4}, DType::kU8, 0), Tensor(), s, Ownership::kOwned); },
      "e4m3 or e5m2");
  expect_error(
      [&] {
        Float8Tensor({4}, bytes({4}, DType::kE5M2, 0), Tensor(), Tensor::zeros({2}, DType::kF32),
                     Ownership::kOwned);
      },
      "scale_inv must be a one-element f32 tensor");
}

TEST(Float8Tensor, InternalHandsOverExactlyItsBuffersAndGetsThemBack) {
  Float8Tensor t = make_float8(Ownership::kInternal);
  const Tensor row = t.rowwise_data(), col = t.columnwise_data(), inv = t.scale_inv();
  std::vector<Tensor> taken = t.take_buffers();
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_TRUE(taken[0].shares_storage(row));
  EXPECT_TRUE(taken[1].shares_storage(col));
  EXPECT_TRUE(taken[2].shares_storage(inv));
  EXPECT_TRUE(t.buffers_taken());
  EXPECT_EQ(t.usage(), Usage::kBoth);  // metadata stays
  EXPECT_EQ(t.nbytes(), 0u);
  expect_error([&] { (void)t.rowwise_data(); }, "held by a save-for-backward context");
  expect_error([&] { (void)t.take_buffers(); }, "already taken");
  expect_error([&] { t.give_buffers({taken[0]}); }, "got 1 buffers, expected 3");
  t.give_buffers(taken);
  EXPECT_FALSE(t.buffers_taken());
  EXPECT_TRUE(t.rowwise_data().shares_storage(row));
  EXPECT_TRUE(t.columnwise_data().shares_storage(col));
  EXPECT_TRUE(t.scale_inv().shares_storage(inv));
}

TEST(Float8Tensor, UsageNotHeldTravelsAsAnUndefinedBuffer) {
  Float8Tensor t = make_float8(Ownership::kInternal);
  t.drop_usage(Usage::kRowwise);
  std::vector<Tensor> taken = t.take_buffers();
  EXPECT_FALSE(taken[0].defined());
  EXPECT_TRUE(taken[1].defined());
  t.give_buffers(taken);
  EXPECT_EQ(t.usage(), Usage::kColumnwise);
}

TEST(Float8Tensor, OwnedIsNeverEmptied) {
  Float8Tensor t = make_float8(Ownership::kOwned);
  expect_error([&] { (void)t.take_buffers(); }, "owned quantized tensors are saved by reference");
  EXPECT_FALSE(t.buffers_taken());
  EXPECT_TRUE(t.rowwise_data().defined());
}

MXFP8Tensor make_mxfp8(Ownership ownership) {
  // Logical (40, 64): row-wise exponents (40, 2), column-wise data (64, 40), exponents (64, 2).
  return MXFP8Tensor({40, 64}, bytes({40, 64}, DType::kE4M3, 0), bytes({40, 2}, DType::kE8M0, 100),
                     bytes({64, 40}, DType::kE4M3, 3), bytes({64, 2}, DType::kE8M0, 120),
                     ownership);
}

TEST(MXFP8Tensor, ExponentShapesFollowTheBlocks) {
  EXPECT_EQ(mxfp8_scale_shape(40, 64), Shape({40, 2}));
  EXPECT_EQ(mxfp8_scale_shape(64, 40), Shape({64, 2}));  // 40 rows: one full and one partial
  EXPECT_EQ(mxfp8_scale_shape(1, 1), Shape({1, 1}));
  MXFP8Tensor t = make_mxfp8(Ownership::kInternal);
  EXPECT_EQ(t.usage(), Usage::kBoth);
  EXPECT_EQ(t.nbytes(), 2560u + 80u + 2560u + 128u);
  expect_error(
      [&] {
        MXFP8Tensor({40, 64}, bytes({40, 64}, DType::kE4M3, 0), bytes({40, 1}, DType::kE8M0, 0),
                    Tensor(), Tensor(), Ownership::kOwned);
      },
      "row-wise exponents must be e8m0(40, 2)");
  expect_error(
      [&] {
        MXFP8Tensor({40, 64}, Tensor(), Tensor(), bytes({64, 40}, DType::kE4M3, 0),
                    bytes({64, 2}, DType::kU8, 0), Ownership::kOwned);
      },
      "column-wise exponents must be e8m0(64, 2)");
}

TEST(MXFP8Tensor, InternalHandsOverItsBuffers) {
  MXFP8Tensor t = make_mxfp8(Ownership::kInternal);
  const Tensor rs = t.rowwise_scales(), cs = t.columnwise_scales();
  std::vector<Tensor> taken = t.take_buffers();
  // Per direction: data, exponents and the (for MXFP8 undefined) extra buffer of ScaledTensor.
  ASSERT_EQ(taken.size(), 6u);
  EXPECT_TRUE(taken[1].shares_storage(rs));
  EXPECT_TRUE(taken[4].shares_storage(cs));
  EXPECT_FALSE(taken[2].defined());
  EXPECT_FALSE(taken[5].defined());
  expect_error([&] { (void)t.columnwise_scales(); }, "held by a save-for-backward context");
  t.give_buffers(std::move(taken));
  EXPECT_TRUE(t.rowwise_scales().shares_storage(rs));
  t.drop_usage(Usage::kColumnwise);
  EXPECT_FALSE(t.columnwise_scales().defined());
  EXPECT_EQ(t.usage(), Usage::kRowwise);
  MXFP8Tensor owned = make_mxfp8(Ownership::kOwned);
  EXPECT_THROW((void)owned.take_buffers(), Error);
}

TEST(QuantizedTensor, UsageSetsCombine) {
  EXPECT_EQ(Usage::kRowwise | Usage::kColumnwise, Usage::kBoth);
  EXPECT_TRUE(has_usage(Usage::kBoth, Usage::kColumnwise));
  EXPECT_FALSE(has_usage(Usage::kRowwise, Usage::kBoth));
  EXPECT_EQ(usage_name(Usage::kColumnwise), "column-wise");
}

}  // namespace
}  // namespace octet
