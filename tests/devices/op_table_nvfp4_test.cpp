// The op table's NVFP4 cases (tests/devices/op_table_test.cpp runs them): the casts, 4over6,
// Quartet II, the tile transpose and the quantizer.
#include <string>
#include <vector>

#include "kernels/nvfp4.h"
#include "kernels/ops.h"
#include "kernels/quantizer.h"
#include "runtime/nvfp4_tensor.h"
#include "runtime/rng.h"
#include "tests/support/op_table_cases.h"

namespace octet::op_table {
namespace {

void hadamard16_case(OpRun& r) {
  std::vector<float> v = block_input({48, 96}, kF32, 80).to_floats();
  // inf - inf inside one group (the default NaN), and a group with a NaN after an inf.
  v[17] = kInf;
  v[18] = -kInf;
  v[33] = kInf;
  v[40] = -kNaN;
  const Tensor x = r.in(Tensor::from_floats(v, {48, 96}, r.dtype()));
  r.bits("forward", ops::hadamard16(x));
  r.bits("inverse", ops::hadamard16(x, true));
}

struct Nvfp4 {
  Tensor data, scales, amax;
};
Nvfp4 nvfp4_out(OpRun& r, int64_t rows, int64_t cols) {
  return {r.poisoned(nvfp4_data_shape(rows, cols), DType::kU8),
          r.poisoned(nvfp4_scale_shape(rows, cols), kE4M3), r.poisoned({1}, kF32)};
}
Nvfp4 cast_nvfp4(OpRun& r, const Tensor& x, const ops::NVFP4Cast& cast) {
  Nvfp4 q = nvfp4_out(r, x.rows(), x.cols());
  FP8CastCounts c;
  ops::quantize_nvfp4(x, cast, q.data, q.scales, q.amax, &c);
  r.bits("amax", q.amax);
  r.bits("scales", q.scales);
  r.bits("data", q.data);
  counts(r, c);
  return q;
}

void quantize_nvfp4_case(OpRun& r) {
  const Shape shapes[] = {{16, 16}, {32, 48}, {48, 272}, {160, 1040}, {2, 8, 528}};
  // Offsets that start mid Philox block and that carry into the counter's high word.
  const uint64_t offsets[] = {0, 3, (uint64_t{1} << 34) - 5};
  for (const Shape& shape : shapes) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 81));
    for (bool tiles : {false, true}) {
      for (bool rht : {false, true}) {
        for (bool sr : {false, true}) {
          for (uint64_t offset : offsets) {
            if (!sr && offset != 0) continue;
            auto s = r.scope(shape_str(shape) + (tiles ? " 16x16" : " 1x16") + (rht ? " rht" : "") +
                             (sr ? " sr at " + std::to_string(offset) : ""));
            ops::NVFP4Cast cast;
            cast.tiles_2d = tiles;
            cast.hadamard = rht;
            cast.stochastic = sr;
            cast.seed = 0x1234ABCDull;
            cast.offset = offset;
            cast_nvfp4(r, x, cast);
          }
        }
      }
    }
  }
  for (float fill : {0.f, kNaN, kInf}) {
    auto s = r.scope("all " + std::to_string(fill));
    cast_nvfp4(r, r.in(Tensor::full({32, 64}, fill, r.dtype())), {});
  }
}

// 4over6: each block keeps the nearer of its map-to-4 and map-to-6 casts, by either error, under
// either bound, 1x16 blocks and 16x16 tiles; and its dequantization under that bound.
void four_over_six_case(OpRun& r) {
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 272}, Shape{2, 8, 528}}) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 83));
    for (bool tiles : {false, true}) {
      for (bool mse : {false, true}) {
        for (float bound : {448.f, 256.f}) {
          auto s = r.scope(shape_str(shape) + (tiles ? " 16x16" : " 1x16") +
                           (mse ? " mse" : " mae") + " bound " + std::to_string(bound));
          ops::NVFP4Cast cast;
          cast.tiles_2d = tiles;
          cast.four_over_six = true;
          cast.squared_error = mse;
          cast.e4m3_max = bound;
          const Nvfp4 q = cast_nvfp4(r, x, cast);
          for (DType out : {kF32, kBF16}) {
            r.bits("dequantized to " + name(out),
                   ops::dequantize_nvfp4(q.data, q.scales, q.amax, x.rows(), x.cols(), out, bound));
          }
        }
      }
    }
  }
}

void quartet2_case(OpRun& r) {
  for (const Shape& shape : {Shape{16, 128}, Shape{48, 384}, Shape{2, 8, 256}}) {
    auto s = r.scope(shape_str(shape));
    const Tensor x = r.in(block_input(shape, r.dtype(), 84));
    r.bits("rht128", ops::rht128(x, 9, 512));
    r.bits("rht128 inverse", ops::rht128(x, 9, 512, true));
    const Tensor v = ops::rht128(x, 9, 512).reshape({x.rows(), x.cols()});
    Nvfp4 q = nvfp4_out(r, x.rows(), x.cols());
    ops::quantize_nvfp4_eden(v, 9, 640, q.data, q.scales, q.amax);
    r.bits("eden decode scale", q.amax);
    r.bits("eden scales", q.scales);
    r.bits("eden data", q.data);
  }
}

void expand_nvfp4_case(OpRun& r) {
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 272}, Shape{160, 1040}}) {
    for (bool tiles : {false, true}) {
      const int64_t rows = shape[0], cols = shape[1];
      ops::NVFP4Cast cast;
      cast.tiles_2d = tiles;
      Nvfp4 q{Tensor::empty(nvfp4_data_shape(rows, cols), DType::kU8),
              Tensor::empty(nvfp4_scale_shape(rows, cols), kE4M3), Tensor::empty({1}, kF32)};
      ops::quantize_nvfp4(block_input(shape, kF32, 82), cast, q.data, q.scales, q.amax);
      for (DType out : {kF32, kBF16}) {
        auto s = r.scope(shape_str(shape) + (tiles ? " 16x16" : " 1x16") + " to " + name(out));
        r.bits("expand", ops::expand_nvfp4(r.in(q.data), r.in(q.scales), rows, cols, out));
        r.bits("dequantize",
               ops::dequantize_nvfp4(r.in(q.data), r.in(q.scales), r.in(q.amax), rows, cols, out));
      }
    }
  }
}

void transpose_nvfp4_tiles_case(OpRun& r) {
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 32}, Shape{32, 1040}}) {
    auto s = r.scope(shape_str(shape));
    const int64_t rows = shape[0], cols = shape[1];
    ops::NVFP4Cast cast;
    cast.tiles_2d = true;
    Nvfp4 q{Tensor::empty(nvfp4_data_shape(rows, cols), DType::kU8),
            Tensor::empty(nvfp4_scale_shape(rows, cols), kE4M3), Tensor::empty({1}, kF32)};
    ops::quantize_nvfp4(block_input(shape, kF32, 83), cast, q.data, q.scales, q.amax);
    Nvfp4 t = nvfp4_out(r, cols, rows);
    ops::detail::backend_for(r.device())
        .transpose_nvfp4_tiles(r.in(q.data), r.in(q.scales), rows, cols, t.data, t.scales);
    r.bits("data", t.data);
    r.bits("scales", t.scales);
  }
}

// The quantizer of each role (stochastic rounding from a host stream, the transform on the
// column-wise copy, 16x16 weight tiles), its dequantization, and a forward GEMM of two row-wise
// operands (the expanded values are exact: only the order of the f32 sums differs).
void nvfp4_quantizer_case(OpRun& r) {
  const Tensor a = random_tensor({64, 96}, kF32, 84, 2.f),
               b = random_tensor({48, 96}, kF32, 85, 2.f);
  for (NVFP4Role role : {NVFP4Role::kActivation, NVFP4Role::kWeight, NVFP4Role::kGradient}) {
    auto s = r.scope("role " + std::to_string(static_cast<int>(role)));
    const bool sr = role == NVFP4Role::kGradient;
    Tensor rng;
    if (sr) rng = integers({99, 5}, {2}, DType::kI64);
    const NVFP4Quantizer q(role, true, true, sr, rng);
    auto qa = q.quantize(r.in(a), Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    record(r, "a", *qa);
    r.bits("a dequantized", ops::dequantize(*qa, kF32));
    auto qb = q.quantize(r.in(b), Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
    record(r, "b", *qb);
    std::vector<double> mag;
    if (!r.on_cpu()) {
      mag = gemm_magnitude(ops::dequantize(*qa, kF32), Transpose::kNo, ops::dequantize(*qb, kF32),
                           Transpose::kYes);
    }
    r.bounded("fprop", ops::fp8_gemm(*qa, *qb, ops::GemmLayout::kFprop, kF32), std::move(mag),
              test::gemm_accumulation_bound(false, 96));
  }
}

}  // namespace

std::vector<test::OpCase> nvfp4_cases() {
  return {
      {"hadamard16", {"hadamard16"}, kCastInputs, hadamard16_case},
      {"quantize_nvfp4", {"quantize_nvfp4"}, kCastInputs, quantize_nvfp4_case},
      {"nvfp4_4over6", {"quantize_nvfp4", "expand_nvfp4"}, kCastInputs, four_over_six_case},
      {"quartet2", {"rht128", "quantize_nvfp4_eden"}, kCastInputs, quartet2_case},
      {"expand_nvfp4", {"expand_nvfp4"}, {kF32}, expand_nvfp4_case},
      {"transpose_nvfp4_tiles", {"transpose_nvfp4_tiles"}, {kF32}, transpose_nvfp4_tiles_case},
      {"nvfp4_quantizer",
       {"quantize_nvfp4", "hadamard16", "expand_nvfp4", "gemm"},
       {kF32},
       nvfp4_quantizer_case},
  };
}

}  // namespace octet::op_table
