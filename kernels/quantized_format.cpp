// The format table: registration and look-up.
#include "kernels/quantized_format.h"

#include <mutex>

#include "kernels/rowwise.h"
#include "runtime/error.h"
#include "runtime/fp8.h"
#include "runtime/memory.h"

namespace octet::ops {
namespace {

struct Table {
  std::mutex mutex;
  std::vector<std::shared_ptr<const QuantizedFormat>> formats;
};

// Built on first use with the built-in formats, so no static-initialisation order matters.
Table& table() {
  static Table* t = [] {
    auto* fresh = new Table;
    fresh->formats = {make_per_tensor_format(), make_mxfp8_format(), make_blockwise_format(),
                      make_nvfp4_format(), make_rowwise_format()};
    return fresh;
  }();
  return *t;
}

std::string joined_names(const Table& t) {
  std::string out;
  for (const auto& f : t.formats) out += (out.empty() ? "" : ", ") + std::string(f->name());
  return out;
}

}  // namespace

const QuantizedFormat& quantized_format(std::string_view name) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& f : t.formats) {
    if (f->name() == name) return *f;
  }
  OCTET_FAIL("unknown quantized format \"", name, "\" (registered: ", joined_names(t), ")");
}

const QuantizedFormat& format_of(const QuantizedTensor& t) { return quantized_format(t.format()); }

void register_quantized_format(std::shared_ptr<const QuantizedFormat> format) {
  OCTET_CHECK(format != nullptr, "register_quantized_format: null format");
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& f : t.formats) {
    OCTET_CHECK(f->name() != format->name(), "register_quantized_format: a format named \"",
                format->name(), "\" is already registered");
  }
  t.formats.push_back(std::move(format));
}

std::vector<std::string> quantized_format_names() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<std::string> out;
  for (const auto& f : t.formats) out.emplace_back(f->name());
  return out;
}

Tensor operand_data(const QuantizedTensor& t, const Tensor& rowwise, const Tensor& columnwise,
                    Usage usage, GemmLayout layout) {
  OCTET_ASSERT(t.has(usage), "fp8_gemm (", gemm_layout_name(layout), "): operand ", t.describe(),
               " lacks ", usage_name(usage), " data");
  return usage == Usage::kRowwise ? rowwise.reshape({t.rows(), t.cols()}) : columnwise;
}

std::string multiple_rule_violation(const Shape& shape, int64_t row_multiple, int64_t col_multiple,
                                    std::string_view what) {
  const int64_t rows = shape.empty() ? 1 : shape_numel(Shape(shape.begin(), shape.end() - 1));
  const int64_t cols = shape.empty() ? 1 : shape.back();
  if (rows % row_multiple == 0 && cols % col_multiple == 0) return "";
  const std::string r = std::to_string(row_multiple), c = std::to_string(col_multiple);
  const std::string rule =
      row_multiple == col_multiple
          ? "prod(leading dims) and the last dim to be multiples of " + r
          : "prod(leading dims) % " + r + " == 0 and last dim % " + c + " == 0";
  return std::string(what) + " GEMMs need " + rule + " (" + std::to_string(rows) + " % " + r +
         " = " + std::to_string(rows % row_multiple) + ", " + std::to_string(cols) + " % " + c +
         " = " + std::to_string(cols % col_multiple) + ")";
}

void check_recast_source(const QuantizedTensor& t, Usage missing, const Tensor* source,
                         std::string_view what) {
  OCTET_CHECK(source != nullptr, "update_usage of ", t.describe(), ": ", what, " ",
              usage_name(missing),
              " data is quantized from high precision and cannot be made from the other "
              "direction; pass the f32/bf16 source (e.g. the master weight)");
}

void recast_from_source(ScaledTensor& t, Usage missing, const Tensor* source,
                        std::string_view what) {
  check_recast_source(t, missing, source, what);
  OCTET_CHECK(t.quantizer() != nullptr, "update_usage of ", t.describe(),
              ": making a direction from the source needs the tensor's quantizer");
  auto fresh = t.quantizer()->quantize(*source, missing, t.ownership(), AmaxRecording::kSkip);
  const auto& f = as_format<ScaledTensor>(*fresh);
  for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
    if (has_usage(missing, d)) {
      t.set_direction(d, f.direction_data(d), f.direction_scales(d), f.direction_extra(d));
    }
  }
}

void expanded_gemm(const ScaledTensor& a, Usage a_usage, const ScaledTensor& b, Usage b_usage,
                   GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options,
                   Tensor (*expand)(const Tensor& data, const Tensor& scales, DType dtype)) {
  const Tensor da = operand_data(a, a.rowwise_data(), a.columnwise_data(), a_usage, layout);
  const Tensor db = operand_data(b, b.rowwise_data(), b.columnwise_data(), b_usage, layout);
  // With power-of-two scales (MXFP8's always are) every expanded value is exact in f32, and so
  // is every product of two of them: the f32 GEMM's accumulation is the only rounding, as on the
  // FP8 tensor cores. On CUDA the operands
  // expand to bf16 instead (FP8 mantissas fit, and bf16 has f32's exponent range) for a bf16
  // tensor-core GEMM with f32 accumulation: Hopper has no block-scaled FP8 GEMM.
  MemTagScope workspace(MemTag::kWorkspace);
  const DType expanded = a.device().is_cuda() ? DType::kBF16 : DType::kF32;
  const Tensor ax = expand(da, a.direction_scales(a_usage), expanded);
  const Tensor bx = expand(db, b.direction_scales(b_usage), expanded);
  GemmOptions g;
  g.bias = options.bias;
  g.accumulate = options.accumulate;
  gemm(ax, Transpose::kNo, bx, Transpose::kYes, out_2d, g);
}

void check_fp8_data(const char* who, const Tensor& data) {
  OCTET_CHECK(data.defined() && is_fp8(data.dtype()), who, ": data must be e4m3 or e5m2, got ",
              data);
}

void check_dequantize_scales(const char* who, const Tensor& data, const Tensor& scales,
                             const char* name, DType dtype, const Shape& want) {
  OCTET_CHECK(scales.defined() && scales.dtype() == dtype && scales.shape() == want, who, ": ",
              name, " for data ", data, " must be ", dtype, shape_str(want), ", got ", scales);
}

void check_fp8_data_2d(const char* who, const Tensor& data, const Tensor& x) {
  OCTET_CHECK(
      data.defined() && is_fp8(data.dtype()) && data.rows() == x.rows() && data.cols() == x.cols(),
      who, ": data must be e4m3 or e5m2 of x's 2-D shape (", x.rows(), ", ", x.cols(), "), got ",
      data);
}

void check_dequantize_dtype(const char* who, DType dtype) {
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, who,
              ": output dtype must be f32 or bf16, got ", dtype);
}

void check_quantize_input(const char* who, const Tensor& x, const Shape* shape) {
  OCTET_CHECK(x.defined(), who, ": input is an undefined tensor");
  OCTET_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, who,
              ": input must be f32 or bf16, got ", x);
  if (shape != nullptr) {
    OCTET_CHECK(x.shape() == *shape, who, ": source ", x, " must have the destination's shape ",
                shape_str(*shape));
  }
}

void check_quantize_usage(const char* who, Usage usage) {
  OCTET_CHECK(usage != Usage::kNone, who, ": asked for no usage (row-wise and/or column-wise)");
}

std::shared_ptr<const Quantizer> quantizer_handle(const Quantizer& q) {
  return q.weak_from_this().lock();
}

}  // namespace octet::ops

namespace octet {

ScaledTensorQuantizer::ScaledTensorQuantizer(const char* name, const char* kind, DType dtype,
                                             std::shared_ptr<SlotStats> stats)
    : dtype_(dtype), stats_(std::move(stats)), name_(name), kind_(kind) {
  OCTET_CHECK(is_fp8(dtype_), name_, ": dtype must be e4m3 or e5m2, got ", dtype_);
}

void ScaledTensorQuantizer::add_scale_spread(SlotStats* stats, const Tensor& scales) {
  if (stats == nullptr || !scales.device().is_cpu()) return;
  const uint8_t* e = scales.dtype() == DType::kE8M0 ? scales.data_as<uint8_t>() : nullptr;
  const float* f = e == nullptr ? scales.data_as<float>() : nullptr;
  for (int64_t i = 0; i < scales.numel(); ++i) {
    const float s = e != nullptr ? from_e8m0(e[i]) : f[i];
    if (s != 0.f) stats->scales.add(s);
  }
}

std::shared_ptr<QuantizedTensor> ScaledTensorQuantizer::quantize(const Tensor& x, Usage usage,
                                                                 Ownership ownership,
                                                                 AmaxRecording amax) const {
  const std::string who = std::string(name_) + "::quantize";
  ops::check_quantize_input(who.c_str(), x);
  ops::check_quantize_usage(who.c_str(), usage);
  const int64_t rows = x.rows(), cols = x.cols();
  Tensor data[2], scales[2];  // [row-wise, column-wise]
  for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
    if (!has_usage(usage, d)) continue;
    const bool row = d == Usage::kRowwise;
    data[row ? 0 : 1] = Tensor::empty(row ? x.shape() : Shape{cols, rows}, dtype_, x.device());
    scales[row ? 0 : 1] = Tensor::empty(row ? scale_shape(rows, cols) : scale_shape(cols, rows),
                                        scale_dtype(), x.device());
  }
  if (usage == Usage::kBoth) {
    cast_both(x, data[0], scales[0], data[1], scales[1], amax);
  } else {
    const int i = usage == Usage::kRowwise ? 0 : 1;
    cast(x, usage, data[i], scales[i], amax);
  }
  auto t = make_tensor(x.shape(), std::move(data[0]), std::move(scales[0]), std::move(data[1]),
                       std::move(scales[1]), ownership);
  t->set_quantizer(ops::quantizer_handle(*this));
  return t;
}

void ScaledTensorQuantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                          AmaxRecording amax) const {
  const std::string who = std::string(name_) + "::quantize_into";
  OCTET_CHECK(dst.format() == format() && dst.dtype() == dtype_, who, ": destination ",
              dst.describe(), " is not ", kind_, " ", dtype_, " tensor");
  OCTET_CHECK(!dst.buffers_taken(), who, ": destination ", dst.describe(),
              " has its buffers with a save-for-backward context");
  ops::check_quantize_input(who.c_str(), src, &dst.shape());
  auto& t = ops::as_format<ScaledTensor>(dst);
  check_destination(who, t);
  if (t.has(Usage::kRowwise) && t.has(Usage::kColumnwise)) {
    Tensor row = t.rowwise_data(), row_scales = t.direction_scales(Usage::kRowwise);
    Tensor col = t.columnwise_data(), col_scales = t.direction_scales(Usage::kColumnwise);
    cast_both(src, row, row_scales, col, col_scales, amax);
  } else {
    for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
      if (!t.has(d)) continue;
      Tensor data = t.direction_data(d), scales = t.direction_scales(d);
      cast(src, d, data, scales, amax);
    }
  }
  dst.bump_version();
}

void ScaledTensorQuantizer::cast_both(const Tensor& x, Tensor& rowwise, Tensor& rowwise_scales,
                                      Tensor& columnwise, Tensor& columnwise_scales,
                                      AmaxRecording amax) const {
  cast(x, Usage::kRowwise, rowwise, rowwise_scales, amax);
  cast(x, Usage::kColumnwise, columnwise, columnwise_scales, amax);
}

}  // namespace octet
