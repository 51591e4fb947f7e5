// Tensor handles: shapes, views that share storage, deep copies, versions, f32 conversion on the
// way in and out, typed access and printing.
#include "runtime/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace octet {
namespace {

using ::testing::HasSubstr;

using test::error_of;

std::vector<float> iota(int64_t n, float start = 0.f) {
  std::vector<float> values(static_cast<size_t>(n));
  for (size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<float>(i);
  return values;
}

std::string str(const Tensor& t) {
  std::ostringstream out;
  out << t;
  return out.str();
}

TEST(Tensor, ShapeNumelAndDims) {
  const Tensor t = Tensor::empty({2, 3, 4}, DType::kBF16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.element_size(), 2u);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_THAT(error_of([&] { t.size(3); }),
              HasSubstr("dimension 3 out of range for shape (2, 3, 4)"));
  EXPECT_THAT(error_of([&] { t.size(-4); }), HasSubstr("dimension -4"));
}

TEST(Tensor, ShapeHelpers) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({4, 768}), 3072);
  EXPECT_EQ(shape_numel({4, 0, 3}), 0);
  EXPECT_EQ(shape_str({}), "()");
  EXPECT_EQ(shape_str({5}), "(5,)");
  EXPECT_EQ(shape_str({4, 768}), "(4, 768)");
}

TEST(Tensor, RowsAndColsOfThe2dView) {
  struct Case {
    Shape shape;
    int64_t rows, cols;
  };
  const Case cases[] = {
      {{2, 3, 4}, 6, 4}, {{5}, 1, 5},    {{}, 1, 1}, {{7, 1}, 7, 1},
      {{0, 4}, 0, 4},    {{4, 0}, 4, 0},  // prod(leading dims) is 4 even with no columns
      {{2, 3, 0}, 6, 0},
  };
  for (const Case& c : cases) {
    const Tensor t = Tensor::empty(c.shape, DType::kF32);
    EXPECT_EQ(t.rows(), c.rows) << shape_str(c.shape);
    EXPECT_EQ(t.cols(), c.cols) << shape_str(c.shape);
  }
  EXPECT_EQ(Tensor::empty({2, 3, 4}, DType::kF32).flatten_2d().shape(), (Shape{6, 4}));
}

TEST(Tensor, UndefinedTensor) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(str(t), "Tensor(undefined)");
  EXPECT_THAT(error_of([&] { t.device(); }), HasSubstr("undefined tensor"));
  EXPECT_THAT(error_of([&] { t.data(); }), HasSubstr("undefined tensor"));
  EXPECT_THAT(error_of([&] { t.version(); }), HasSubstr("undefined tensor"));
  EXPECT_FALSE(t.shares_storage(Tensor()));
}

// An empty tensor has no buffer (a null data pointer): zeros() cleared it with memset anyway,
// undefined behaviour that UBSan reports (tools/sanitize.sh).
TEST(Tensor, ZerosOfAnEmptyShape) {
  for (DType dtype : {DType::kF32, DType::kE4M3, DType::kI64}) {
    const Tensor t = Tensor::zeros({0, 4}, dtype);
    EXPECT_EQ(t.numel(), 0);
    EXPECT_EQ(t.nbytes(), 0u);
    EXPECT_EQ(t.shape(), (Shape{0, 4}));
  }
}

TEST(Tensor, NegativeShapeIsRejected) {
  EXPECT_THAT(error_of([] {
                Tensor::empty({2, -3}, DType::kF32);
              }),
              HasSubstr("shape (2, -3) has a negative dimension"));
}

TEST(Tensor, ZerosFullAndFromBytes) {
  EXPECT_EQ(Tensor::zeros({2, 3}, DType::kF16).to_floats(), std::vector<float>(6, 0.f));
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(Tensor::full({2, 2}, 1.00390625f, DType::kBF16).to_floats(),
            std::vector<float>(4, 1.f));
  const int32_t raw[] = {7, -8, 1 << 20};
  Tensor t = Tensor::from_bytes(raw, {3}, DType::kI32);
  EXPECT_NE(t.data(), static_cast<const void*>(raw));  // a copy, not a wrapper
  EXPECT_EQ(t.to_floats(), (std::vector<float>{7.f, -8.f, 1048576.f}));
}

TEST(Tensor, ReshapeSharesStorageAndInfersMinusOne) {
  Tensor t = Tensor::from_floats(iota(24), {2, 3, 4});
  const Tensor a = t.reshape({6, -1});
  EXPECT_EQ(a.shape(), (Shape{6, 4}));
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{24}));
  EXPECT_EQ(t.reshape({2, -1, 3}).shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(t.reshape({1, 24, 1}).shape(), (Shape{1, 24, 1}));
  EXPECT_TRUE(a.shares_storage(t));
  EXPECT_EQ(a.data(), t.data());
  a.data_as<float>();  // const view: typed read access compiles and passes the size check
  Tensor b = a;
  b.data_as<float>()[5] = -1.f;  // element 5 of the view is element 5 of the base
  EXPECT_EQ(t.to_floats()[5], -1.f);
  EXPECT_EQ(Tensor::empty({0, 4}, DType::kF32).reshape({2, 0, 2}).numel(), 0);
  EXPECT_EQ(Tensor::from_floats({3.f}, {}).reshape({1, 1}).item(), 3.f);
}

TEST(Tensor, ReshapeErrorsNameTheShapes) {
  const Tensor t = Tensor::empty({2, 3}, DType::kF32);
  EXPECT_THAT(error_of([&] {
                t.reshape({4, 2});
              }),
              HasSubstr("reshape of (2, 3) (6 elements) to (4, 2) (8 elements)"));
  EXPECT_THAT(error_of([&] {
                t.reshape({4, -1});
              }),
              HasSubstr("reshape of (2, 3) to (4, -1): 6 elements do not divide"));
  EXPECT_THAT(error_of([&] {
                t.reshape({-1, -1});
              }),
              HasSubstr("reshape to (-1, -1): only one -1 is allowed"));
  EXPECT_THAT(error_of([&] { t.reshape({-2, -3}); }), HasSubstr("(-2, -3): negative dimension"));
  EXPECT_THAT(error_of([&] { t.reshape({0, -1}); }), HasSubstr("do not divide"));
}

TEST(Tensor, SliceSharesStorageAtTheRightOffset) {
  // (5, 3) f32: row r holds 3r, 3r + 1, 3r + 2; a row is 12 bytes.
  Tensor base = Tensor::from_floats(iota(15), {5, 3});
  Tensor mid = base.slice(1, 4);
  EXPECT_EQ(mid.shape(), (Shape{3, 3}));
  EXPECT_TRUE(mid.shares_storage(base));
  EXPECT_EQ(mid.storage_offset(), 12u);
  EXPECT_EQ(mid.to_floats(), iota(9, 3.f));

  // A slice of a slice adds the offsets: rows 1..4 then 1..3 of that are base rows 2..3.
  Tensor inner = mid.slice(1, 3);
  EXPECT_EQ(inner.storage_offset(), 24u);
  EXPECT_EQ(inner.to_floats(), iota(6, 6.f));

  // Write through the view, read through the base: only base rows 2 and 3 change.
  float* p = inner.data_as<float>();
  for (int i = 0; i < 6; ++i) p[i] = -100.f - static_cast<float>(i);
  std::vector<float> want = iota(15);
  for (int i = 0; i < 6; ++i) want[6 + static_cast<size_t>(i)] = -100.f - static_cast<float>(i);
  EXPECT_EQ(base.to_floats(), want);

  // A reshape of a slice keeps its offset.
  EXPECT_EQ(mid.reshape({-1}).storage_offset(), 12u);
  EXPECT_EQ(mid.reshape({9}).to_floats()[0], 3.f);

  // Narrow dtypes and 3-d: (4, 2, 3) e4m3, a row is 6 bytes.
  const Tensor fp8 = Tensor::empty({4, 2, 3}, DType::kE4M3).slice(3, 4);
  EXPECT_EQ(fp8.storage_offset(), 18u);
  EXPECT_EQ(fp8.shape(), (Shape{1, 2, 3}));
}

TEST(Tensor, SliceBounds) {
  const Tensor t = Tensor::empty({5, 3}, DType::kF32);
  EXPECT_EQ(t.slice(5, 5).numel(), 0);
  EXPECT_EQ(t.slice(0, 5).to_floats().size(), 15u);
  EXPECT_THAT(error_of([&] { t.slice(2, 6); }),
              HasSubstr("slice [2, 6) out of range for dimension 0 of shape (5, 3)"));
  EXPECT_THAT(error_of([&] { t.slice(3, 2); }), HasSubstr("slice [3, 2)"));
  EXPECT_THAT(error_of([&] { t.slice(-1, 2); }), HasSubstr("slice [-1, 2)"));
  EXPECT_THAT(error_of([] { Tensor::empty({}, DType::kF32).slice(0, 0); }), HasSubstr("0-d"));
}

TEST(Tensor, CloneIsADeepCopy) {
  Tensor base = Tensor::from_floats(iota(12), {4, 3}, DType::kF16);
  Tensor copy = base.clone();
  EXPECT_FALSE(copy.shares_storage(base));
  EXPECT_EQ(copy.shape(), base.shape());
  EXPECT_EQ(copy.dtype(), DType::kF16);
  EXPECT_EQ(copy.to_floats(), iota(12));
  base.data_as<uint16_t>()[0] = 0x4000;  // 2.0 in f16, written to the original only
  EXPECT_EQ(copy.to_floats()[0], 0.f);
  copy.data_as<uint16_t>()[11] = 0;
  EXPECT_EQ(base.to_floats()[11], 11.f);

  // The clone of a slice starts at offset 0 and holds only the slice.
  const Tensor part = base.slice(2, 4).clone();
  EXPECT_EQ(part.storage_offset(), 0u);
  EXPECT_EQ(part.storage()->nbytes(), 12u);
  EXPECT_EQ(part.to_floats(), iota(6, 6.f));
}

TEST(Tensor, VersionIsPerStorage) {
  Tensor base = Tensor::zeros({4, 2}, DType::kF32);
  const Tensor view = base.slice(1, 2);
  const Tensor clone = base.clone();
  EXPECT_EQ(base.version(), 0u);
  view.bump_version();  // a write through the view is a write to the base
  EXPECT_EQ(base.version(), 1u);
  EXPECT_EQ(view.version(), 1u);
  base.reshape({8}).bump_version();
  EXPECT_EQ(view.version(), 2u);
  EXPECT_EQ(clone.version(), 0u);  // a deep copy has its own counter
}

TEST(Tensor, FromFloatsRoundsToNearestEven) {
  // bf16 (7 mantissa bits, ulp 2^-7 in [1, 2)): 1 + 2^-8 ties down to 1; 1 + 3 * 2^-8 ties up
  // to the even 1 + 2^-6; 1 + 2^-8 + 2^-20 is past the tie and rounds up.
  EXPECT_EQ(Tensor::from_floats({1.00390625f, 1.01171875f, 1.00390720f, -3.f}, {4}, DType::kBF16)
                .to_floats(),
            (std::vector<float>{1.f, 1.015625f, 1.0078125f, -3.f}));
  // f16 (ulp 2^-10 in [1, 2)): 1 + 2^-11 -> 1; 1 + 3 * 2^-11 -> 1 + 2^-9; 65520 (the tie
  // above 65504) -> inf; 2^-24 is the smallest subnormal, exact.
  const std::vector<float> f16 =
      Tensor::from_floats({1.00048828125f, 1.00146484375f, 65520.f, 0x1p-24f}, {4}, DType::kF16)
          .to_floats();
  EXPECT_EQ(f16[0], 1.f);
  EXPECT_EQ(f16[1], 1.001953125f);
  EXPECT_EQ(f16[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16[3], 0x1p-24f);
  // e4m3 (ulp 1/8 in [1, 2), 1/32 in [1/4, 1/2)): 1.0625 ties to 1; 1.1875 ties to 1.25;
  // 0.3 = 9.6 / 32 -> 10 / 32; 500 saturates to 448; -1000 to -448.
  EXPECT_EQ(
      Tensor::from_floats({1.0625f, 1.1875f, 0.3f, 500.f, -1000.f}, {5}, DType::kE4M3).to_floats(),
      (std::vector<float>{1.f, 1.25f, 0.3125f, 448.f, -448.f}));
  // The stored bits, not only the values: 1.25 = 0 0111 010.
  EXPECT_EQ(Tensor::from_floats({1.25f}, {1}, DType::kE4M3).data_as<uint8_t>()[0], 0x3A);
  EXPECT_THAT(error_of([] {
                Tensor::from_floats({1, 2, 3}, {2, 2});
              }),
              HasSubstr("3 values do not fill shape (2, 2)"));
}

TEST(Tensor, ToFloatsAndItem) {
  const Tensor i64 = Tensor::from_floats({-5.f, 0.f, 1e9f}, {3}, DType::kI64);
  EXPECT_EQ(i64.data_as<int64_t>()[2], 1000000000);
  EXPECT_EQ(i64.to_floats(), (std::vector<float>{-5.f, 0.f, 1e9f}));
  EXPECT_EQ(Tensor::from_floats({2.5f}, {1, 1}, DType::kF16).item(), 2.5f);
  EXPECT_EQ(Tensor::full({}, -7.f, DType::kI32).item(), -7.f);
  EXPECT_EQ(Tensor::from_floats(iota(6), {2, 3}).slice(1, 2).slice(0, 1).to_floats(),
            (std::vector<float>{3.f, 4.f, 5.f}));
  EXPECT_THAT(error_of([] { Tensor::zeros({2}, DType::kF32).item(); }),
              HasSubstr("one-element tensor, got shape (2,)"));
  EXPECT_THAT(error_of([] { Tensor::zeros({0}, DType::kF32).item(); }), HasSubstr("(0,)"));
}

TEST(Tensor, DataAsChecksTheElementSize) {
  Tensor t = Tensor::zeros({4}, DType::kF32);
  EXPECT_NO_THROW(t.data_as<float>());
  EXPECT_NO_THROW(t.data_as<int32_t>());  // same size: allowed, the check is on size only
  EXPECT_THAT(error_of([&] { t.data_as<uint16_t>(); }),
              HasSubstr("typed access with a 2-byte type to a f32 tensor (4-byte elements)"));
  EXPECT_THAT(error_of([&] { t.data_as<double>(); }), HasSubstr("8-byte type"));
  const Tensor e5 = Tensor::zeros({4}, DType::kE5M2);
  EXPECT_NO_THROW(e5.data_as<uint8_t>());
  EXPECT_THAT(error_of([&] { e5.data_as<float>(); }), HasSubstr("e5m2 tensor (1-byte elements)"));
}

TEST(Tensor, DataIsAlignedForVectorLoads) {
  for (int64_t n : {1, 3, 17, 1000}) {
    const Tensor t = Tensor::empty({n}, DType::kU8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % kCpuAlignment, 0u) << n;
  }
}

TEST(Tensor, CopyBytesFromOverwritesInPlaceAndBumpsTheVersion) {
  Tensor dst = Tensor::from_floats({1, 2, 3, 4}, {2, 2}, DType::kBF16);
  const Tensor src = Tensor::from_floats({5, 6, 7, 8}, {4}, DType::kBF16);
  const void* storage_before = dst.data();
  const uint64_t version = dst.version();
  dst.copy_bytes_from(src);
  EXPECT_EQ(dst.to_floats(), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(dst.data(), storage_before);
  EXPECT_GT(dst.version(), version);
  const std::string e =
      test::error_of([&] { dst.copy_bytes_from(Tensor::zeros({4}, DType::kF32)); });
  EXPECT_NE(e.find("dtype and element count"), std::string::npos) << e;
}

TEST(Tensor, MoveStorageToItsOwnDeviceIsANoOpAndCudaWithoutAGpuIsAnError) {
  Tensor t = Tensor::from_floats({1, 2}, {2});
  const Tensor view = t.reshape({1, 2});
  const void* before = t.data();
  const MemoryStats stats = memory_stats();
  t.move_storage_to(Device::cpu());
  EXPECT_EQ(t.data(), before);
  EXPECT_EQ(memory_stats().total_current, stats.total_current);
  if (cuda_device_count() > 0) GTEST_SKIP() << "moves to CUDA are tested in tests/cuda";
  const std::string e = test::error_of([&] { t.move_storage_to(Device::cuda(0)); });
  EXPECT_NE(e.find("no CUDA device"), std::string::npos) << e;
  EXPECT_EQ(view.to_floats(), (std::vector<float>{1, 2})) << "a failed move lost the data";
}

TEST(Tensor, Printing) {
  EXPECT_EQ(str(Tensor::empty({4, 768}, DType::kF32)), "f32(4, 768)@cpu");
  EXPECT_EQ(str(Tensor::empty({5}, DType::kBF16)), "bf16(5,)@cpu");
  EXPECT_EQ(str(Tensor::empty({}, DType::kE4M3)), "e4m3()@cpu");
  EXPECT_EQ(str(Tensor::empty({2, 0, 3}, DType::kI64).slice(1, 2)), "i64(1, 0, 3)@cpu");
}

}  // namespace
}  // namespace octet
