// The op table's FP8 cast cases (tests/devices/op_table_test.cpp runs them): per-tensor,
// MXFP8, blockwise and row-wise casts, their quantizers and quantized tensors.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/blockwise.h"
#include "kernels/mxfp8.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "kernels/rowwise.h"
#include "runtime/blockwise_tensor.h"
#include "runtime/float8_tensor.h"
#include "runtime/fp8_meta.h"
#include "runtime/mxfp8_tensor.h"
#include "tests/support/mixed_magnitudes.h"
#include "tests/support/op_table_cases.h"
#include "tests/support/scoped_env.h"

namespace octet::op_table {
namespace {

using test::mixed_magnitudes;  // blocks of very different scales, with the special values

// NaNs of either sign and payload: the GPU's product makes a NaN canonical where x86 keeps its
// sign, so a cast must not depend on it.
const uint32_t kNaNBits[] = {0xFFC00000u, 0xFF800001u, 0x7FC00000u, 0xFFFFFFFFu};

// Random values (std `std`) with the casts' special cases planted over the whole tensor, so that
// several blocks and tiles meet them: values that saturate (above the format's max after
// scaling, +-inf), tiny values that flush to zero, NaN, signed zeros.
Tensor with_specials(const Shape& shape, DType input, uint64_t seed, float std) {
  std::vector<float> v = random_tensor(shape, kF32, seed, std).to_floats();
  const std::vector<float> planted = {1e9f, -1e9f, kInf, -kInf, 1e-9f, -1e-12f, kNaN, -0.f, 0.f};
  const size_t n = v.size();
  for (size_t k = 0; k < planted.size() && k < n; ++k) v[k * n / planted.size()] = planted[k];
  if (n > 2 * planted.size()) v[n - 1] = kNaN;  // the very last element, in the ragged tile
  return Tensor::from_floats(v, shape, input);
}

// 64 x 64 random values (one tile, two MXFP8 blocks per row) with the NaNs of kNaNBits at
// 5, 42, 79, 116.
Tensor with_negative_nans(DType input) {
  std::vector<float> v = random_tensor({64, 64}, kF32, 31).to_floats();
  for (size_t k = 0; k < std::size(kNaNBits); ++k)
    v[k * 37 + 5] = test::float_from_bits(kNaNBits[k]);
  return Tensor::from_floats(v, {64, 64}, input);
}
// The bytes of an FP8 cast of with_negative_nans where the NaNs were: 0x7F, whatever their sign.
void expect_nan_bytes(OpRun& r, const Tensor& q) {
  const Tensor h = test::on_cpu(q);
  for (size_t k = 0; k < std::size(kNaNBits); ++k) {
    r.expect(hex(kNaNBits[k]) + " casts to 0x7F", h.data_as<uint8_t>()[k * 37 + 5] == 0x7F);
  }
}

void expect_same(OpRun& r, const std::string& what, const QuantizedTensor& got,
                 const QuantizedTensor& want) {
  auto s = r.scope(what);
  r.expect("usage", got.usage() == want.usage());
  const std::vector<Tensor> g = got.held_tensors(), w = want.held_tensors();
  r.expect("buffers", g.size() == w.size());
  for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    r.same("buffer " + std::to_string(i), g[i], w[i]);
  }
}

// ===================================== per-tensor FP8 =====================================

// The values of `host` in a view that starts `k` elements into a new buffer on the run's device.
Tensor shifted(OpRun& r, const Tensor& host, int64_t k) {
  const int64_t n = host.numel();
  Tensor big = Tensor::zeros({n + k}, host.dtype());
  std::memcpy(static_cast<uint8_t*>(big.data()) + k * host.element_size(), host.data(),
              host.nbytes());
  return r.in(big).slice(k, n + k).reshape(host.shape());
}
// A poisoned output of `shape` that starts `k` elements into its buffer.
Tensor shifted_output(OpRun& r, const Shape& shape, DType dtype, int64_t k) {
  const int64_t n = shape_numel(shape);
  return r.poisoned({n + k}, dtype).slice(k, n + k).reshape(shape);
}

// The per-tensor cast's vector loads and stores against its one-element loops: shapes whose
// rows are and are not multiples of 8 (column-wise stores of 8 bytes), whose cols are and are not
// multiples of 8 and 4 (a 16-byte load holds 8 bf16 or 4 f32), one-row tensors; the input and
// the outputs at offsets that break each alignment. Every variant equals the aligned cast, which
// the table compares with the CPU, and writes scale_inv = 1 / scale.
void quantize_fp8_vector_paths(OpRun& r) {
  const Shape shapes[] = {{1, 1},   {1, 8},   {1, 136},  {3, 5},    {8, 36},   {8, 40},
                          {16, 64}, {24, 72}, {13, 128}, {64, 130}, {72, 200}, {2, 65, 24}};
  // (input offset in elements, output offset in bytes)
  const std::pair<int64_t, int64_t> offsets[] = {{1, 0}, {2, 0}, {4, 0}, {0, 1}, {0, 4}, {4, 4}};
  const float scale = 3.f;
  for (const Shape& shape : shapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor host = with_specials(shape, r.dtype(), 51, 30.f);
    const Tensor x = r.in(host);
    const Shape col_shape = {x.cols(), x.rows()};
    Tensor row = r.poisoned(shape, kE4M3), col = r.poisoned(col_shape, kE4M3);
    Tensor amax = r.scalar(0.f), inv = r.poisoned({1}, kF32);
    FP8CastCounts c;
    ops::quantize_fp8(x, r.scalar(scale), &row, &col, &amax, &c, &inv);
    r.bits("row-wise", row);
    r.bits("column-wise", col);
    r.bits("amax", amax);
    r.bits("scale_inv", inv);
    r.same("scale_inv is 1 / scale", inv, Tensor::from_floats({1.f / scale}, {1}));
    counts(r, c);
    {
      Tensor row_only = r.poisoned(shape, kE4M3), col_only = r.poisoned(col_shape, kE4M3);
      Tensor amax_row = r.scalar(0.f), inv_row = r.poisoned({1}, kF32);
      FP8CastCounts c_row;
      ops::quantize_fp8(x, r.scalar(scale), &row_only, nullptr, &amax_row, &c_row, &inv_row);
      ops::quantize_fp8(x, r.scalar(scale), nullptr, &col_only, nullptr);
      r.same("row-wise alone", row_only, row);
      r.same("column-wise alone", col_only, col);
      r.same("amax, row-wise alone", amax_row, amax);
      r.same("scale_inv, row-wise alone", inv_row, inv);
      counts(r, c_row);
    }
    for (const auto& [in_k, out_k] : offsets) {
      auto so = r.scope("input at " + str(in_k) + ", outputs at " + str(out_k));
      const Tensor xs = shifted(r, host, in_k);
      Tensor row_s = shifted_output(r, shape, kE4M3, out_k);
      Tensor col_s = shifted_output(r, col_shape, kE4M3, out_k);
      Tensor row_only = shifted_output(r, shape, kE4M3, out_k);
      Tensor amax_s = r.scalar(0.f), amax_row = r.scalar(0.f);
      FP8CastCounts c_s, c_row;
      ops::quantize_fp8(xs, r.scalar(scale), &row_s, &col_s, &amax_s, &c_s);
      ops::quantize_fp8(xs, r.scalar(scale), &row_only, nullptr, &amax_row, &c_row);
      r.same("row-wise", row_s, row);
      r.same("column-wise", col_s, col);
      r.same("row-wise alone", row_only, row);
      r.same("amax", amax_s, amax);
      r.same("amax, row-wise alone", amax_row, amax);
      counts(r, c_s);
      counts(r, c_row);
    }
  }
  // scale_inv alone is IEEE 1 / scale, inexact ones, a subnormal and an infinite one included;
  // also for an empty input, where no element is cast.
  for (float sc : {7.f, 300.f, 1e-3f, 3e38f, 1e-39f, 0.f}) {
    for (const Shape& shape : {Shape{4, 8}, Shape{0, 8}}) {
      Tensor row = r.empty(shape, kE5M2), col = r.empty({8, shape[0]}, kE5M2);
      Tensor inv = r.poisoned({1}, kF32);
      ops::quantize_fp8(r.in(Tensor::full(shape, 1.f, r.dtype())), r.scalar(sc), &row, &col,
                        nullptr, nullptr, &inv);
      const std::string what = "scale_inv of " + hex(test::bits_of(sc)) + " " + shape_str(shape);
      r.bits(what, inv);
      r.same(what + " is 1 / scale", inv, Tensor::from_floats({1.f / sc}, {1}));
    }
  }
}

void quantize_fp8_case(OpRun& r) {
  const DType d = r.dtype();
  const Shape shapes[] = {{129, 300}, {1, 16}, {3, 37, 300}, {1024, 3072}, {4097, 33}};
  for (const Shape& shape : shapes) {
    for (DType fp8 : {kE4M3, kE5M2}) {
      auto s = r.scope(shape_str(shape) + " to " + name(fp8));
      const Tensor x = r.in(with_specials(shape, d, 3, 50.f));
      Tensor row = r.poisoned(shape, fp8), col = r.poisoned({x.cols(), x.rows()}, fp8);
      Tensor amax = r.scalar(5.f);  // below max |x| (1e9 is planted): max-accumulated
      ops::quantize_fp8(x, r.scalar(fp8 == kE4M3 ? 7.f : 300.f), &row, &col, &amax);
      r.bits("row-wise", row);
      r.bits("column-wise", col);
      r.bits("amax", amax);
    }
  }
  {
    auto s = r.scope("one direction");
    const Tensor x = r.in(with_specials({130, 257}, d, 4, 2.f)), scale = r.scalar(3.5f);
    Tensor row = r.poisoned(x.shape(), kE4M3), col = r.poisoned({257, 130}, kE4M3);
    ops::quantize_fp8(x, scale, &row, nullptr, nullptr);
    ops::quantize_fp8(x, scale, nullptr, &col, nullptr);
    r.bits("row-wise", row);
    r.bits("column-wise", col);
  }
  // The amax slot merges as the CPU's `m > amax ? m : amax`: a NaN start of either sign stays,
  // -0.0 stays over data of zeros, a start above every |x| stays; in the row-wise kernel and in
  // the tiled one (column-wise too).
  const uint32_t starts[] = {0x00000000u, 0x80000000u, 0xBF800000u, 0x7FC00000u,
                             0xFFC00000u, 0x7F7FFFFFu, 0x49742400u};  // 1e6 last
  for (bool zeros : {false, true}) {
    const Tensor x =
        r.in(zeros ? Tensor::zeros({40, 96}, d) : random_tensor({70, 300}, d, 21, 3.f));
    for (uint32_t start : starts) {
      for (bool tiled : {false, true}) {
        Tensor row = r.empty(x.shape(), kE4M3), col = r.empty({x.cols(), x.rows()}, kE4M3);
        Tensor amax = r.scalar(test::float_from_bits(start));
        ops::quantize_fp8(x, r.scalar(2.f), &row, tiled ? &col : nullptr, &amax);
        r.bits(std::string(zeros ? "zeros" : "random") + ", amax from " + hex(start) +
                   (tiled ? ", tiled" : ", row-wise"),
               amax);
      }
    }
  }
  for (DType fp8 : {kE4M3, kE5M2}) {
    auto s = r.scope("negative NaNs to " + name(fp8));
    Tensor row = r.empty({64, 64}, fp8), col = r.empty({64, 64}, fp8);
    ops::quantize_fp8(r.in(with_negative_nans(d)), r.scalar(4.f), &row, &col, nullptr);
    r.bits("row-wise", row);
    r.bits("column-wise", col);
    expect_nan_bytes(r, row);
  }
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor x = random_tensor(shape, d, 41, 40.f);
    Tensor row = r.empty(shape, kE4M3), amax = r.scalar(0.f);
    ops::quantize_fp8(r.in(x), r.scalar(3.f), &row, nullptr, &amax);
    Tensor row_m = r.misaligned_empty(shape, kE4M3), amax_m = r.scalar(0.f);
    ops::quantize_fp8(r.misaligned(x), r.scalar(3.f), &row_m, nullptr, &amax_m);
    r.bits("row-wise", row);
    r.bits("amax", amax);
    r.same("row-wise, misaligned", row_m, row);
    r.same("amax, misaligned", amax_m, amax);
  }
  quantize_fp8_vector_paths(r);
}

void transpose_2d_case(OpRun& r) {
  for (const Shape& shape : {Shape{45, 70}, Shape{1, 1000}, Shape{1000, 1}, Shape{513, 1025}}) {
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251) / 2.f;
    r.bits(shape_str(shape), ops::transpose_2d(r.in(Tensor::from_floats(v, shape, r.dtype()))));
  }
}

void dequantize_fp8_case(OpRun& r) {
  std::vector<uint8_t> codes(256 * 3);  // every code, three times in another order
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7 % 256);
  const Tensor q = r.in(Tensor::from_bytes(codes.data(), {48, 16}, r.dtype()));
  for (float scale_inv : {0.125f, 0.3f, 3e-5f}) {
    for (DType out : {kF32, kBF16}) {
      r.bits(std::to_string(scale_inv) + " to " + name(out),
             ops::dequantize_fp8(q, r.scalar(scale_inv), out));
    }
  }
  for (const Shape& shape : kVectorShapes) {
    Tensor codes_of_shape = Tensor::empty(shape, r.dtype());
    ops::quantize_fp8(random_tensor(shape, kF32, 41, 40.f), Tensor::full({1}, 3.f, kF32),
                      &codes_of_shape, nullptr, nullptr);
    for (DType out : {kF32, kBF16}) {
      auto s = r.scope(shape_str(shape) + " to " + name(out));
      const Tensor want = ops::dequantize_fp8(r.in(codes_of_shape), r.scalar(0.25f), out);
      r.bits("aligned", want);
      r.same("misaligned", ops::dequantize_fp8(r.misaligned(codes_of_shape), r.scalar(0.25f), out),
             want);
    }
  }
}

// ===================================== MXFP8 =====================================

void quantize_mxfp8_case(OpRun& r) {
  const Shape shapes[] = {{1, 32}, {3, 40}, {16, 64}, {129, 300}, {993, 512}, {8, 32, 1024}};
  for (const Shape& shape : shapes) {
    const Tensor x = r.in(mixed_magnitudes(shape, r.dtype(), 61));
    const int64_t rows = x.rows(), cols = x.cols();
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (Usage direction : {Usage::kRowwise, Usage::kColumnwise}) {
        auto s = r.scope(shape_str(shape) + " to " + name(fp8) + " " +
                         std::string(usage_name(direction)));
        const bool row = direction == Usage::kRowwise;
        Tensor data = r.poisoned(row ? shape : Shape{cols, rows}, fp8);
        Tensor scales = r.poisoned(
            row ? mxfp8_scale_shape(rows, cols) : mxfp8_scale_shape(cols, rows), DType::kE8M0);
        ops::quantize_mxfp8(x, direction, data, scales);
        r.bits("exponents", scales);
        r.bits("data", data);
      }
    }
  }
  for (DType fp8 : {kE4M3, kE5M2}) {
    for (Usage direction : {Usage::kRowwise, Usage::kColumnwise}) {
      auto s = r.scope("negative NaNs to " + name(fp8) + " " + std::string(usage_name(direction)));
      Tensor data = r.empty({64, 64}, fp8), e = r.empty(mxfp8_scale_shape(64, 64), DType::kE8M0);
      ops::quantize_mxfp8(r.in(with_negative_nans(r.dtype())), direction, data, e);
      r.bits("data", data);
      r.bits("exponents", e);
    }
  }
}

void dequantize_mxfp8_case(OpRun& r) {
  for (const Shape& shape : {Shape{64, 96}, Shape{3, 40}, Shape{257, 544}}) {
    const Tensor x = mixed_magnitudes(shape, kF32, 63);
    Tensor data = Tensor::empty(shape, r.dtype());
    Tensor scales = Tensor::empty(mxfp8_scale_shape(x.rows(), x.cols()), DType::kE8M0);
    ops::quantize_mxfp8(x, Usage::kRowwise, data, scales);
    for (DType out : {kF32, kBF16}) {
      r.bits(shape_str(shape) + " to " + name(out),
             ops::dequantize_mxfp8(r.in(data), r.in(scales), out));
    }
  }
}

// ===================================== quantizers =====================================

void delayed_quantizer_case(OpRun& r) {
  for (DType fp8 : {kE4M3, kE5M2}) {
    auto s = r.scope(name(fp8));
    // history[0] starts at 3 (an earlier cast of this step); history[1] must stay untouched.
    auto q = delayed(r, 37.5f, fp8, {3.f, 99.f, 0.f, 0.f});
    const Tensor x = r.in(with_specials({96, 200}, r.dtype(), 31, 4.f));
    for (Usage usage : {Usage::kRowwise, Usage::kColumnwise, Usage::kBoth}) {
      record(r, std::string(usage_name(usage)),
             *q->quantize(x, usage, Ownership::kInternal, AmaxRecording::kRecord));
      r.bits(std::string(usage_name(usage)) + " history", q->amax_history());
    }
    const Tensor before = q->amax_history().clone();
    q->quantize(r.random({16, 16}, 32, 1e4f, r.dtype()), Usage::kBoth, Ownership::kInternal,
                AmaxRecording::kSkip);
    r.same("kSkip records nothing", q->amax_history(), before);
  }
}

void current_quantizer_case(OpRun& r) {
  const Tensor inputs[] = {
      random_tensor({611, 782}, r.dtype(), 21, 3.f),
      random_tensor({17, 33}, r.dtype(), 22, 1e-8f),                 // amax under eps
      Tensor::zeros({4, 8}, r.dtype()),                              // amax 0: scale 1
      Tensor::from_floats({1.f, -kInf, 3.f, 0.5f}, {4}, r.dtype()),  // amax inf: scale 1
      Tensor::from_floats({1.f, kNaN, -3.f, kNaN}, {4}, r.dtype()),  // NaN ignored
      Tensor::from_floats({1e-39f, -5e-40f}, {2}, r.dtype()),        // scale overflows: FLT_MAX
  };
  for (DType fp8 : {kE4M3, kE5M2}) {
    for (Power2Scale p2 : {Power2Scale::kOff, Power2Scale::kOn}) {
      for (float eps : {0.f, 1e-6f}) {
        const CurrentScalingQuantizer q(fp8, p2, eps);
        for (const Tensor& x : inputs) {
          record(r,
                 name(fp8) + (p2 == Power2Scale::kOn ? " pow2" : "") + " eps " +
                     std::to_string(eps) + " " + shape_str(x.shape()),
                 *q.quantize(r.in(x), Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord));
        }
      }
    }
  }
}

void mxfp8_quantizer_case(OpRun& r) {
  for (DType fp8 : {kE4M3, kE5M2}) {
    const MXFP8Quantizer q(fp8);
    for (const Shape& shape : {Shape{64, 96}, Shape{2, 128, 256}}) {
      const Tensor x = r.in(mixed_magnitudes(shape, r.dtype(), 64));
      for (Usage usage : {Usage::kRowwise, Usage::kColumnwise, Usage::kBoth}) {
        record(r, name(fp8) + " " + shape_str(shape) + " " + std::string(usage_name(usage)),
               *q.quantize(x, usage, Ownership::kInternal, AmaxRecording::kSkip));
      }
    }
  }
}

// ops::dequantize of either usage, update_usage (the missing direction made on the device; the
// bytes of a dropped one freed there), quantize_into (in place, equal to a fresh cast).
void quantized_tensor_case(OpRun& r) {
  const Tensor x = r.random({2, 64, 96}, 23, 2.f, r.dtype());
  const std::shared_ptr<Quantizer> quantizers[] = {
      std::make_shared<CurrentScalingQuantizer>(kE4M3, Power2Scale::kOff, 0.f),
      std::make_shared<MXFP8Quantizer>(kE4M3)};
  for (const auto& q : quantizers) {
    auto s = r.scope(q->describe());
    auto t = q->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip);
    for (DType out : {kF32, kBF16}) r.bits("row-wise to " + name(out), ops::dequantize(*t, out));
    ops::update_usage(*t, Usage::kColumnwise);
    r.bits("column-wise to f32", ops::dequantize(*t, kF32));
  }
  {
    auto s = r.scope("update_usage");
    const Tensor big = r.random({993, 512}, 51, 4.f, r.dtype());
    // Per-tensor: column-wise data is the byte transpose of the row-wise data.
    auto rows = delayed(r, 3.f, kE4M3, {0.f})
                    ->quantize(big, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
    ops::update_usage(*rows, Usage::kBoth);
    record(r, "delayed, row-wise to both", *rows);
    auto both = delayed(r, 3.f, kE4M3, {0.f})
                    ->quantize(big, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    expect_same(r, "delayed, as cast both ways", *rows, *both);
    const int64_t before = memory_stats(r.device()).current_of(MemTag::kOther);
    ops::update_usage(*rows, Usage::kColumnwise);
    r.expect("dropping the row-wise data frees its bytes",
             memory_stats(r.device()).current_of(MemTag::kOther) == before - 993 * 512);
    r.expect("a dropped direction cannot come back without its source", [&] {
      try {
        ops::update_usage(*rows, Usage::kBoth);
      } catch (const Error&) {
        return true;
      }
      return false;
    }());
    // MXFP8: the missing direction is quantized from the source, on the source's device.
    const MXFP8Quantizer mx(kE4M3);
    auto m = mx.quantize(big, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
    ops::update_usage(*m, Usage::kBoth, &big);
    record(r, "mxfp8, row-wise to both", *m);
    expect_same(r, "mxfp8, as cast both ways", *m,
                *mx.quantize(big, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  }
  auto s = r.scope("quantize_into");
  const Tensor x1 = r.random({64, 96}, 41, 2.f, r.dtype()),
               x2 = r.random({64, 96}, 42, 5.f, r.dtype());
  {
    // Delayed: the slot's scale moved since dst was made; the amax max-accumulates.
    auto q = delayed(r, 1.5f, kE4M3, {0.5f, 0.f});
    auto t = q->quantize(x1, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    const Tensor data = dynamic_cast<const Float8Tensor&>(*t).rowwise_data();
    Tensor scale = q->scale();
    ops::fill_(scale, 0.625f);
    const uint64_t version = t->version();
    ops::quantize_into(*t, x2, AmaxRecording::kRecord);
    r.expect("delayed: the version moved", t->version() > version);
    r.expect("delayed: in place",
             dynamic_cast<const Float8Tensor&>(*t).rowwise_data().shares_storage(data));
    record(r, "delayed", *t);
    r.bits("delayed: history", q->amax_history());
    r.expect("delayed: scale_inv is 1 / 0.625",
             dynamic_cast<const Float8Tensor&>(*t).scale_inv().item() ==
                 static_cast<float>(1.0 / 0.625));
    expect_same(r, "delayed: as a fresh cast", *t,
                *q->quantize(x2, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  }
  // Current and MXFP8: stateless, a new scale (exponents) from src.
  const std::shared_ptr<Quantizer> stateless[] = {
      std::make_shared<CurrentScalingQuantizer>(kE5M2, Power2Scale::kOn, 0.f),
      std::make_shared<MXFP8Quantizer>(kE4M3)};
  for (const auto& q : stateless) {
    auto t = q->quantize(x1, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    ops::quantize_into(*t, x2, AmaxRecording::kRecord);
    record(r, q->describe(), *t);
    expect_same(r, q->describe() + " as a fresh cast", *t,
                *q->quantize(x2, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  }
}

void quantize_blockwise_case(OpRun& r) {
  const Shape shapes[] = {{1, 1}, {3, 40}, {128, 128}, {129, 300}, {257, 1000}, {2, 65, 384}};
  for (const Shape& shape : shapes) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 71));
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
        for (bool power_2 : {true, false}) {
          for (float eps : {0.f, 1e-3f}) {
            auto s = r.scope(shape_str(shape) + " to " + name(fp8) +
                             (blocks == BlockScaling::k1D ? " 1x128" : " 128x128") +
                             (power_2 ? " pow2" : "") + " eps " + std::to_string(eps));
            Tensor data = r.poisoned({x.rows(), x.cols()}, fp8);
            Tensor scale_inv = r.poisoned(blockwise_scale_shape(blocks, x.rows(), x.cols()), kF32);
            FP8CastCounts c;
            ops::quantize_blockwise(x, {blocks, fp8_max(fp8), power_2, eps}, data, scale_inv, &c);
            r.bits("scale_inv", scale_inv);
            r.bits("data", data);
            counts(r, c);
          }
        }
      }
    }
  }
  // A huge block amax under a scale that is no power of two: tiny values flush, values round
  // past the max.
  auto s = r.scope("saturating and flushing");
  Tensor data = r.empty({64, 256}, kE4M3);
  Tensor scale_inv = r.empty(blockwise_scale_shape(BlockScaling::k1D, 64, 256), kF32);
  FP8CastCounts c;
  ops::quantize_blockwise(r.in(block_input({64, 256}, r.dtype(), 72)),
                          {BlockScaling::k1D, kE4M3Max, false, 0.f}, data, scale_inv, &c);
  r.bits("data", data);
  r.bits("scale_inv", scale_inv);
  counts(r, c);
  r.expect("the input saturates and flushes", c.saturated > 0 && c.flushed > 0);
}

void dequantize_blockwise_case(OpRun& r) {
  for (const Shape& shape : {Shape{3, 40}, Shape{129, 300}, Shape{256, 384}}) {
    for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
      Tensor data = Tensor::empty(shape, r.dtype());
      Tensor s = Tensor::empty(blockwise_scale_shape(blocks, shape[0], shape[1]), kF32);
      ops::quantize_blockwise(block_input(shape, kF32, 73), {blocks, fp8_max(r.dtype()), true, 0.f},
                              data, s);
      for (DType out : {kF32, kBF16}) {
        r.bits(
            shape_str(shape) + (blocks == BlockScaling::k1D ? " 1D" : " 2D") + " to " + name(out),
            ops::dequantize_blockwise(r.in(data), r.in(s), blocks, out));
      }
    }
  }
}

void transpose_scales_case(OpRun& r) {
  // dst (7, 4): src's (3, 7) corner transposed, the rest zeroed.
  Tensor dst = r.poisoned({7, 4}, kF32);
  ops::detail::backend_for(r.device()).transpose_scales(r.random({3, 8}, 74), 3, 7, dst);
  r.bits("(3, 8) to (7, 4)", dst);
}

void blockwise_gemm_case(OpRun& r) {
  // The expansion path on every device (cuBLASLt's block-scaled path is held to its own bound in
  // tests/cuda/blockwise_gemm_test.cpp): both sides multiply the same exact expanded values.
  const test::ScopedEnv expansion("OCTET_CUBLASLT_BLOCK_SCALING", "0");
  struct Operand {
    Tensor data, scale_inv, values;  // on the CPU; values: the expansion, for the magnitudes
  };
  auto operand = [&](int64_t rows, int64_t k, BlockScaling blocks, uint64_t seed) {
    Operand op{Tensor::empty({rows, k}, r.dtype()),
               Tensor::empty(blockwise_scale_shape(blocks, rows, k), kF32), Tensor()};
    ops::quantize_blockwise(random_tensor({rows, k}, kF32, seed, 2.f),
                            {blocks, fp8_max(r.dtype()), true, 0.f}, op.data, op.scale_inv);
    op.values = ops::dequantize_blockwise(op.data, op.scale_inv, blocks, kF32);
    return op;
  };
  struct Problem {
    int64_t m, n, k;
    BlockScaling a, b;
  };
  for (const Problem& p : {Problem{32, 48, 256, BlockScaling::k1D, BlockScaling::k1D},
                           Problem{33, 17, 300, BlockScaling::k1D, BlockScaling::k2D},
                           Problem{130, 64, 200, BlockScaling::k2D, BlockScaling::k1D},
                           Problem{16, 144, 128, BlockScaling::k1D, BlockScaling::k2D}}) {
    const Operand a = operand(p.m, p.k, p.a, 75), b = operand(p.n, p.k, p.b, 76);
    const Tensor bias = random_tensor({p.n}, kF32, 77), init = random_tensor({p.m, p.n}, kF32, 78);
    for (bool with_bias : {false, true}) {
      for (Accumulate acc : {Accumulate::kNo, Accumulate::kYes}) {
        Tensor out = r.in(init);
        const Tensor bias_d = r.in(bias);
        ops::blockwise_gemm(r.in(a.data), r.in(a.scale_inv), p.a, r.in(b.data), r.in(b.scale_inv),
                            p.b, out, with_bias ? &bias_d : nullptr, acc);
        std::vector<double> mag;
        if (!r.on_cpu()) {
          mag = gemm_magnitude(a.values, Transpose::kNo, b.values, Transpose::kYes);
          if (with_bias) add_row_terms(mag, bias);
          if (acc == Accumulate::kYes) add_terms(mag, init);
        }
        r.bounded(str(p.m) + "x" + str(p.n) + "x" + str(p.k) + (with_bias ? " bias" : "") +
                      (acc == Accumulate::kYes ? " accumulate" : ""),
                  out, std::move(mag), test::gemm_accumulation_bound(false, p.k));
      }
    }
  }
}

// The quantizer, and the column-wise copy dropped and made again (2D: the byte and scale
// transpose; 1D: a fresh cast of the source, by the tensor's quantizer).
void blockwise_quantizer_case(OpRun& r) {
  const Tensor x = r.in(block_input({4, 48, 272}, r.dtype(), 79));
  for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
    for (DType fp8 : {kE4M3, kE5M2}) {
      auto s = r.scope(name(fp8) + (blocks == BlockScaling::k1D ? " 1D" : " 2D"));
      const auto q = std::make_shared<BlockwiseQuantizer>(fp8, blocks, true, 0.f);
      auto t = q->quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
      record(r, "cast", *t);
      t->drop_usage(Usage::kColumnwise);
      ops::update_usage(*t, Usage::kBoth, &x);
      record(r, "column-wise made again", *t);
      r.bits("dequantized", ops::dequantize(*t, kF32));
    }
  }
}

// The spread of a slot's block scales, settled where its casts ran, as facts.
void spread(OpRun& r, const std::string& what, SlotStats& stats) {
  settle_device_stats(stats.counts, &stats.scales);
  r.fact(what + " total", stats.counts.total);
  r.fact(what + " saturated", stats.counts.saturated);
  r.fact(what + " flushed", stats.counts.flushed);
  r.fact(what + " blocks", stats.scales.blocks());
  if (stats.scales.blocks() == 0) return;
  for (const auto& [name, v] : {std::pair{"min", stats.scales.min_log2()},
                                {"median", stats.scales.median_log2()},
                                {"max", stats.scales.max_log2()}}) {
    r.fact(what + " " + name + " log2 x 1024", std::llround(v * 1024));
  }
}

// Both 1x128 directions from one read of x: every output the CPU's bit for bit, and on each
// device the bytes, scales and counts of quantize_blockwise of x and of x's transpose. Ragged
// tiles both ways, one-row and one-column tensors, a 3-D input.
void quantize_blockwise_both_case(OpRun& r) {
  const Shape shapes[] = {{1, 1},     {1, 130},   {130, 1},    {3, 40},
                          {129, 257}, {256, 128}, {2, 65, 384}};
  for (const Shape& shape : shapes) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 93));
    const int64_t rows = x.rows(), cols = x.cols();
    const Shape row_scales = blockwise_scale_shape(BlockScaling::k1D, rows, cols);
    const Shape col_scales = blockwise_scale_shape(BlockScaling::k1D, cols, rows);
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (bool power_2 : {true, false}) {
        const float eps = power_2 ? 0.f : 1e-3f;
        auto s = r.scope(shape_str(shape) + " to " + name(fp8) + (power_2 ? " pow2" : "") +
                         " eps " + std::to_string(eps));
        const ops::BlockwiseCast cast{BlockScaling::k1D, fp8_max(fp8), power_2, eps};
        Tensor row = r.poisoned({rows, cols}, fp8), row_s = r.poisoned(row_scales, kF32);
        Tensor col = r.poisoned({cols, rows}, fp8), col_s = r.poisoned(col_scales, kF32);
        FP8CastCounts c;
        ops::quantize_blockwise_both(x, cast, row, row_s, col, col_s, &c);
        r.bits("row-wise data", row);
        r.bits("row-wise scale_inv", row_s);
        r.bits("column-wise data", col);
        r.bits("column-wise scale_inv", col_s);
        counts(r, c);
        Tensor row2 = r.empty({rows, cols}, fp8), row2_s = r.empty(row_scales, kF32);
        Tensor col2 = r.empty({cols, rows}, fp8), col2_s = r.empty(col_scales, kF32);
        FP8CastCounts c2;
        ops::quantize_blockwise(x, cast, row2, row2_s, &c2);
        ops::quantize_blockwise(ops::transpose_2d(x.reshape({rows, cols})), cast, col2, col2_s,
                                &c2);
        settle_device_stats(c2, nullptr);
        r.same("row-wise data as quantize_blockwise", row, row2);
        r.same("row-wise scale_inv as quantize_blockwise", row_s, row2_s);
        r.same("column-wise data as quantize_blockwise of the transpose", col, col2);
        r.same("column-wise scale_inv as quantize_blockwise of the transpose", col_s, col2_s);
        r.expect("counts as the two casts'",
                 c.total == c2.total && c.saturated == c2.saturated && c.flushed == c2.flushed);
      }
    }
  }
  // The quantizer: a both-ways cast (new, and in place) has the bytes of a row-wise and a
  // column-wise cast made apart, and adds the same counts and scale spread.
  const Tensor x = r.in(block_input({2, 65, 300}, r.dtype(), 94));
  const Tensor x2 = r.in(block_input({2, 65, 300}, r.dtype(), 95));
  for (DType fp8 : {kE4M3, kE5M2}) {
    auto s = r.scope("quantizer " + name(fp8));
    auto both = std::make_shared<SlotStats>(), apart = std::make_shared<SlotStats>();
    const auto qb = std::make_shared<BlockwiseQuantizer>(fp8, BlockScaling::k1D, true, 0.f, both);
    const auto qa = std::make_shared<BlockwiseQuantizer>(fp8, BlockScaling::k1D, true, 0.f, apart);
    auto t = qb->quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kRecord);
    record(r, "both", *t);
    const auto& b = dynamic_cast<const BlockwiseFP8Tensor&>(*t);
    const auto tr = qa->quantize(x, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kRecord);
    const auto tc = qa->quantize(x, Usage::kColumnwise, Ownership::kOwned, AmaxRecording::kRecord);
    const auto& br = dynamic_cast<const BlockwiseFP8Tensor&>(*tr);
    const auto& bc = dynamic_cast<const BlockwiseFP8Tensor&>(*tc);
    r.same("row-wise data", b.rowwise_data(), br.rowwise_data());
    r.same("row-wise scale_inv", b.rowwise_scales(), br.rowwise_scales());
    r.same("column-wise data", b.columnwise_data(), bc.columnwise_data());
    r.same("column-wise scale_inv", b.columnwise_scales(), bc.columnwise_scales());
    spread(r, "both", *both);
    spread(r, "apart", *apart);
    r.expect("spread and counts as apart",
             both->counts.total == apart->counts.total &&
                 both->counts.saturated == apart->counts.saturated &&
                 both->counts.flushed == apart->counts.flushed &&
                 both->scales.blocks() == apart->scales.blocks() &&
                 both->scales.min_log2() == apart->scales.min_log2() &&
                 both->scales.median_log2() == apart->scales.median_log2() &&
                 both->scales.max_log2() == apart->scales.max_log2());
    ops::quantize_into(*t, x2, AmaxRecording::kSkip);
    expect_same(r, "in place, as a fresh cast", *t,
                *qb->quantize(x2, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
    record(r, "in place", *t);
  }
}

// ===================================== row-wise FP8 =====================================

// One scale per row: rows of one element, rows longer than a block of threads, saturating and
// flushing values next to huge ones, a row of zeros (block_input's), NaNs.
void quantize_rowwise_case(OpRun& r) {
  for (const Shape& shape : {Shape{1, 1}, Shape{3, 40}, Shape{129, 300}, Shape{2, 65, 1030}}) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 91));
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (bool power_2 : {true, false}) {
        for (float eps : {0.f, 1e-3f}) {
          auto s = r.scope(shape_str(shape) + " to " + name(fp8) + (power_2 ? " pow2" : "") +
                           " eps " + std::to_string(eps));
          Tensor data = r.poisoned({x.rows(), x.cols()}, fp8);
          Tensor scale_inv = r.poisoned({x.rows()}, kF32);
          FP8CastCounts c;
          ops::quantize_rowwise(x, {fp8_max(fp8), power_2, eps}, data, scale_inv, &c);
          r.bits("scale_inv", scale_inv);
          r.bits("data", data);
          counts(r, c);
          for (DType out : {kF32, kBF16}) {
            r.bits("dequantized to " + name(out), ops::dequantize_rowwise(data, scale_inv, out));
          }
        }
      }
    }
  }
  // The quantizer: column-wise data is the cast of the transpose.
  const Tensor x = r.in(block_input({4, 48, 272}, r.dtype(), 92));
  for (DType fp8 : {kE4M3, kE5M2}) {
    const RowwiseQuantizer q(fp8, true, 0.f);
    auto t = q.quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    record(r, "quantizer " + name(fp8), *t);
    r.bits("quantizer " + name(fp8) + " dequantized", ops::dequantize(*t, kF32));
  }
}

}  // namespace

std::vector<test::OpCase> fp8_cast_cases() {
  return {
      {"quantize_fp8", {"quantize_fp8"}, kCastInputs, quantize_fp8_case},
      {"transpose_2d",
       {"transpose_2d"},
       {kE4M3, DType::kU8, kBF16, kF16, kF32, DType::kI32, DType::kI64},
       transpose_2d_case},
      {"dequantize_fp8", {"dequantize_fp8"}, kFp8, dequantize_fp8_case},
      {"quantize_mxfp8",
       {"quantize_mxfp8_rowwise", "quantize_mxfp8_columnwise"},
       kCastInputs,
       quantize_mxfp8_case},
      {"dequantize_mxfp8", {"dequantize_mxfp8"}, kFp8, dequantize_mxfp8_case},
      {"delayed_quantizer", {"quantize_fp8"}, kCastInputs, delayed_quantizer_case},
      {"current_quantizer",
       {"amax", "current_scale", "quantize_fp8"},
       kCastInputs,
       current_quantizer_case},
      {"mxfp8_quantizer",
       {"quantize_mxfp8_rowwise", "quantize_mxfp8_columnwise"},
       kCastInputs,
       mxfp8_quantizer_case},
      {"quantized_tensor",
       {"transpose_2d", "dequantize_fp8", "dequantize_mxfp8"},
       kCastInputs,
       quantized_tensor_case},
      {"quantize_blockwise", {"quantize_blockwise"}, kCastInputs, quantize_blockwise_case},
      {"dequantize_blockwise", {"dequantize_blockwise"}, kFp8, dequantize_blockwise_case},
      {"blockwise_quantizer",
       {"quantize_blockwise", "quantize_blockwise_both", "transpose_2d", "transpose_scales",
        "dequantize_blockwise"},
       kCastInputs,
       blockwise_quantizer_case},
      {"quantize_blockwise_both",
       {"quantize_blockwise_both", "quantize_blockwise", "transpose_2d"},
       kCastInputs,
       quantize_blockwise_both_case},
      {"transpose_scales", {"transpose_scales"}, {kF32}, transpose_scales_case},
      {"blockwise_gemm", {"blockwise_gemm"}, kFp8, blockwise_gemm_case},
      {"quantize_rowwise",
       {"quantize_rowwise", "dequantize_rowwise"},
       kCastInputs,
       quantize_rowwise_case},
  };
}

}  // namespace octet::op_table
