// Row-wise FP8: the tensor's shapes, argument checks and dispatch of its ops, the format entry and
// the quantizer.
#include "kernels/rowwise.h"

#include <cmath>
#include <utility>

#include "kernels/device_policy.h"
#include "kernels/quantized_format.h"
#include "runtime/memory.h"

namespace octet {
namespace {

const Tensor& any_data(const Tensor& rowwise, const Tensor& columnwise) {
  OCTET_CHECK(rowwise.defined() || columnwise.defined(),
              "RowwiseFP8Tensor needs row-wise or column-wise data; both are undefined");
  return rowwise.defined() ? rowwise : columnwise;
}

}  // namespace

RowwiseFP8Tensor::RowwiseFP8Tensor(Shape shape, Tensor rowwise, Tensor rowwise_scale_inv,
                                   Tensor columnwise, Tensor columnwise_scale_inv,
                                   Ownership ownership)
    : ScaledTensor(std::move(shape), any_data(rowwise, columnwise).dtype(),
                   held(rowwise, columnwise), ownership, any_data(rowwise, columnwise).device()) {
  OCTET_CHECK(is_fp8(dtype()), "RowwiseFP8Tensor holds e4m3 or e5m2 data, got ", dtype());
  if (rowwise.defined()) {
    set_direction(Usage::kRowwise, std::move(rowwise), std::move(rowwise_scale_inv));
  }
  if (columnwise.defined()) {
    set_direction(Usage::kColumnwise, std::move(columnwise), std::move(columnwise_scale_inv));
  }
}

void RowwiseFP8Tensor::check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                                       const Tensor&) const {
  const bool row = direction == Usage::kRowwise;
  const Shape data_shape = row ? shape() : Shape{cols(), rows()};
  OCTET_CHECK(data.dtype() == dtype() && data.shape() == data_shape,
              "RowwiseFP8Tensor: ", usage_name(direction), " data must be ", dtype(),
              shape_str(data_shape), " for logical shape ", shape_str(shape()), ", got ", data);
  const Shape want{row ? rows() : cols()};
  OCTET_CHECK(scales.dtype() == DType::kF32 && scales.shape() == want,
              "RowwiseFP8Tensor: ", usage_name(direction), " scale_inv must be f32",
              shape_str(want), " (one per ", row ? "row" : "column", "), got ", scales);
}

std::vector<std::pair<std::string, Tensor>> RowwiseFP8Tensor::rowwise_state() const {
  OCTET_CHECK(rowwise_data().defined(), "the checkpoint form of ", describe(),
              " needs row-wise data");
  return {{"", rowwise_data()}, {".scale_inv", rowwise_scales()}};
}

namespace ops {

using detail::on_device;
using detail::op_device;

void quantize_rowwise(const Tensor& x, const RowwiseCast& cast, Tensor& data, Tensor& scale_inv,
                      FP8CastCounts* counts) {
  constexpr const char* op = "quantize_rowwise";
  check_quantize_input(op, x);
  OCTET_CHECK(
      data.defined() && is_fp8(data.dtype()) && data.rows() == x.rows() && data.cols() == x.cols(),
      op, ": data must be e4m3 or e5m2 of x's 2-D shape (", x.rows(), ", ", x.cols(), "), got ",
      data);
  OCTET_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::kF32 &&
                  scale_inv.shape() == Shape{x.rows()},
              op, ": scale_inv must be f32(", x.rows(), ") (one per row), got ", scale_inv);
  const Device device = op_device(op, {{x, "x"}, {data, "data"}, {scale_inv, "scale_inv"}});
  on_device(device)->quantize_rowwise(x, cast, data, scale_inv, counts);
  data.bump_version();
  scale_inv.bump_version();
}

Tensor dequantize_rowwise(const Tensor& data, const Tensor& scale_inv, DType dtype) {
  constexpr const char* op = "dequantize_rowwise";
  OCTET_CHECK(data.defined() && is_fp8(data.dtype()), op, ": data must be e4m3 or e5m2, got ",
              data);
  OCTET_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::kF32 &&
                  scale_inv.shape() == Shape{data.rows()},
              op, ": scale_inv for data ", data, " must be f32(", data.rows(),
              ") (one per row), got ", scale_inv);
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, op,
              ": output dtype must be f32 or bf16, got ", dtype);
  const Device device = op_device(op, {{data, "data"}, {scale_inv, "scale_inv"}});
  Tensor out = Tensor::empty(data.shape(), dtype, device);
  on_device(device)->dequantize_rowwise(data, scale_inv, out);
  return out;
}

namespace {

const RowwiseFP8Tensor& as_rowwise(const QuantizedTensor& t) {
  const auto* r = dynamic_cast<const RowwiseFP8Tensor*>(&t);
  OCTET_ASSERT(r != nullptr, t.describe(), " names the rowwise format but is not one");
  return *r;
}
RowwiseFP8Tensor& as_rowwise(QuantizedTensor& t) {
  auto* r = dynamic_cast<RowwiseFP8Tensor*>(&t);
  OCTET_ASSERT(r != nullptr, t.describe(), " names the rowwise format but is not one");
  return *r;
}

// One f32 scale per row of each operand along K, each direction cast from high precision.
class RowwiseFormat final : public QuantizedFormat {
 public:
  std::string_view name() const override { return kRowwiseFormat; }
  std::string layout() const override {
    return "e4m3/e5m2 values, one f32 scale_inv per row along the last dim (column-wise: per "
           "column, quantized separately from high precision), power-of-two by default";
  }
  // The wgrad GEMM reduces over the token rows, so both dims of every operand follow the rule of
  // the FP8 tensor cores' leading dimensions.
  std::string shape_violation(const Shape& shape) const override {
    return multiple_rule_violation(shape, 16, 16, "row-wise FP8");
  }
  int64_t row_multiple() const override { return 16; }

  Tensor dequantize(const QuantizedTensor& q, DType dtype) const override {
    const RowwiseFP8Tensor& t = as_rowwise(q);
    if (t.has(Usage::kRowwise)) {
      return dequantize_rowwise(t.rowwise_data().reshape({t.rows(), t.cols()}), t.rowwise_scales(),
                                dtype)
          .reshape(t.shape());
    }
    return transpose_2d(dequantize_rowwise(t.columnwise_data(), t.columnwise_scales(), dtype))
        .reshape(t.shape());
  }

  void make_usage(QuantizedTensor& q, Usage missing, const Tensor* source) const override {
    RowwiseFP8Tensor& t = as_rowwise(q);
    OCTET_CHECK(source != nullptr, "update_usage of ", t.describe(), ": row-wise FP8 ",
                usage_name(missing),
                " data is quantized from high precision and cannot be made from the other "
                "direction; pass the f32/bf16 source (e.g. the master weight)");
    OCTET_CHECK(t.quantizer() != nullptr, "update_usage of ", t.describe(),
                ": making a direction from the source needs the tensor's quantizer");
    // The quantizer casts exactly as it did (no state): a fresh cast of the source.
    auto fresh = t.quantizer()->quantize(*source, missing, t.ownership(), AmaxRecording::kSkip);
    const RowwiseFP8Tensor& f = as_rowwise(*fresh);
    for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
      if (!has_usage(missing, d)) continue;
      const bool row = d == Usage::kRowwise;
      t.set_direction(d, row ? f.rowwise_data() : f.columnwise_data(),
                      row ? f.rowwise_scales() : f.columnwise_scales());
    }
  }

  void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b, Usage b_usage,
            GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options) const override {
    const RowwiseFP8Tensor& ta = as_rowwise(a);
    const RowwiseFP8Tensor& tb = as_rowwise(b);
    const bool a_row = a_usage == Usage::kRowwise, b_row = b_usage == Usage::kRowwise;
    const Tensor da = operand_data(a, ta.rowwise_data(), ta.columnwise_data(), a_usage, layout);
    const Tensor db = operand_data(b, tb.rowwise_data(), tb.columnwise_data(), b_usage, layout);
    // Every value its FP8 value times its row's scale_inv, the products summed in f32: with
    // power-of-two scales every expanded value and every product is exact, so the GEMM's f32
    // accumulation is the only rounding. On CUDA the operands expand to bf16 (FP8 mantissas fit,
    // bf16 has f32's exponent range) for a bf16 tensor-core GEMM with f32 accumulation.
    MemTagScope workspace(MemTag::kWorkspace);
    const DType expanded = a.device().is_cuda() ? DType::kBF16 : DType::kF32;
    const Tensor ax =
        dequantize_rowwise(da, a_row ? ta.rowwise_scales() : ta.columnwise_scales(), expanded);
    const Tensor bx =
        dequantize_rowwise(db, b_row ? tb.rowwise_scales() : tb.columnwise_scales(), expanded);
    GemmOptions g;
    g.bias = options.bias;
    g.accumulate = options.accumulate;
    ops::gemm(ax, Transpose::kNo, bx, Transpose::kYes, out_2d, g);
  }
};

}  // namespace

std::shared_ptr<const QuantizedFormat> make_rowwise_format() {
  return std::make_shared<RowwiseFormat>();
}

}  // namespace ops

RowwiseQuantizer::RowwiseQuantizer(DType dtype, bool power_2_scale, float amax_epsilon,
                                   std::shared_ptr<SlotStats> stats)
    : dtype_(dtype), stats_(std::move(stats)) {
  OCTET_CHECK(is_fp8(dtype_), "RowwiseQuantizer: dtype must be e4m3 or e5m2, got ", dtype_);
  OCTET_CHECK(std::isfinite(amax_epsilon) && amax_epsilon >= 0.f,
              "RowwiseQuantizer: amax_epsilon must be finite and >= 0, got ", amax_epsilon);
  cast_ = {fp8_max(dtype_), power_2_scale, amax_epsilon};
}

void RowwiseQuantizer::cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scale_inv,
                            AmaxRecording amax) const {
  const bool record = amax == AmaxRecording::kRecord && stats_ != nullptr;
  const Tensor source = direction == Usage::kRowwise
                            ? x.reshape({x.rows(), x.cols()})
                            : ops::transpose_2d(x.reshape({x.rows(), x.cols()}));
  ops::quantize_rowwise(source, cast_, data, scale_inv, record ? &stats_->counts : nullptr);
  // The spread of the scales this cast chose (one per row, read on the host).
  if (record && scale_inv.device().is_cpu()) {
    const float* s = scale_inv.data_as<float>();
    for (int64_t i = 0; i < scale_inv.numel(); ++i) stats_->scales.add(s[i]);
  }
}

std::shared_ptr<QuantizedTensor> RowwiseQuantizer::quantize(const Tensor& x, Usage usage,
                                                            Ownership ownership,
                                                            AmaxRecording amax) const {
  ops::check_quantize_input("RowwiseQuantizer::quantize", x);
  ops::check_quantize_usage("RowwiseQuantizer::quantize", usage);
  const int64_t rows = x.rows(), cols = x.cols();
  Tensor row, row_s, col, col_s;
  if (has_usage(usage, Usage::kRowwise)) {
    row = Tensor::empty(x.shape(), dtype_, x.device());
    row_s = Tensor::empty({rows}, DType::kF32, x.device());
    Tensor row_2d = row.reshape({rows, cols});
    cast(x, Usage::kRowwise, row_2d, row_s, amax);
  }
  if (has_usage(usage, Usage::kColumnwise)) {
    col = Tensor::empty({cols, rows}, dtype_, x.device());
    col_s = Tensor::empty({cols}, DType::kF32, x.device());
    cast(x, Usage::kColumnwise, col, col_s, amax);
  }
  auto t = std::make_shared<RowwiseFP8Tensor>(x.shape(), std::move(row), std::move(row_s),
                                              std::move(col), std::move(col_s), ownership);
  t->set_quantizer(ops::quantizer_handle(*this));
  return t;
}

void RowwiseQuantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                     AmaxRecording amax) const {
  constexpr const char* who = "RowwiseQuantizer::quantize_into";
  OCTET_CHECK(dst.format() == kRowwiseFormat && dst.dtype() == dtype_, who, ": destination ",
              dst.describe(), " is not a rowwise ", dtype_, " tensor");
  OCTET_CHECK(!dst.buffers_taken(), who, ": destination ", dst.describe(),
              " has its buffers with a save-for-backward context");
  ops::check_quantize_input(who, src, &dst.shape());
  auto& t = dynamic_cast<RowwiseFP8Tensor&>(dst);
  for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
    if (!t.has(d)) continue;
    const bool row = d == Usage::kRowwise;
    Tensor data = row ? t.rowwise_data().reshape({t.rows(), t.cols()}) : t.columnwise_data();
    Tensor scales = row ? t.rowwise_scales() : t.columnwise_scales();
    cast(src, d, data, scales, amax);
  }
  dst.bump_version();
}

std::string RowwiseQuantizer::describe() const {
  return std::string("rowwise ") + std::string(dtype_name(dtype_));
}

}  // namespace octet
