// FP8 on CUDA against the CPU backend, bit for bit: the per-tensor cast (row-wise, column-wise,
// amax), the byte transpose, dequantization, the MXFP8 block cast both ways, and the three
// quantizers (delayed, current, MXFP8) with usage changes and in-place requantization. Both
// backends apply runtime/fp8.h's rule to the same f32 products, so nothing here has a tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/memory.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::on_cpu;
using test::on_gpu;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Random values (std `std`) with the cast's special cases planted over the whole tensor, so that
// several blocks and tiles meet them: values that saturate (above the format's max after scaling,
// +-inf), tiny values that flush to zero, NaN, signed zeros.
Tensor with_specials(const Shape& shape, DType input, uint64_t seed, float std) {
  std::vector<float> v = test::random_tensor(shape, DType::kF32, seed, std).to_floats();
  const std::vector<float> planted = {1e9f, -1e9f, kInf, -kInf, 1e-9f, -1e-12f, kNaN, -0.f, 0.f};
  const size_t n = v.size();
  for (size_t k = 0; k < planted.size() && k < n; ++k) v[k * n / planted.size()] = planted[k];
  if (n > 2 * planted.size()) v[n - 1] = kNaN;  // the very last element, in the ragged tile
  return Tensor::from_floats(v, shape, input);
}

// ---- per-tensor cast ----

TEST(CudaFp8Cast, QuantizeFp8MatchesCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  const Shape shapes[] = {{129, 300}, {1, 16}, {3, 37, 300}, {1024, 3072}, {4097, 33}};
  for (const Shape& shape : shapes) {
    for (DType input : {DType::kF32, DType::kBF16}) {
      for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
        SCOPED_TRACE(shape_str(shape) + " " + std::string(dtype_name(input)) + " -> " +
                     std::string(dtype_name(fp8)));
        const Tensor x = with_specials(shape, input, 3, 50.f);
        const Tensor scale = test::scalar(fp8 == DType::kE4M3 ? 7.f : 300.f);
        const Shape col_shape = {x.cols(), x.rows()};
        Tensor row = Tensor::empty(shape, fp8), col = Tensor::empty(col_shape, fp8);
        // amax starts non-zero and below the data's max |x| (1e9 planted): max-accumulated.
        Tensor amax = test::scalar(5.f);
        ops::quantize_fp8(x, scale, &row, &col, &amax);

        Tensor rg = Tensor::empty(shape, fp8, test::gpu());
        Tensor cg = Tensor::empty(col_shape, fp8, test::gpu());
        Tensor ag = test::scalar(5.f, test::gpu());
        ops::quantize_fp8(on_gpu(x), on_gpu(scale), &rg, &cg, &ag);
        EXPECT_TRUE(test::same_bits(rg, row)) << "row-wise";
        EXPECT_TRUE(test::same_bits(cg, col)) << "column-wise";
        EXPECT_TRUE(test::same_bits(ag, amax)) << "amax";
      }
    }
  }
}

TEST(CudaFp8Cast, RowwiseOnlyColumnwiseOnlyAndAmaxKeptWhenLarger) {
  OCTET_REQUIRE_CUDA();
  const Tensor x = with_specials({130, 257}, DType::kBF16, 4, 2.f);
  const Tensor scale = test::scalar(3.5f);
  Tensor row = Tensor::empty(x.shape(), DType::kE4M3);
  Tensor col = Tensor::empty({257, 130}, DType::kE4M3);
  ops::quantize_fp8(x, scale, &row, nullptr, nullptr);
  ops::quantize_fp8(x, scale, nullptr, &col, nullptr);

  Tensor rg = Tensor::empty(x.shape(), DType::kE4M3, test::gpu());
  Tensor cg = Tensor::empty({257, 130}, DType::kE4M3, test::gpu());
  ops::quantize_fp8(on_gpu(x), on_gpu(scale), &rg, nullptr, nullptr);
  ops::quantize_fp8(on_gpu(x), on_gpu(scale), nullptr, &cg, nullptr);
  EXPECT_TRUE(test::same_bits(rg, row));
  EXPECT_TRUE(test::same_bits(cg, col));

  // Without the huge planted values, a starting amax above every |x| stays as it was.
  const Tensor small = test::random_tensor({64, 48}, DType::kF32, 5);
  Tensor ag = test::scalar(1e6f, test::gpu());
  Tensor r2 = Tensor::empty({64, 48}, DType::kE4M3, test::gpu());
  ops::quantize_fp8(on_gpu(small), on_gpu(scale), &r2, nullptr, &ag);
  EXPECT_EQ(ag.item(), 1e6f);
  // From zero: exactly the CPU's amax.
  Tensor a0 = test::scalar(0.f, test::gpu()), a_cpu = test::scalar(0.f);
  Tensor r_cpu = Tensor::empty({64, 48}, DType::kE4M3);
  ops::quantize_fp8(on_gpu(small), on_gpu(scale), &r2, nullptr, &a0);
  ops::quantize_fp8(small, scale, &r_cpu, nullptr, &a_cpu);
  EXPECT_TRUE(test::same_bits(a0, a_cpu));
  EXPECT_TRUE(test::same_bits(r2, r_cpu));
}

TEST(CudaFp8Cast, Transpose2dEveryElementSize) {
  OCTET_REQUIRE_CUDA();
  const Shape shapes[] = {{45, 70}, {1, 1000}, {1000, 1}, {513, 1025}};
  for (DType d : {DType::kE4M3, DType::kU8, DType::kBF16, DType::kF16, DType::kF32, DType::kI32,
                  DType::kI64}) {
    for (const Shape& shape : shapes) {
      std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251) / 2.f;
      const Tensor x = Tensor::from_floats(v, shape, d);
      const Tensor got = ops::transpose_2d(on_gpu(x));
      EXPECT_TRUE(got.device().is_cuda());
      EXPECT_TRUE(test::same_bits(got, ops::transpose_2d(x))) << d << " " << shape_str(shape);
    }
  }
}

TEST(CudaFp8Cast, DequantizeEveryCodeTimesScaleInv) {
  OCTET_REQUIRE_CUDA();
  std::vector<uint8_t> codes(256 * 3);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7 % 256);
  for (DType d : {DType::kE4M3, DType::kE5M2}) {
    const Tensor q = Tensor::from_bytes(codes.data(), {48, 16}, d);
    for (float scale_inv : {0.125f, 0.3f, 3e-5f}) {
      for (DType out : {DType::kF32, DType::kBF16}) {
        const Tensor want = ops::dequantize_fp8(q, test::scalar(scale_inv), out);
        const Tensor got =
            ops::dequantize_fp8(on_gpu(q), test::scalar(scale_inv, test::gpu()), out);
        EXPECT_TRUE(test::same_bits(got, want)) << d << " * " << scale_inv << " -> " << out;
      }
    }
  }
}

// ---- MXFP8 ----

// Magnitudes that change from block to block in both directions (2^-40 .. 2^40), a zero block,
// blocks with +-inf and NaN, subnormals, and block maxima of exactly fp8_max times a power of
// two (the exponent must not round up).
Tensor mixed_magnitudes(const Shape& shape, DType input, uint64_t seed) {
  std::vector<float> v = test::random_tensor(shape, DType::kF32, seed).to_floats();
  const int64_t cols = shape.back();
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / cols, c = static_cast<int64_t>(i) % cols;
    v[i] = std::ldexp(v[i], static_cast<int>((r / 32 * 13 + r * 5 + c / 32 * 7) % 81) - 40);
  }
  if (v.size() >= 8 * 32) {
    for (size_t i = 0; i < 32; ++i) v[i] = 0.f;
    v[35] = kInf;
    v[73] = -kInf;
    v[97] = kNaN;
    for (size_t i = 128; i < 160; ++i) v[i] = 1e-40f * static_cast<float>(i) - 5.6e-39f;
    v[165] = -448.f * 0x1p-3f;
    v[222] = 57344.f * 0x1p5f;
  }
  return Tensor::from_floats(v, shape, input);
}

TEST(CudaMxfp8, QuantizeBothDirectionsBitForBit) {
  OCTET_REQUIRE_CUDA();
  const Shape shapes[] = {{1, 32}, {3, 40}, {16, 64}, {129, 300}, {993, 512}, {8, 32, 1024}};
  for (const Shape& shape : shapes) {
    for (DType input : {DType::kF32, DType::kBF16}) {
      for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
        SCOPED_TRACE(shape_str(shape) + " " + std::string(dtype_name(input)) + " -> " +
                     std::string(dtype_name(fp8)));
        const Tensor x = mixed_magnitudes(shape, input, 61);
        const int64_t rows = x.rows(), cols = x.cols();
        for (Usage direction : {Usage::kRowwise, Usage::kColumnwise}) {
          const bool row = direction == Usage::kRowwise;
          const Shape data_shape = row ? shape : Shape{cols, rows};
          const Shape scale_shape =
              row ? mxfp8_scale_shape(rows, cols) : mxfp8_scale_shape(cols, rows);
          Tensor data = Tensor::empty(data_shape, fp8);
          Tensor scales = Tensor::empty(scale_shape, DType::kE8M0);
          ops::quantize_mxfp8(x, direction, data, scales);
          Tensor dg = Tensor::empty(data_shape, fp8, test::gpu());
          Tensor sg = Tensor::empty(scale_shape, DType::kE8M0, test::gpu());
          ops::quantize_mxfp8(on_gpu(x), direction, dg, sg);
          EXPECT_TRUE(test::same_bits(sg, scales)) << usage_name(direction) << " exponents";
          EXPECT_TRUE(test::same_bits(dg, data)) << usage_name(direction) << " data";
        }
      }
    }
  }
}

TEST(CudaMxfp8, DequantizeIsTheCpusExactBlockProduct) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{64, 96}, Shape{3, 40}, Shape{257, 544}}) {
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      const Tensor x = mixed_magnitudes(shape, DType::kF32, 63);
      Tensor data = Tensor::empty(shape, fp8);
      Tensor scales = Tensor::empty(mxfp8_scale_shape(x.rows(), x.cols()), DType::kE8M0);
      ops::quantize_mxfp8(x, Usage::kRowwise, data, scales);
      for (DType out : {DType::kF32, DType::kBF16}) {
        const Tensor want = ops::dequantize_mxfp8(data, scales, out);
        const Tensor got = ops::dequantize_mxfp8(on_gpu(data), on_gpu(scales), out);
        EXPECT_TRUE(test::same_bits(got, want)) << shape_str(shape) << " " << fp8 << " -> " << out;
      }
    }
  }
}

// ---- quantizers ----

std::shared_ptr<DelayedScalingQuantizer> delayed_on(Device device, float scale, DType fp8,
                                                    const std::vector<float>& history) {
  const Tensor h = Tensor::from_floats(history, {static_cast<int64_t>(history.size())});
  return std::make_shared<DelayedScalingQuantizer>(test::scalar(scale, device),
                                                   device.is_cpu() ? h : h.to(device), fp8);
}

TEST(CudaQuantizer, DelayedScalingCastAndAmaxRecordEqualTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
    for (DType input : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(dtype_name(input)) + " -> " + std::string(dtype_name(fp8)));
      // history[0] starts at 3 (an earlier cast of this step), history[1] must stay untouched.
      const std::vector<float> history = {3.f, 99.f, 0.f, 0.f};
      auto cpu = delayed_on(Device::cpu(), 37.5f, fp8, history);
      auto gpu = delayed_on(test::gpu(), 37.5f, fp8, history);
      const Tensor x = with_specials({96, 200}, input, 31, 4.f);
      for (Usage usage : {Usage::kRowwise, Usage::kColumnwise, Usage::kBoth}) {
        auto want = cpu->quantize(x, usage, Ownership::kInternal, AmaxRecording::kRecord);
        auto got = gpu->quantize(on_gpu(x), usage, Ownership::kInternal, AmaxRecording::kRecord);
        EXPECT_EQ(got->device(), test::gpu());
        EXPECT_TRUE(test::same_quantized(*got, *want)) << usage_name(usage);
        EXPECT_TRUE(test::same_bits(gpu->amax_history(), cpu->amax_history())) << usage_name(usage);
      }
      // kSkip records nothing.
      const Tensor before = on_cpu(gpu->amax_history());
      const Tensor big = test::random_tensor({16, 16}, input, 32, 1e4f);
      gpu->quantize(on_gpu(big), Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip);
      EXPECT_TRUE(test::same_bits(gpu->amax_history(), before));
    }
  }
}

TEST(CudaQuantizer, CurrentScalingEqualsTheCpuIncludingPowerOfTwoScales) {
  OCTET_REQUIRE_CUDA();
  for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
    for (Power2Scale p2 : {Power2Scale::kOff, Power2Scale::kOn}) {
      for (float eps : {0.f, 1e-6f}) {
        const CurrentScalingQuantizer q(fp8, p2, eps);
        const Tensor inputs[] = {
            test::random_tensor({611, 782}, DType::kF32, 21, 3.f),
            test::random_tensor({17, 33}, DType::kBF16, 22, 1e-8f),  // amax under eps
            Tensor::zeros({4, 8}, DType::kF32),                      // amax 0: scale 1
            Tensor::from_floats({1.f, -kInf, 3.f, 0.5f}, {4}),       // amax inf: scale 1
            Tensor::from_floats({1.f, kNaN, -3.f, kNaN}, {4}),       // NaN ignored
            Tensor::from_floats({1e-39f, -5e-40f}, {2}),             // scale overflows: FLT_MAX
        };
        for (const Tensor& x : inputs) {
          SCOPED_TRACE(std::string(dtype_name(fp8)) + (p2 == Power2Scale::kOn ? " pow2" : "") +
                       " eps " + std::to_string(eps) + " " + shape_str(x.shape()));
          auto want = q.quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);
          auto got =
              q.quantize(on_gpu(x), Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);
          EXPECT_TRUE(test::same_quantized(*got, *want));
        }
      }
    }
  }
}

TEST(CudaQuantizer, Mxfp8QuantizerEqualsTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
    const MXFP8Quantizer q(fp8);
    for (const Shape& shape : {Shape{64, 96}, Shape{2, 128, 256}}) {
      const Tensor x = mixed_magnitudes(shape, DType::kBF16, 64);
      for (Usage usage : {Usage::kRowwise, Usage::kColumnwise, Usage::kBoth}) {
        auto want = q.quantize(x, usage, Ownership::kInternal, AmaxRecording::kSkip);
        auto got = q.quantize(on_gpu(x), usage, Ownership::kInternal, AmaxRecording::kSkip);
        EXPECT_TRUE(test::same_quantized(*got, *want))
            << fp8 << " " << shape_str(shape) << " " << usage_name(usage);
      }
    }
  }
}

TEST(CudaQuantizer, DequantizeFromEitherUsageEqualsTheCpu) {
  OCTET_REQUIRE_CUDA();
  const Tensor x = test::random_tensor({2, 64, 96}, DType::kF32, 23, 2.f);
  const std::shared_ptr<Quantizer> quantizers[] = {
      std::make_shared<CurrentScalingQuantizer>(DType::kE4M3, Power2Scale::kOff, 0.f),
      std::make_shared<MXFP8Quantizer>(DType::kE4M3)};
  for (const auto& q : quantizers) {
    auto want = q->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip);
    auto got = q->quantize(on_gpu(x), Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip);
    for (DType out : {DType::kF32, DType::kBF16}) {
      EXPECT_TRUE(test::same_bits(ops::dequantize(*got, out), ops::dequantize(*want, out)))
          << q->describe() << " row-wise -> " << out;
    }
    ops::update_usage(*want, Usage::kColumnwise);
    ops::update_usage(*got, Usage::kColumnwise);
    EXPECT_TRUE(
        test::same_bits(ops::dequantize(*got, DType::kF32), ops::dequantize(*want, DType::kF32)))
        << q->describe() << " column-wise";
  }
}

TEST(CudaQuantizer, UpdateUsageMakesAndDropsDataOnTheDevice) {
  OCTET_REQUIRE_CUDA();
  const Tensor x = test::random_tensor({993, 512}, DType::kBF16, 51, 4.f);
  // Per-tensor: column-wise data is the byte transpose of the row-wise data, made on the GPU.
  auto q = delayed_on(test::gpu(), 3.f, DType::kE4M3, {0.f});
  auto cq = delayed_on(Device::cpu(), 3.f, DType::kE4M3, {0.f});
  auto rows = q->quantize(on_gpu(x), Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
  auto both = cq->quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
  ops::update_usage(*rows, Usage::kBoth);
  EXPECT_TRUE(test::same_quantized(*rows, *both));
  // Dropping the row-wise data frees its bytes on the device.
  const int64_t before = memory_stats(test::gpu()).current_of(MemTag::kOther);
  ops::update_usage(*rows, Usage::kColumnwise);
  EXPECT_EQ(memory_stats(test::gpu()).current_of(MemTag::kOther), before - 993 * 512);
  EXPECT_EQ(rows->usage(), Usage::kColumnwise);
  EXPECT_THROW(ops::update_usage(*rows, Usage::kBoth), Error);

  // MXFP8: the missing direction is quantized from the source, on the source's device.
  const MXFP8Quantizer mx(DType::kE4M3);
  auto m = mx.quantize(on_gpu(x), Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
  const Tensor source = on_gpu(x);
  ops::update_usage(*m, Usage::kBoth, &source);
  auto m_cpu = mx.quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
  EXPECT_TRUE(test::same_quantized(*m, *m_cpu));
}

TEST(CudaQuantizer, QuantizeIntoEqualsTheCpuAndAFreshQuantize) {
  OCTET_REQUIRE_CUDA();
  const Tensor x1 = test::random_tensor({64, 96}, DType::kF32, 41, 2.f);
  const Tensor x2 = test::random_tensor({64, 96}, DType::kF32, 42, 5.f);
  // Delayed: the slot's scale moved since dst was made; the amax max-accumulates into history[0].
  {
    auto cpu = delayed_on(Device::cpu(), 1.5f, DType::kE4M3, {0.5f, 0.f});
    auto gpu = delayed_on(test::gpu(), 1.5f, DType::kE4M3, {0.5f, 0.f});
    auto want = cpu->quantize(x1, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    auto got = gpu->quantize(on_gpu(x1), Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    const auto& f = dynamic_cast<const Float8Tensor&>(*got);
    const Tensor row = f.rowwise_data();
    for (auto* q : {cpu.get(), gpu.get()}) {
      Tensor s = q->scale();
      ops::fill_(s, 0.625f);
    }
    const uint64_t version = got->version();
    ops::quantize_into(*want, x2, AmaxRecording::kRecord);
    ops::quantize_into(*got, on_gpu(x2), AmaxRecording::kRecord);
    EXPECT_GT(got->version(), version);
    EXPECT_TRUE(f.rowwise_data().shares_storage(row)) << "not in place";
    EXPECT_TRUE(test::same_quantized(*got, *want)) << "delayed";
    EXPECT_EQ(f.scale_inv().item(), static_cast<float>(1.0 / 0.625));
    EXPECT_TRUE(test::same_bits(gpu->amax_history(), cpu->amax_history()));
    auto fresh = gpu->quantize(on_gpu(x2), Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    EXPECT_TRUE(test::same_quantized(*got, *fresh)) << "delayed, fresh";
  }
  // Current and MXFP8: stateless, a new scale (exponents) from src.
  const std::shared_ptr<Quantizer> stateless[] = {
      std::make_shared<CurrentScalingQuantizer>(DType::kE5M2, Power2Scale::kOn, 0.f),
      std::make_shared<MXFP8Quantizer>(DType::kE4M3)};
  for (const auto& q : stateless) {
    auto want = q->quantize(x1, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    auto got = q->quantize(on_gpu(x1), Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    ops::quantize_into(*want, x2, AmaxRecording::kRecord);
    ops::quantize_into(*got, on_gpu(x2), AmaxRecording::kRecord);
    EXPECT_TRUE(test::same_quantized(*got, *want)) << q->describe();
    auto fresh = q->quantize(on_gpu(x2), Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    EXPECT_TRUE(test::same_quantized(*got, *fresh)) << q->describe() << ", fresh";
  }
}

}  // namespace
}  // namespace octet
