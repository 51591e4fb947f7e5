// Blockwise FP8 and NVFP4 on CUDA against the CPU backend: the block casts (data, scales, the
// NVFP4 tensor amax, stochastic rounding's Philox draws, the Hadamard transforms, Quartet II's
// MS-EDEN) bit for bit, the
// expansions and transposes bit for bit, the GEMMs within f32 parity (the same exact expanded
// operands summed in another order), and the two quantizers with usage changes. The casts'
// saturated / flushed counts, kept on the device, equal the CPU's once taken.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/blockwise.h"
#include "kernels/nvfp4.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "runtime/blockwise_tensor.h"
#include "runtime/fp8_stats.h"
#include "runtime/nvfp4_tensor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::on_cpu;
using test::on_gpu;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Random values over many magnitudes (so blocks get very different scales) with the casts'
// special cases planted: values that saturate (+-inf, huge), values that flush (tiny next to
// their block's amax), NaN, signed zeros, and one block that is all zeros.
Tensor block_input(const Shape& shape, DType input, uint64_t seed) {
  std::vector<float> v = test::random_tensor(shape, DType::kF32, seed, 1.f).to_floats();
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v[i] *= std::ldexp(1.f, static_cast<int>((i * 7919) % 31) - 15);
  const std::vector<float> planted = {1e30f,   -1e30f, kInf, -kInf, 1e-30f,
                                      -1e-25f, kNaN,   -0.f, 0.f,   3e-40f};
  for (size_t k = 0; k < planted.size() && k < n; ++k) v[k * n / planted.size()] = planted[k];
  if (n >= 64) {
    for (size_t i = n / 2; i < n / 2 + 16; ++i) v[i] = 0.f;
  }
  if (n > 2 * planted.size()) v[n - 1] = kNaN;  // in the ragged last block
  return Tensor::from_floats(v, shape, input);
}

std::string name_of(DType d) { return std::string(dtype_name(d)); }

const ops::detail::Backend& gpu_backend() { return ops::detail::backend_for(test::gpu()); }
const ops::detail::Backend& cpu_backend() { return ops::detail::backend_for(Device::cpu()); }

// ---- blockwise FP8 ----

TEST(CudaBlockwise, QuantizeMatchesCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  const Shape shapes[] = {{1, 1}, {3, 40}, {128, 128}, {129, 300}, {257, 1000}, {2, 65, 384}};
  for (const Shape& shape : shapes) {
    for (DType input : {DType::kF32, DType::kBF16}) {
      const Tensor x = block_input(shape, input, 71);
      const Tensor xg = on_gpu(x);
      for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
        for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
          for (bool power_2 : {true, false}) {
            for (float eps : {0.f, 1e-3f}) {
              SCOPED_TRACE(shape_str(shape) + " " + name_of(input) + " -> " + name_of(fp8) +
                           (blocks == BlockScaling::k1D ? " 1x128" : " 128x128") +
                           (power_2 ? " pow2" : "") + " eps " + std::to_string(eps));
              const ops::BlockwiseCast cast{blocks, fp8_max(fp8), power_2, eps};
              const Shape s_shape = blockwise_scale_shape(blocks, x.rows(), x.cols());
              const Shape d_shape = {x.rows(), x.cols()};
              Tensor data = Tensor::empty(d_shape, fp8), s = Tensor::empty(s_shape, DType::kF32);
              FP8CastCounts counts;
              ops::quantize_blockwise(x, cast, data, s, &counts);
              Tensor dg = Tensor::empty(d_shape, fp8, test::gpu());
              Tensor sg = Tensor::empty(s_shape, DType::kF32, test::gpu());
              FP8CastCounts on_device;
              ops::quantize_blockwise(xg, cast, dg, sg, &on_device);
              EXPECT_TRUE(test::same_bits(sg, s)) << "scale_inv";
              EXPECT_TRUE(test::same_bits(dg, data)) << "data";
              EXPECT_EQ(counts.total, x.numel());
              settle_device_stats(on_device, nullptr);
              EXPECT_EQ(on_device.total, counts.total);
              EXPECT_EQ(on_device.saturated, counts.saturated) << "saturated";
              EXPECT_EQ(on_device.flushed, counts.flushed) << "flushed";
            }
          }
        }
      }
    }
  }
}

TEST(CudaBlockwise, SaturatingAndFlushingInputsAreCountedOnTheCpuAndCastAlikeOnTheGpu) {
  OCTET_REQUIRE_CUDA();
  // A huge block amax under a large epsilon-free scale leaves tiny values flushed; a non-power-of-
  // two scale near the max makes values round past it; inf gives the FLT_MAX / bf16-max scale.
  const Tensor x = block_input({64, 256}, DType::kF32, 72);
  const ops::BlockwiseCast cast{BlockScaling::k1D, kE4M3Max, false, 0.f};
  Tensor data = Tensor::empty({64, 256}, DType::kE4M3);
  Tensor s = Tensor::empty(blockwise_scale_shape(BlockScaling::k1D, 64, 256), DType::kF32);
  FP8CastCounts counts;
  ops::quantize_blockwise(x, cast, data, s, &counts);
  EXPECT_GT(counts.flushed, 0);
  EXPECT_GT(counts.saturated, 0);
  Tensor dg = Tensor::empty(data.shape(), DType::kE4M3, test::gpu());
  Tensor sg = Tensor::empty(s.shape(), DType::kF32, test::gpu());
  ops::quantize_blockwise(on_gpu(x), cast, dg, sg);
  EXPECT_TRUE(test::same_bits(dg, data));
  EXPECT_TRUE(test::same_bits(sg, s));
}

TEST(CudaBlockwise, DequantizeMatchesCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{3, 40}, Shape{129, 300}, Shape{256, 384}}) {
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
        const Tensor x = block_input(shape, DType::kF32, 73);
        const ops::BlockwiseCast cast{blocks, fp8_max(fp8), true, 0.f};
        Tensor data = Tensor::empty(shape, fp8);
        Tensor s = Tensor::empty(blockwise_scale_shape(blocks, x.rows(), x.cols()), DType::kF32);
        ops::quantize_blockwise(x, cast, data, s);
        for (DType out : {DType::kF32, DType::kBF16}) {
          const Tensor want = ops::dequantize_blockwise(data, s, blocks, out);
          const Tensor got = ops::dequantize_blockwise(on_gpu(data), on_gpu(s), blocks, out);
          EXPECT_TRUE(test::same_bits(got, want))
              << shape_str(shape) << " " << fp8 << (blocks == BlockScaling::k1D ? " 1D" : " 2D")
              << " -> " << out;
        }
      }
    }
  }
}

TEST(CudaBlockwise, TransposeScalesMatchesCpu) {
  OCTET_REQUIRE_CUDA();
  const Tensor src = test::random_tensor({3, 8}, DType::kF32, 74);
  Tensor want = Tensor::empty({7, 4}, DType::kF32);
  cpu_backend().transpose_scales(src, 3, 7, want);
  Tensor got = Tensor::empty({7, 4}, DType::kF32, test::gpu());
  gpu_backend().transpose_scales(on_gpu(src), 3, 7, got);
  EXPECT_TRUE(test::same_bits(got, want));
}

// Random operands blocked along K, quantized on the CPU and copied: both GEMMs multiply the same
// FP8 bytes and scales.
struct BlockOperand {
  Tensor data, scale_inv;
  BlockScaling blocks;
};
BlockOperand block_operand(int64_t rows, int64_t k, BlockScaling blocks, uint64_t seed) {
  const Tensor x = test::random_tensor({rows, k}, DType::kF32, seed, 2.f);
  BlockOperand op{Tensor::empty({rows, k}, DType::kE4M3),
                  Tensor::empty(blockwise_scale_shape(blocks, rows, k), DType::kF32), blocks};
  ops::quantize_blockwise(x, {blocks, kE4M3Max, true, 0.f}, op.data, op.scale_inv);
  return op;
}

// The expansion path (cuBLASLt's native block-scaled path, whose FP8 tensor cores sum with less
// than f32's precision, is held to its own bound in blockwise_gemm_test.cpp).
TEST(CudaBlockwise, GemmMatchesCpu) {
  OCTET_REQUIRE_CUDA();
  const test::ScopedEnv expansion("OCTET_CUBLASLT_BLOCK_SCALING", "0");
  struct Case {
    int64_t m, n, k;
    BlockScaling a, b;
  };
  const Case cases[] = {{32, 48, 256, BlockScaling::k1D, BlockScaling::k1D},
                        {33, 17, 300, BlockScaling::k1D, BlockScaling::k2D},
                        {130, 64, 200, BlockScaling::k2D, BlockScaling::k1D},
                        {16, 144, 128, BlockScaling::k1D, BlockScaling::k2D}};
  for (const Case& c : cases) {
    for (bool with_bias : {false, true}) {
      for (ops::Accumulate acc : {ops::Accumulate::kNo, ops::Accumulate::kYes}) {
        SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                     (with_bias ? " bias" : "") + (acc == ops::Accumulate::kYes ? " acc" : ""));
        const BlockOperand a = block_operand(c.m, c.k, c.a, 75);
        const BlockOperand b = block_operand(c.n, c.k, c.b, 76);
        const Tensor bias = test::random_tensor({c.n}, DType::kF32, 77);
        const Tensor init = test::random_tensor({c.m, c.n}, DType::kF32, 78);
        Tensor want = init.clone();
        ops::blockwise_gemm(a.data, a.scale_inv, a.blocks, b.data, b.scale_inv, b.blocks, want,
                            with_bias ? &bias : nullptr, acc);
        Tensor got = on_gpu(init);
        const Tensor bias_g = on_gpu(bias);
        ops::blockwise_gemm(on_gpu(a.data), on_gpu(a.scale_inv), a.blocks, on_gpu(b.data),
                            on_gpu(b.scale_inv), b.blocks, got, with_bias ? &bias_g : nullptr, acc);
        // The expanded operands are exact and equal: only the order of the f32 sums differs.
        EXPECT_TRUE(test::close_to(got, want, test::parity_tolerance(DType::kF32)));
      }
    }
  }
}

TEST(CudaBlockwise, QuantizerWithUsageChangesEqualsTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      SCOPED_TRACE(name_of(fp8) + (blocks == BlockScaling::k1D ? " 1D" : " 2D"));
      // Shared: a 1x128 direction is made again from the source by the tensor's quantizer.
      const auto qp = std::make_shared<BlockwiseQuantizer>(fp8, blocks, true, 0.f);
      const BlockwiseQuantizer& q = *qp;
      const Tensor x = block_input({4, 48, 272}, DType::kBF16, 79);
      auto want = q.quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
      auto got = q.quantize(on_gpu(x), Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
      EXPECT_TRUE(test::same_quantized(*got, *want));
      // Drop the column-wise copy and make it again (2D: the byte and scale transpose; 1D: a
      // fresh cast of the source).
      const Tensor src_g = on_gpu(x);
      want->drop_usage(Usage::kColumnwise);
      got->drop_usage(Usage::kColumnwise);
      ops::update_usage(*want, Usage::kBoth, &x);
      ops::update_usage(*got, Usage::kBoth, &src_g);
      EXPECT_TRUE(test::same_quantized(*got, *want)) << "after update_usage";
      EXPECT_TRUE(
          test::same_bits(ops::dequantize(*got, DType::kF32), ops::dequantize(*want, DType::kF32)));
    }
  }
}

// ---- NVFP4 ----

TEST(CudaNvfp4, Hadamard16MatchesCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (DType input : {DType::kF32, DType::kBF16}) {
    std::vector<float> v = block_input({48, 96}, DType::kF32, 80).to_floats();
    // inf - inf inside one group (the default NaN), and a group with a NaN after an inf.
    v[17] = kInf;
    v[18] = -kInf;
    v[33] = kInf;
    v[40] = -kNaN;
    const Tensor x = Tensor::from_floats(v, {48, 96}, input);
    for (bool inverse : {false, true}) {
      const Tensor want = ops::hadamard16(x, inverse);
      const Tensor got = ops::hadamard16(on_gpu(x), inverse);
      EXPECT_TRUE(test::same_bits(got, want)) << name_of(input) << (inverse ? " inverse" : "");
    }
  }
}

struct NVFP4Out {
  Tensor data, scales, amax;
};
NVFP4Out nvfp4_out(int64_t rows, int64_t cols, Device device) {
  return {Tensor::empty(nvfp4_data_shape(rows, cols), DType::kU8, device),
          Tensor::empty(nvfp4_scale_shape(rows, cols), DType::kE4M3, device),
          Tensor::empty({1}, DType::kF32, device)};
}

// Casts x on the CPU and xg (the same values) on the device; expects the same amax, scales, data
// and counts; returns the two results (CPU first).
std::pair<NVFP4Out, NVFP4Out> expect_nvfp4_cast_matches_cpu(const Tensor& x, const Tensor& xg,
                                                            const ops::NVFP4Cast& cast) {
  const int64_t rows = x.rows(), cols = x.cols();
  NVFP4Out want = nvfp4_out(rows, cols, Device::cpu());
  FP8CastCounts counts;
  ops::quantize_nvfp4(x, cast, want.data, want.scales, want.amax, &counts);
  NVFP4Out got = nvfp4_out(rows, cols, test::gpu());
  FP8CastCounts on_device;
  ops::quantize_nvfp4(xg, cast, got.data, got.scales, got.amax, &on_device);
  EXPECT_TRUE(test::same_bits(got.amax, want.amax)) << "amax";
  EXPECT_TRUE(test::same_bits(got.scales, want.scales)) << "scales";
  EXPECT_TRUE(test::same_bits(got.data, want.data)) << "data";
  EXPECT_EQ(counts.total, x.numel());
  settle_device_stats(on_device, nullptr);
  EXPECT_EQ(on_device.total, counts.total);
  EXPECT_EQ(on_device.saturated, counts.saturated) << "saturated";
  EXPECT_EQ(on_device.flushed, counts.flushed) << "flushed";
  return {std::move(want), std::move(got)};
}

TEST(CudaNvfp4, QuantizeMatchesCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  const Shape shapes[] = {{16, 16}, {32, 48}, {48, 272}, {160, 1040}, {2, 8, 528}};
  // Offsets that start mid Philox block and that carry into the counter's high word.
  const uint64_t offsets[] = {0, 3, (uint64_t{1} << 34) - 5};
  for (const Shape& shape : shapes) {
    for (DType input : {DType::kF32, DType::kBF16}) {
      const Tensor x = block_input(shape, input, 81);
      const Tensor xg = on_gpu(x);
      for (bool tiles : {false, true}) {
        for (bool rht : {false, true}) {
          for (bool sr : {false, true}) {
            for (uint64_t offset : offsets) {
              if (!sr && offset != 0) continue;
              SCOPED_TRACE(shape_str(shape) + " " + name_of(input) + (tiles ? " 16x16" : " 1x16") +
                           (rht ? " rht" : "") + (sr ? " sr@" + std::to_string(offset) : ""));
              ops::NVFP4Cast cast;
              cast.tiles_2d = tiles;
              cast.hadamard = rht;
              cast.stochastic = sr;
              cast.seed = 0x1234ABCDull;
              cast.offset = offset;
              expect_nvfp4_cast_matches_cpu(x, xg, cast);
            }
          }
        }
      }
    }
  }
}

TEST(CudaNvfp4, AllZeroAndAllNaNInputsMatchCpu) {
  OCTET_REQUIRE_CUDA();
  for (float fill : {0.f, kNaN, kInf}) {
    const Tensor x = Tensor::full({32, 64}, fill, DType::kF32);
    ops::NVFP4Cast cast;
    NVFP4Out want = nvfp4_out(32, 64, Device::cpu());
    ops::quantize_nvfp4(x, cast, want.data, want.scales, want.amax);
    NVFP4Out got = nvfp4_out(32, 64, test::gpu());
    ops::quantize_nvfp4(on_gpu(x), cast, got.data, got.scales, got.amax);
    EXPECT_TRUE(test::same_bits(got.amax, want.amax)) << fill;
    EXPECT_TRUE(test::same_bits(got.scales, want.scales)) << fill;
    EXPECT_TRUE(test::same_bits(got.data, want.data)) << fill;
  }
}

// 4over6 (each block keeps the nearer of its map-to-4 and map-to-6 casts): the device's choice,
// scales and data equal the CPU's for both error modes, both bounds, 1x16 blocks and 16x16 tiles,
// and its dequantization under the 256 bound equals the CPU's.
TEST(CudaNvfp4, FourOverSixCastAndDequantizeMatchCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 272}, Shape{2, 8, 528}}) {
    for (DType input : {DType::kF32, DType::kBF16}) {
      const Tensor x = block_input(shape, input, 83);
      const Tensor xg = on_gpu(x);
      const int64_t rows = x.rows(), cols = x.cols();
      for (bool tiles : {false, true}) {
        for (bool mse : {false, true}) {
          for (float bound : {448.f, 256.f}) {
            SCOPED_TRACE(shape_str(shape) + " " + name_of(input) + (tiles ? " 16x16" : " 1x16") +
                         (mse ? " mse" : " mae") + " bound " + std::to_string(bound));
            ops::NVFP4Cast cast;
            cast.tiles_2d = tiles;
            cast.four_over_six = true;
            cast.squared_error = mse;
            cast.e4m3_max = bound;
            const auto [want, got] = expect_nvfp4_cast_matches_cpu(x, xg, cast);
            for (DType out : {DType::kF32, DType::kBF16}) {
              EXPECT_TRUE(test::same_bits(
                  ops::dequantize_nvfp4(got.data, got.scales, got.amax, rows, cols, out, bound),
                  ops::dequantize_nvfp4(want.data, want.scales, want.amax, rows, cols, out, bound)))
                  << name_of(out);
            }
          }
        }
      }
    }
  }
}

TEST(CudaNvfp4, Quartet2TransformAndMsEdenCastMatchCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{16, 128}, Shape{48, 384}, Shape{2, 8, 256}}) {
    for (DType input : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(shape_str(shape) + " " + name_of(input));
      const Tensor x = block_input(shape, input, 84);
      for (bool inverse : {false, true}) {
        EXPECT_TRUE(test::same_bits(ops::rht128(on_gpu(x), 9, 512, inverse),
                                    ops::rht128(x, 9, 512, inverse)))
            << (inverse ? "inverse" : "forward");
      }
      const Tensor v = ops::rht128(x, 9, 512);
      const int64_t rows = v.rows(), cols = v.cols();
      NVFP4Out want = nvfp4_out(rows, cols, Device::cpu());
      NVFP4Out got = nvfp4_out(rows, cols, test::gpu());
      ops::quantize_nvfp4_eden(v.reshape({rows, cols}), 9, 640, want.data, want.scales, want.amax);
      ops::quantize_nvfp4_eden(on_gpu(v).reshape({rows, cols}), 9, 640, got.data, got.scales,
                               got.amax);
      EXPECT_TRUE(test::same_bits(got.amax, want.amax)) << "decode scale";
      EXPECT_TRUE(test::same_bits(got.scales, want.scales)) << "scales";
      EXPECT_TRUE(test::same_bits(got.data, want.data)) << "data";
    }
  }
}

TEST(CudaNvfp4, ExpandAndDequantizeMatchCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 272}, Shape{160, 1040}}) {
    for (bool tiles : {false, true}) {
      const Tensor x = block_input(shape, DType::kF32, 82);
      const int64_t rows = x.rows(), cols = x.cols();
      ops::NVFP4Cast cast;
      cast.tiles_2d = tiles;
      NVFP4Out q = nvfp4_out(rows, cols, Device::cpu());
      ops::quantize_nvfp4(x, cast, q.data, q.scales, q.amax);
      const Tensor dg = on_gpu(q.data), sg = on_gpu(q.scales), ag = on_gpu(q.amax);
      for (DType out : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(shape_str(shape) + (tiles ? " 16x16 -> " : " 1x16 -> ") + name_of(out));
        EXPECT_TRUE(test::same_bits(ops::expand_nvfp4(dg, sg, rows, cols, out),
                                    ops::expand_nvfp4(q.data, q.scales, rows, cols, out)));
        EXPECT_TRUE(
            test::same_bits(ops::dequantize_nvfp4(dg, sg, ag, rows, cols, out),
                            ops::dequantize_nvfp4(q.data, q.scales, q.amax, rows, cols, out)));
      }
    }
  }
}

TEST(CudaNvfp4, TransposeTilesMatchesCpu) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 32}, Shape{32, 1040}}) {
    const int64_t rows = shape[0], cols = shape[1];
    const Tensor x = block_input(shape, DType::kF32, 83);
    ops::NVFP4Cast cast;
    cast.tiles_2d = true;
    NVFP4Out q = nvfp4_out(rows, cols, Device::cpu());
    ops::quantize_nvfp4(x, cast, q.data, q.scales, q.amax);
    NVFP4Out want = nvfp4_out(cols, rows, Device::cpu());
    cpu_backend().transpose_nvfp4_tiles(q.data, q.scales, rows, cols, want.data, want.scales);
    NVFP4Out got = nvfp4_out(cols, rows, test::gpu());
    gpu_backend().transpose_nvfp4_tiles(on_gpu(q.data), on_gpu(q.scales), rows, cols, got.data,
                                        got.scales);
    EXPECT_TRUE(test::same_bits(got.data, want.data)) << shape_str(shape);
    EXPECT_TRUE(test::same_bits(got.scales, want.scales)) << shape_str(shape);
  }
}

// The quantizer of each role (stochastic rounding from a host stream, the transform on the
// column-wise copy, 16x16 weight tiles) and the format's GEMM and dequantization.
TEST(CudaNvfp4, QuantizersGemmAndDequantizeEqualTheCpu) {
  OCTET_REQUIRE_CUDA();
  const Tensor a_src = test::random_tensor({64, 96}, DType::kF32, 84, 2.f);
  const Tensor b_src = test::random_tensor({48, 96}, DType::kF32, 85, 2.f);
  for (NVFP4Role role : {NVFP4Role::kActivation, NVFP4Role::kWeight, NVFP4Role::kGradient}) {
    SCOPED_TRACE(static_cast<int>(role));
    const bool sr = role == NVFP4Role::kGradient;
    auto rng_for = [&] {
      Tensor rng = Tensor::empty({2}, DType::kI64);
      rng.data_as<int64_t>()[0] = 99;
      rng.data_as<int64_t>()[1] = 5;
      return sr ? rng : Tensor();
    };
    const NVFP4Quantizer qc(role, true, true, sr, rng_for());
    const NVFP4Quantizer qg(role, true, true, sr, rng_for());
    auto want = qc.quantize(a_src, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    auto got = qg.quantize(on_gpu(a_src), Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    EXPECT_TRUE(test::same_quantized(*got, *want));
    EXPECT_TRUE(
        test::same_bits(ops::dequantize(*got, DType::kF32), ops::dequantize(*want, DType::kF32)));
    // Forward-style GEMM of two row-wise operands: out (64, 48).
    auto wb = qc.quantize(b_src, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
    auto gb = qg.quantize(on_gpu(b_src), Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
    EXPECT_TRUE(test::same_quantized(*gb, *wb));
    const Tensor out_c = ops::fp8_gemm(*want, *wb, ops::GemmLayout::kFprop, DType::kF32);
    const Tensor out_g = ops::fp8_gemm(*got, *gb, ops::GemmLayout::kFprop, DType::kF32);
    EXPECT_TRUE(test::close_to(out_g, out_c, test::parity_tolerance(DType::kF32)));
  }
}

}  // namespace
}  // namespace octet
