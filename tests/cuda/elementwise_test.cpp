// Elementwise arithmetic, conversions and reductions on CUDA against the CPU backend. Operations
// that are one IEEE f32 operation followed by one round-to-nearest-even store (add, sub, mul, div,
// scale, fill, cast, copy_) and order-free reductions (max, amax) must agree bit for bit; sums
// and the fused multiply-add of add_ within the f32 parity tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/ops.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::on_cpu;
using test::on_gpu;
using test::parity_tolerance;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
};

const BinaryCase kBinaryOps[] = {
    {"add", ops::add}, {"sub", ops::sub}, {"mul", ops::mul}, {"div", ops::div}};

TEST(CudaElementwise, BinaryOpsSameShapeAndRowBroadcastBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    // 3 x 50 x 70: rows of 70 that do not divide a block of threads; b's values stay away from
    // zero so that div has no infinities to compare.
    const Tensor a = test::random_tensor({3, 50, 70}, dtype, 1, 3.f);
    const Tensor b = ops::add(test::random_tensor({3, 50, 70}, DType::kF32, 2),
                              Tensor::full({70}, 4.f, DType::kF32));
    const Tensor same = ops::cast(b, dtype);
    const Tensor row = ops::cast(b.reshape({150, 70}).slice(7, 8).reshape({70}), dtype);
    for (const BinaryCase& op : kBinaryOps) {
      SCOPED_TRACE(std::string(op.name) + " " + std::string(dtype_name(dtype)));
      EXPECT_TRUE(test::same_bits(op.fn(on_gpu(a), on_gpu(same)), op.fn(a, same))) << "same shape";
      EXPECT_TRUE(test::same_bits(op.fn(on_gpu(a), on_gpu(row)), op.fn(a, row))) << "row";
    }
  }
}

TEST(CudaElementwise, MixedDtypesAndOddSizes) {
  OCTET_REQUIRE_CUDA();
  // bf16 a with an f32 row, f32 a with a bf16 operand: math in f32, stored as a's dtype. Sizes
  // 1, 31 and 100003 cover a single element, less than a warp, and many blocks with a tail.
  for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{100003}}) {
    const Tensor a = test::random_tensor({n}, DType::kBF16, 3);
    const Tensor b = test::random_tensor({n}, DType::kF32, 4);
    const Tensor c = test::random_tensor({n}, DType::kBF16, 5);
    EXPECT_TRUE(test::same_bits(ops::mul(on_gpu(a), on_gpu(b)), ops::mul(a, b))) << n;
    EXPECT_TRUE(test::same_bits(ops::sub(on_gpu(b), on_gpu(c)), ops::sub(b, c))) << n;
  }
  const Tensor x = test::random_tensor({17, 33}, DType::kBF16, 6);
  const Tensor row = test::random_tensor({33}, DType::kF32, 7);
  EXPECT_TRUE(test::same_bits(ops::add(on_gpu(x), on_gpu(row)), ops::add(x, row)));
}

TEST(CudaElementwise, ScaleAndScaleInPlace) {
  OCTET_REQUIRE_CUDA();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor x = test::random_tensor({129, 257}, dtype, 8, 2.f);
    EXPECT_TRUE(test::same_bits(ops::scale(on_gpu(x), -0.3f), ops::scale(x, -0.3f))) << dtype;
    Tensor cpu = x.clone(), gpu = on_gpu(x);
    const uint64_t version = gpu.version();
    ops::scale_(cpu, 1.7f);
    ops::scale_(gpu, 1.7f);
    EXPECT_GT(gpu.version(), version);
    EXPECT_TRUE(test::same_bits(gpu, cpu)) << dtype;
  }
}

TEST(CudaElementwise, AddInPlaceWithinTolerance) {
  OCTET_REQUIRE_CUDA();
  // dst + alpha * src may be one fused multiply-add on either side: not bit for bit.
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor d = test::random_tensor({1000, 77}, dtype, 9);
    const Tensor s = test::random_tensor({1000, 77}, DType::kF32, 10);
    Tensor cpu = d.clone(), gpu = on_gpu(d);
    const uint64_t version = gpu.version();
    ops::add_(cpu, s, -0.25f);
    ops::add_(gpu, on_gpu(s), -0.25f);
    EXPECT_GT(gpu.version(), version);
    EXPECT_TRUE(test::close_to(gpu, cpu, parity_tolerance(dtype))) << dtype;
  }
}

TEST(CudaElementwise, FillEveryDtypeButFp8) {
  OCTET_REQUIRE_CUDA();
  for (DType dtype :
       {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8}) {
    for (float value : {0.f, 7.f, 1.f / 3.f}) {
      Tensor cpu = Tensor::empty({37, 1001}, dtype),
             gpu = Tensor::empty({37, 1001}, dtype, test::gpu());
      ops::fill_(cpu, value);
      ops::fill_(gpu, value);
      EXPECT_TRUE(test::same_bits(gpu, cpu)) << dtype << " " << value;
    }
  }
  // Negative and non-finite values in the floating formats.
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (float value : {-2.5f, kInf, 1e30f}) {
      Tensor cpu = Tensor::empty({5, 3}, dtype), gpu = Tensor::empty({5, 3}, dtype, test::gpu());
      ops::fill_(cpu, value);
      ops::fill_(gpu, value);
      EXPECT_TRUE(test::same_bits(gpu, cpu)) << dtype << " " << value;
    }
  }
}

TEST(CudaElementwise, CastAndCopyRoundToNearestEvenBitForBit) {
  OCTET_REQUIRE_CUDA();
  // Random values plus the rounding cases: bf16 ties (1 + 2^-8 rounds to even), the f16
  // overflow tie 65520 (to inf), f16 subnormals, infinities and a large f32.
  Tensor x = test::random_tensor({64, 129}, DType::kF32, 11, 100.f);
  std::vector<float> v = x.to_floats();
  const std::vector<float> planted = {
      1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, -2.5f, 65520.f, 3e-6f, -1e-7f, kInf, -kInf, 3e38f, 0.f};
  std::copy(planted.begin(), planted.end(), v.begin());
  x = Tensor::from_floats(v, x.shape());
  const DType formats[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (DType from : formats) {
    const Tensor src = ops::cast(x, from);
    for (DType to : formats) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      EXPECT_TRUE(test::same_bits(ops::cast(on_gpu(src), to), ops::cast(src, to)));
      Tensor cpu = Tensor::empty(src.shape(), to),
             gpu = Tensor::empty(src.shape(), to, test::gpu());
      ops::copy_(cpu, src);
      ops::copy_(gpu, on_gpu(src));
      EXPECT_TRUE(test::same_bits(gpu, cpu));
    }
  }
}

TEST(CudaReductions, SumAndMeanWithinTheRoundingOfTheirTerms) {
  OCTET_REQUIRE_CUDA();
  // (257, 129) fits a few blocks; 2^20 + 3 elements need a second reduction pass and a tail.
  for (const Shape& shape : {Shape{257, 129}, Shape{(1 << 20) + 3}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Tensor x = test::random_tensor(shape, dtype, 12);
      double l1 = 0;
      for (float e : x.to_floats()) l1 += std::fabs(e);
      // A sum's rounding error scales with sum |x|, not with the sum (which cancels to ~sqrt(n)):
      // the f32 table's absolute floor per unit of sum |x|.
      const double tol = parity_tolerance(DType::kF32).abs * l1;
      const Tensor sum = ops::sum(on_gpu(x)), mean = ops::mean(on_gpu(x));
      EXPECT_TRUE(sum.device().is_cuda());
      EXPECT_EQ(sum.shape(), Shape({1}));
      EXPECT_NEAR(sum.item(), ops::sum(x).item(), tol) << shape_str(shape) << " " << dtype;
      EXPECT_NEAR(mean.item(), ops::mean(x).item(), tol / static_cast<double>(x.numel()))
          << shape_str(shape) << " " << dtype;
    }
  }
}

TEST(CudaReductions, MaxAndAmaxBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{1}, Shape{257, 129}, Shape{(1 << 20) + 3}}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      // All negative values too: max must not start from 0.
      const Tensor x = test::random_tensor(shape, dtype, 13, 5.f);
      const Tensor negative = ops::sub(x, Tensor::full({x.cols()}, 100.f, dtype));
      for (const Tensor& t : {x, negative}) {
        EXPECT_EQ(test::bits_of(ops::max(on_gpu(t)).item()), test::bits_of(ops::max(t).item()))
            << shape_str(shape) << " " << dtype;
        EXPECT_EQ(test::bits_of(ops::amax(on_gpu(t)).item()), test::bits_of(ops::amax(t).item()))
            << shape_str(shape) << " " << dtype;
      }
    }
  }
}

TEST(CudaReductions, AmaxIgnoresNanAndIsZeroWhenEmptyMaxPropagatesNan) {
  OCTET_REQUIRE_CUDA();
  // The NaN sits in a later block than the largest value, and in the first element.
  std::vector<float> v = test::random_tensor({70000}, DType::kF32, 14).to_floats();
  v[5] = -1e4f;
  v[69999] = kNaN;
  v[0] = kNaN;
  const Tensor x = Tensor::from_floats(v, {70000});
  EXPECT_EQ(ops::amax(on_gpu(x)).item(), 1e4f);
  EXPECT_EQ(ops::amax(x).item(), 1e4f);
  EXPECT_TRUE(std::isnan(ops::max(on_gpu(x)).item())) << "the CPU's max propagates NaN";
  // Infinity is a value, not ignored.
  v[7] = -kInf;
  EXPECT_EQ(ops::amax(on_gpu(Tensor::from_floats(v, {70000}))).item(), kInf);
  const Tensor empty = Tensor::zeros({0}, DType::kF32, test::gpu());
  const Tensor amax = ops::amax(empty);
  EXPECT_TRUE(amax.device().is_cuda());
  EXPECT_EQ(amax.item(), 0.f);
  EXPECT_EQ(ops::amax(Tensor::zeros({0, 16}, DType::kBF16, test::gpu())).item(), 0.f);
}

TEST(CudaReductions, SumRowsIsTheBiasGradient) {
  OCTET_REQUIRE_CUDA();
  // Many rows (the reduction is over the long dimension), narrow and wide rows, a 3-D input.
  for (const Shape& shape : {Shape{4, 6, 10}, Shape{4099, 3}, Shape{33, 1030}, Shape{1, 77}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Tensor x = test::random_tensor(shape, dtype, 15);
      const Tensor got = ops::sum_rows(on_gpu(x)), want = ops::sum_rows(x);
      // Per column, the error scales with sqrt(rows) of the terms: the f32 row of the table
      // widened by the depth of the sum over 4099 rows.
      const test::Tolerance tol = dtype == DType::kF32
                                      ? test::scaled(parity_tolerance(DType::kF32), 10)
                                      : parity_tolerance(DType::kBF16);
      EXPECT_TRUE(test::close_to(got, want, tol)) << shape_str(shape) << " " << dtype;
    }
  }
}

}  // namespace
}  // namespace octet
