// NVFP4: argument checks and dispatch of its ops, the quantizer, the format entry.
#include "kernels/nvfp4.h"

#include "kernels/device_policy.h"
#include "kernels/math/quartet2.h"
#include "kernels/quantized_format.h"
#include "runtime/fp4.h"
#include "runtime/fp8_scaling.h"
#include "runtime/memory.h"

namespace octet {
namespace ops {

using detail::on_device;
using detail::op_device;

namespace {

void check_nvfp4_shape(const char* op, int64_t rows, int64_t cols) {
  OCTET_CHECK(rows % kNVFP4BlockLen == 0 && cols % kNVFP4BlockLen == 0, op, ": NVFP4 needs ",
              "prod(leading dims) and the last dim to be multiples of 16, got (", rows, ", ", cols,
              ")");
}

void check_packed(const char* op, const Tensor& data, const Tensor& scales, int64_t rows,
                  int64_t cols) {
  check_nvfp4_shape(op, rows, cols);
  OCTET_CHECK(
      data.defined() && data.dtype() == DType::kU8 && data.shape() == nvfp4_data_shape(rows, cols),
      op, ": data must be u8", shape_str(nvfp4_data_shape(rows, cols)), ", got ", data);
  OCTET_CHECK(scales.defined() && scales.dtype() == DType::kE4M3 &&
                  scales.shape() == nvfp4_scale_shape(rows, cols),
              op, ": scales must be e4m3", shape_str(nvfp4_scale_shape(rows, cols)), ", got ",
              scales);
}

void check_e4m3_max(const char* op, float e4m3_max) {
  OCTET_CHECK(e4m3_max == 448.f || e4m3_max == 256.f, op,
              ": the tensor scale's E4M3 bound must be 448 or 256, got ", e4m3_max);
}

}  // namespace

void quantize_nvfp4(const Tensor& x, const NVFP4Cast& cast, Tensor& data, Tensor& scales,
                    Tensor& amax, FP8CastCounts* counts) {
  constexpr const char* op = "quantize_nvfp4";
  check_quantize_input(op, x);
  check_packed(op, data, scales, x.rows(), x.cols());
  OCTET_CHECK(amax.defined() && amax.dtype() == DType::kF32 && amax.numel() == 1, op,
              ": amax must be a one-element f32 tensor, got ", amax);
  check_e4m3_max(op, cast.e4m3_max);
  OCTET_CHECK(!cast.four_over_six || (!cast.hadamard && !cast.stochastic), op,
              ": 4over6 goes with neither the Hadamard transform nor stochastic rounding (TE has "
              "no such cast), got hadamard ",
              cast.hadamard, ", stochastic ", cast.stochastic);
  const Device device =
      op_device(op, {{x, "x"}, {data, "data"}, {scales, "scales"}, {amax, "amax"}});
  on_device(device)->quantize_nvfp4(x, cast, data, scales, amax, counts);
  for (Tensor* t : {&data, &scales, &amax}) t->bump_version();
}

Tensor expand_nvfp4(const Tensor& data, const Tensor& scales, int64_t rows, int64_t cols,
                    DType dtype) {
  constexpr const char* op = "expand_nvfp4";
  check_packed(op, data, scales, rows, cols);
  check_dequantize_dtype(op, dtype);
  return detail::dequantize_on_device(op, data, scales, "scales", {rows, cols}, dtype,
                                      [&](const detail::Backend& backend, Tensor& out) {
                                        backend.expand_nvfp4(data, scales, nullptr, kE4M3Max, out);
                                      });
}

Tensor dequantize_nvfp4(const Tensor& data, const Tensor& scales, const Tensor& amax, int64_t rows,
                        int64_t cols, DType dtype, float e4m3_max) {
  constexpr const char* op = "dequantize_nvfp4";
  check_packed(op, data, scales, rows, cols);
  OCTET_CHECK(amax.defined() && amax.dtype() == DType::kF32 && amax.numel() == 1, op,
              ": amax must be a one-element f32 tensor, got ", amax);
  check_dequantize_dtype(op, dtype);
  check_e4m3_max(op, e4m3_max);
  const Device device = op_device(op, {{data, "data"}, {scales, "scales"}, {amax, "amax"}});
  Tensor out = Tensor::empty({rows, cols}, dtype, device);
  on_device(device)->expand_nvfp4(data, scales, &amax, e4m3_max, out);
  return out;
}

Tensor hadamard16(const Tensor& x, bool inverse) {
  constexpr const char* op = "hadamard16";
  check_quantize_input(op, x);
  OCTET_CHECK(x.cols() % kNVFP4BlockLen == 0, op, ": the last dim of ", x,
              " must be a multiple of 16");
  Tensor out = Tensor::empty(x.shape(), DType::kF32, x.device());
  on_device(op_device(op, {{x, "x"}}))->hadamard16(x, inverse, out);
  return out;
}

Tensor rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse) {
  constexpr const char* op = "rht128";
  check_quantize_input(op, x);
  OCTET_CHECK(x.cols() % math::kRht128 == 0, op, ": the last dim of ", x,
              " must be a multiple of 128");
  Tensor out = Tensor::empty(x.shape(), DType::kF32, x.device());
  on_device(op_device(op, {{x, "x"}}))->rht128(x, seed, offset, inverse, out);
  return out;
}

void quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                         Tensor& scales, Tensor& decode) {
  constexpr const char* op = "quantize_nvfp4_eden";
  OCTET_CHECK(v.defined() && v.dtype() == DType::kF32, op, ": v must be f32, got ", v);
  check_packed(op, data, scales, v.rows(), v.cols());
  OCTET_CHECK(decode.defined() && decode.dtype() == DType::kF32 && decode.numel() == 1, op,
              ": decode must be a one-element f32 tensor, got ", decode);
  const Device device =
      op_device(op, {{v, "v"}, {data, "data"}, {scales, "scales"}, {decode, "decode"}});
  on_device(device)->quantize_nvfp4_eden(v, seed, offset, data, scales, decode);
  for (Tensor* t : {&data, &scales, &decode}) t->bump_version();
}

namespace {

// What a direction's data holds, stored (rows, cols): the values in the stored orientation.
struct Stored {
  const Tensor& data;
  const Tensor& scales;
  const Tensor& amax;
  int64_t rows, cols;
};
Stored stored(const NVFP4Tensor& t, Usage direction) {
  if (direction == Usage::kRowwise) {
    return {t.rowwise_data(), t.rowwise_scales(), t.rowwise_extra(), t.rows(), t.cols()};
  }
  return {t.columnwise_data(), t.columnwise_scales(), t.columnwise_extra(), t.cols(), t.rows()};
}

// alpha of the GEMM: the two tensor scales, TE's order RN(RN(amax_a * amax_b) * RN(1 / (6 * 6 *
// e4m3_max_a * e4m3_max_b))) (7225344 = 6 * 6 * 448 * 448, exact in f32, as are the products with
// 256), as a one-element tensor where the amaxes live (a GPU's GEMM reads it there, with no copy
// back).
Tensor gemm_alpha(const Tensor& amax_a, float e4m3_max_a, const Tensor& amax_b, float e4m3_max_b) {
  const float inv = 1.f / (kE2M1Max * kE2M1Max * e4m3_max_a * e4m3_max_b);
  return scale(mul(amax_a, amax_b), inv);
}

// The values of one direction, stored (rows, cols), in f32: TE's dequantization, or for MS-EDEN
// data e2m1 * e4m3 * g, then the 128-point transform undone.
Tensor stored_values(const NVFP4Tensor& t, const Stored& s) {
  if (!t.layout().rht128) {
    return dequantize_nvfp4(s.data, s.scales, s.amax, s.rows, s.cols, DType::kF32,
                            t.layout().e4m3_max);
  }
  // e2m1 * e4m3 is exact: one rounding, by g (read on the host: dequantizing is not a step's path).
  const Tensor values =
      scale(expand_nvfp4(s.data, s.scales, s.rows, s.cols, DType::kF32), s.amax.item());
  return rht128(values, t.layout().rht128_seed, t.layout().rht128_offset, true);
}

class NVFP4Format final : public MultipleRuleFormat {
 public:
  NVFP4Format()
      : MultipleRuleFormat(
            kNVFP4Format,
            "e2m1 values packed two to a byte (element 2j in the low nibble), one e4m3 scale per "
            "16 values (weights: per 16x16 tile) and one f32 amax per direction giving the tensor "
            "scale amax / 2688 (amax / 1536 under 4over6's 256 bound); column-wise data of "
            "activations and gradients after a 16-point "
            "random Hadamard transform",
            16, 16, "NVFP4") {}
  Tensor dequantize(const QuantizedTensor& q, DType dtype) const override {
    const NVFP4Tensor& t = as_format<NVFP4Tensor>(q);
    const Usage d = t.has(Usage::kRowwise) ? Usage::kRowwise : Usage::kColumnwise;
    Tensor values = stored_values(t, stored(t, d));
    if (d == Usage::kColumnwise && t.layout().columnwise_rht) values = hadamard16(values, true);
    if (d == Usage::kColumnwise) values = transpose_2d(values);
    return (dtype == DType::kF32 ? values : cast(values, dtype)).reshape(t.shape());
  }

  void make_usage(QuantizedTensor& q, Usage missing, const Tensor* source) const override {
    NVFP4Tensor& t = as_format<NVFP4Tensor>(q);
    if (t.layout().tiles_2d) {
      // 16x16 tiles: the other direction is the nibble transpose, each tile keeping its scale.
      const bool to_col = has_usage(missing, Usage::kColumnwise);
      const Stored s = stored(t, to_col ? Usage::kRowwise : Usage::kColumnwise);
      Tensor data = Tensor::empty(nvfp4_data_shape(s.cols, s.rows), DType::kU8, t.device());
      Tensor scales = Tensor::empty(nvfp4_scale_shape(s.cols, s.rows), DType::kE4M3, t.device());
      on_device(t.device())->transpose_nvfp4_tiles(s.data, s.scales, s.rows, s.cols, data, scales);
      t.set_direction(to_col ? Usage::kColumnwise : Usage::kRowwise, std::move(data),
                      std::move(scales), s.amax.clone());
      return;
    }
    recast_from_source(t, missing, source, "1x16-blocked NVFP4");
  }

  void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b, Usage b_usage,
            GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options) const override {
    const NVFP4Tensor& ta = as_format<NVFP4Tensor>(a);
    const NVFP4Tensor& tb = as_format<NVFP4Tensor>(b);
    const bool a_rht = a_usage == Usage::kColumnwise && ta.layout().columnwise_rht;
    const bool b_rht = b_usage == Usage::kColumnwise && tb.layout().columnwise_rht;
    OCTET_CHECK(a_rht == b_rht, "fp8_gemm (", gemm_layout_name(layout), "): operands ",
                a.describe(), " and ", b.describe(),
                " differ in the Hadamard transform of their data; it cancels only when both have "
                "it");
    const NVFP4Layout& la = ta.layout();
    const NVFP4Layout& lb = tb.layout();
    OCTET_CHECK(la.rht128 == lb.rht128 && (!la.rht128 || (la.rht128_seed == lb.rht128_seed &&
                                                          la.rht128_offset == lb.rht128_offset)),
                "fp8_gemm (", gemm_layout_name(layout), "): operands ", a.describe(), " and ",
                b.describe(),
                " differ in their 128-point transform; it cancels only with the same signs on "
                "both");
    const Stored sa = stored(ta, a_usage), sb = stored(tb, b_usage);
    // e2m1 * e4m3 has at most 5 significant bits: exact in f32 (and in bf16 on a GPU without
    // FP4 tensor cores), so the products are exact and the sums the only rounding; the tensor
    // scales are alpha.
    MemTagScope workspace(MemTag::kWorkspace);
    const DType expanded = a.device().is_cuda() ? DType::kBF16 : DType::kF32;
    const Tensor ax = expand_nvfp4(sa.data, sa.scales, sa.rows, sa.cols, expanded);
    const Tensor bx = expand_nvfp4(sb.data, sb.scales, sb.rows, sb.cols, expanded);
    // MS-EDEN data carries decode scales: alpha is their product.
    const Tensor alpha =
        la.rht128 ? mul(sa.amax, sb.amax) : gemm_alpha(sa.amax, la.e4m3_max, sb.amax, lb.e4m3_max);
    GemmOptions g;
    g.alpha_scale = &alpha;
    g.bias = options.bias;
    g.accumulate = options.accumulate;
    ops::gemm(ax, Transpose::kNo, bx, Transpose::kYes, out_2d, g);
  }
};

}  // namespace

std::shared_ptr<const QuantizedFormat> make_nvfp4_format() {
  return std::make_shared<NVFP4Format>();
}

}  // namespace ops

NVFP4Quantizer::NVFP4Quantizer(NVFP4Role role, bool tiles_2d, bool hadamard, bool stochastic,
                               Tensor rng, std::shared_ptr<SlotStats> stats,
                               NVFP4FourOverSix four_over_six, NVFP4Method method)
    : role_(role),
      stochastic_(stochastic),
      four_over_six_(four_over_six),
      method_(method),
      rng_(std::move(rng)),
      stats_(std::move(stats)) {
  layout_.tiles_2d = role == NVFP4Role::kWeight && tiles_2d;
  layout_.columnwise_rht = role != NVFP4Role::kWeight && hadamard;
  layout_.e4m3_max = four_over_six_.on && four_over_six_.e4m3_max_256 ? 256.f : kE4M3Max;
  OCTET_CHECK(!four_over_six_.on || (!layout_.columnwise_rht && !stochastic_),
              "NVFP4Quantizer: 4over6 goes with neither the Hadamard transform nor stochastic "
              "rounding (TE has no such cast); the ",
              describe(), " quantizer has ", layout_.columnwise_rht ? "the transform" : "",
              layout_.columnwise_rht && stochastic_ ? " and " : "",
              stochastic_ ? "stochastic rounding" : "");
  OCTET_CHECK(!stochastic_ || (rng_.defined() && rng_.dtype() == DType::kI64 && rng_.numel() == 2 &&
                               rng_.device().is_cpu()),
              "NVFP4Quantizer: stochastic rounding needs its stream as a host i64 (2,) tensor "
              "(seed, offset), got ",
              rng_);
}

ops::NVFP4Cast NVFP4Quantizer::cast_for(Usage direction, int64_t numel) const {
  ops::NVFP4Cast c;
  c.tiles_2d = layout_.tiles_2d;
  c.hadamard = direction == Usage::kColumnwise && layout_.columnwise_rht;
  c.stochastic = stochastic_;
  c.four_over_six = four_over_six_.on;
  c.squared_error = four_over_six_.squared_error;
  c.e4m3_max = layout_.e4m3_max;
  if (stochastic_) {
    // This cast's draws: the next numel of the slot's stream, whoever casts next gets the rest.
    Tensor stream = rng_;  // a handle on the slot's state: advancing it is the point
    auto* state = stream.data_as<int64_t>();
    c.seed = static_cast<uint64_t>(state[0]);
    c.offset = static_cast<uint64_t>(state[1]);
    state[1] += numel;
    stream.bump_version();
  }
  return c;
}

void NVFP4Quantizer::cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scales,
                          Tensor& amax, AmaxRecording recording) const {
  const bool record = recording == AmaxRecording::kRecord && stats_ != nullptr;
  const ops::NVFP4Cast c = cast_for(direction, x.numel());
  const Tensor in =
      direction == Usage::kRowwise ? x : ops::transpose_2d(x.reshape({x.rows(), x.cols()}));
  ops::quantize_nvfp4(in, c, data, scales, amax, record ? &stats_->counts : nullptr);
  if (record && scales.device().is_cpu()) {
    // Each block's dequantization scale: sf * amax / 2688 (a tile's scale once per row; 1536
    // under the 256 bound).
    const float global = *amax.data_as<float>() / (layout_.e4m3_max * kE2M1Max);
    const uint8_t* sf = scales.data_as<uint8_t>();
    const int64_t rows = in.rows(), blocks = in.cols() / kNVFP4BlockLen, stride = scales.size(1);
    for (int64_t r = 0; r < rows; r += layout_.tiles_2d ? kNVFP4BlockLen : 1) {
      for (int64_t b = 0; b < blocks; ++b) {
        const float s = from_e4m3(sf[r * stride + b]);
        if (s != 0.f) stats_->scales.add(s * global);
      }
    }
  }
}

std::shared_ptr<QuantizedTensor> NVFP4Quantizer::quantize(const Tensor& x, Usage usage,
                                                          Ownership ownership,
                                                          AmaxRecording amax) const {
  ops::check_quantize_input("NVFP4Quantizer::quantize", x);
  ops::check_quantize_usage("NVFP4Quantizer::quantize", usage);
  const int64_t rows = x.rows(), cols = x.cols();
  Tensor d[2], s[2], a[2];
  for (Usage dir : {Usage::kRowwise, Usage::kColumnwise}) {
    if (!has_usage(usage, dir)) continue;
    const size_t i = dir == Usage::kRowwise ? 0 : 1;
    const int64_t r = i == 0 ? rows : cols, c = i == 0 ? cols : rows;
    d[i] = Tensor::empty(nvfp4_data_shape(r, c), DType::kU8, x.device());
    s[i] = Tensor::empty(nvfp4_scale_shape(r, c), DType::kE4M3, x.device());
    a[i] = Tensor::empty({1}, DType::kF32, x.device());
    cast(x, dir, d[i], s[i], a[i], amax);
  }
  auto t = std::make_shared<NVFP4Tensor>(x.shape(), layout_, std::move(d[0]), std::move(s[0]),
                                         std::move(a[0]), std::move(d[1]), std::move(s[1]),
                                         std::move(a[1]), ownership);
  t->set_quantizer(ops::quantizer_handle(*this));
  return t;
}

void NVFP4Quantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                   AmaxRecording amax) const {
  constexpr const char* who = "NVFP4Quantizer::quantize_into";
  OCTET_CHECK(dst.format() == kNVFP4Format, who, ": destination ", dst.describe(),
              " is not an NVFP4 tensor");
  OCTET_CHECK(!dst.buffers_taken(), who, ": destination ", dst.describe(),
              " has its buffers with a save-for-backward context");
  ops::check_quantize_input(who, src, &dst.shape());
  auto& t = dynamic_cast<NVFP4Tensor&>(dst);
  for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
    if (!t.has(d)) continue;
    Tensor data = t.direction_data(d), scales = t.direction_scales(d), a = t.direction_extra(d);
    cast(src, d, data, scales, a, amax);
  }
  dst.bump_version();
}

std::string NVFP4Quantizer::describe() const {
  const char* role = role_ == NVFP4Role::kWeight     ? "weight"
                     : role_ == NVFP4Role::kGradient ? "gradient"
                                                     : "activation";
  return std::string("nvfp4 ") + role + (layout_.tiles_2d ? " 16x16" : " 1x16") +
         (layout_.columnwise_rht ? " rht" : "") + (stochastic_ ? " sr" : "") +
         (four_over_six_.on ? (four_over_six_.squared_error ? " 4over6-mse" : " 4over6-mae") : "") +
         (layout_.e4m3_max == 256.f ? " e4m3-256" : "") +
         (method_ == NVFP4Method::kQuartet2 ? " quartet2" : "");
}

// ---- Quartet II's gradient slot ----

Quartet2GradQuantizer::Quartet2GradQuantizer(Tensor rng) : rng_(std::move(rng)) {
  OCTET_CHECK(
      rng_.defined() && rng_.dtype() == DType::kI64 && rng_.numel() == 2 && rng_.device().is_cpu(),
      "Quartet2GradQuantizer: its stream must be a host i64 (2,) tensor (seed, offset), "
      "got ",
      rng_);
}

uint64_t Quartet2GradQuantizer::take(int64_t draws) const {
  Tensor stream = rng_;  // a handle on the slot's state: advancing it is the point
  auto* state = stream.data_as<int64_t>();
  const auto first = static_cast<uint64_t>(state[1]);
  state[1] += draws;
  stream.bump_version();
  return first;
}

namespace {

void check_quartet2_shape(const char* what, int64_t rows, int64_t cols) {
  OCTET_CHECK(rows % math::kRht128 == 0 && cols % math::kRht128 == 0, "Quartet II: the ", what,
              " (", rows, ", ", cols,
              ") must have both dimensions multiples of 128 (the backward's 128-point transform "
              "runs along each GEMM's inner dimension)");
}

// values (rows, cols) rotated along its rows with the signs at `signs_at` and cast by MS-EDEN
// with the draws from `draws_at`: (data, scales, decode).
struct EdenCast {
  Tensor data, scales, decode;
};
EdenCast eden_cast(const Tensor& values, uint64_t seed, uint64_t signs_at, uint64_t draws_at) {
  const int64_t rows = values.rows(), cols = values.cols();
  Tensor rotated;
  {
    MemTagScope workspace(MemTag::kWorkspace);
    rotated = ops::rht128(values.reshape({rows, cols}), seed, signs_at);
  }
  EdenCast c{Tensor::empty(nvfp4_data_shape(rows, cols), DType::kU8, values.device()),
             Tensor::empty(nvfp4_scale_shape(rows, cols), DType::kE4M3, values.device()),
             Tensor::empty({1}, DType::kF32, values.device())};
  ops::quantize_nvfp4_eden(rotated, seed, draws_at, c.data, c.scales, c.decode);
  return c;
}

}  // namespace

std::shared_ptr<QuantizedTensor> Quartet2GradQuantizer::quantize(const Tensor& x, Usage usage,
                                                                 Ownership ownership,
                                                                 AmaxRecording) const {
  ops::check_quantize_input("Quartet2GradQuantizer::quantize", x);
  ops::check_quantize_usage("Quartet2GradQuantizer::quantize", usage);
  const int64_t rows = x.rows(), cols = x.cols();
  check_quartet2_shape("output gradient", rows, cols);
  const uint64_t seed = static_cast<uint64_t>(rng_.data_as<int64_t>()[0]);
  NVFP4Layout layout;
  layout.rht128 = true;
  layout.rht128_seed = seed;
  layout.rht128_offset = take(math::kRht128);
  EdenCast c[2];
  if (has_usage(usage, Usage::kRowwise)) {
    c[0] = eden_cast(x, seed, layout.rht128_offset, take(rows * cols / kNVFP4BlockLen));
  }
  if (has_usage(usage, Usage::kColumnwise)) {
    const Tensor xt = ops::transpose_2d(x.reshape({rows, cols}));
    c[1] = eden_cast(xt, seed, layout.rht128_offset, take(rows * cols / kNVFP4BlockLen));
  }
  auto t = std::make_shared<NVFP4Tensor>(x.shape(), layout, c[0].data, c[0].scales, c[0].decode,
                                         c[1].data, c[1].scales, c[1].decode, ownership);
  t->set_quantizer(ops::quantizer_handle(*this));
  return t;
}

void Quartet2GradQuantizer::quantize_into(QuantizedTensor& dst, const Tensor&,
                                          AmaxRecording) const {
  OCTET_FAIL(
      "Quartet2GradQuantizer::quantize_into: Quartet II's gradient casts draw new signs "
      "each time and make new tensors; ",
      dst.describe(), " cannot be re-cast in place");
}

Quantizer::BackwardOperands Quartet2GradQuantizer::backward_operands(
    const Tensor& dy, const QuantizedTensor* x, const QuantizedTensor* w) const {
  const Usage usage = (w != nullptr ? Usage::kRowwise : Usage::kNone) |
                      (x != nullptr ? Usage::kColumnwise : Usage::kNone);
  BackwardOperands out;
  if (usage == Usage::kNone) return out;
  out.dy = quantize(dy, usage, Ownership::kInternal, AmaxRecording::kRecord);
  const NVFP4Layout& layout = ops::as_format<NVFP4Tensor>(*out.dy).layout();
  // The forward's operand, as the values its row-wise data decodes to, transposed and cast along
  // its former rows: the column-wise data of a tensor of the operand's shape.
  auto recast = [&](const QuantizedTensor& forward, const char* what) {
    OCTET_CHECK(forward.format() == kNVFP4Format && forward.has(Usage::kRowwise),
                "Quartet II's backward needs the forward's row-wise NVFP4 ", what, ", got ",
                forward.describe());
    const int64_t rows = forward.rows(), cols = forward.cols();
    check_quartet2_shape(what, rows, cols);
    const NVFP4Tensor& f = ops::as_format<NVFP4Tensor>(forward);
    const Tensor values = ops::stored_values(f, ops::stored(f, Usage::kRowwise));
    const EdenCast c = eden_cast(ops::transpose_2d(values), layout.rht128_seed,
                                 layout.rht128_offset, take(rows * cols / kNVFP4BlockLen));
    auto t = std::make_shared<NVFP4Tensor>(forward.shape(), layout, Tensor(), Tensor(), Tensor(),
                                           c.data, c.scales, c.decode, Ownership::kInternal);
    t->set_quantizer(ops::quantizer_handle(*this));
    return t;
  };
  if (w != nullptr) out.w = recast(*w, "weight");
  if (x != nullptr) out.x = recast(*x, "input");
  return out;
}

}  // namespace octet
