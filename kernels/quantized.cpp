// Argument checks for kernels/quantized.h; the format-specific work is the format table's.
#include "kernels/quantized.h"

#include <tuple>

#include "kernels/quantized_format.h"
#include "runtime/named.h"

namespace octet::ops {
namespace {

Usage without(Usage set, Usage drop) {
  return static_cast<Usage>(static_cast<uint8_t>(set) & ~static_cast<uint8_t>(drop));
}

// Output shape of a layout: fprop (a's leading dims, N), dgrad (a's leading dims, K), wgrad (N, K).
Shape gemm_out_shape(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout) {
  Shape out = a.shape();
  if (out.empty()) out.push_back(1);
  switch (layout) {
    case GemmLayout::kFprop:
      out.back() = b.rows();
      return out;
    case GemmLayout::kDgrad:
      out.back() = b.cols();
      return out;
    case GemmLayout::kWgrad:
      return {a.cols(), b.cols()};
  }
  OCTET_FAIL("unknown GEMM layout ", static_cast<int>(layout));
}

// Names follow Y = X·Wᵀ so that a message says which tensor of the layer is wrong.
const char* a_name(GemmLayout layout) { return layout == GemmLayout::kFprop ? "X" : "dY"; }
const char* b_name(GemmLayout layout) { return layout == GemmLayout::kWgrad ? "X" : "W"; }

void check_gemm_operands(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout) {
  const std::string l(gemm_layout_name(layout));
  OCTET_CHECK(!a.buffers_taken() && !b.buffers_taken(), "fp8_gemm (", l,
              "): an operand's buffers are held by a save-for-backward context");
  OCTET_CHECK(a.format() == b.format(), "fp8_gemm (", l, "): operands ", a.describe(), " and ",
              b.describe(), " are in different formats");
  OCTET_CHECK(a.device() == b.device(), "fp8_gemm (", l, "): operands on ", a.device(), " and ",
              b.device());
  check_fp8_gemm_shape(a.format(), a.shape(), "fp8_gemm (" + l + ") " + a_name(layout));
  check_fp8_gemm_shape(b.format(), b.shape(), "fp8_gemm (" + l + ") " + b_name(layout));
  for (const auto& [t, usage, name] : {std::tuple{&a, gemm_a_usage(layout), a_name(layout)},
                                       std::tuple{&b, gemm_b_usage(layout), b_name(layout)}}) {
    OCTET_CHECK(t->has(usage), "fp8_gemm (", l, "): operand ", name, " ", t->describe(), " lacks ",
                usage_name(usage), " data this layout reads (request it with update_usage)");
  }
  switch (layout) {
    case GemmLayout::kFprop:
      OCTET_CHECK(a.cols() == b.cols(), "fp8_gemm (fprop): X ", shape_str(a.shape()), " and W ",
                  shape_str(b.shape()), " differ in K (last dims ", a.cols(), " and ", b.cols(),
                  ")");
      return;
    case GemmLayout::kDgrad:
      OCTET_CHECK(a.cols() == b.rows(), "fp8_gemm (dgrad): dY ", shape_str(a.shape()), " has ",
                  a.cols(), " columns but W ", shape_str(b.shape()), " has ", b.rows(),
                  " rows (N)");
      return;
    case GemmLayout::kWgrad:
      OCTET_CHECK(a.rows() == b.rows(), "fp8_gemm (wgrad): dY ", shape_str(a.shape()), " and X ",
                  shape_str(b.shape()), " differ in M (", a.rows(), " and ", b.rows(), " rows)");
      return;
  }
}

}  // namespace

Tensor dequantize(const QuantizedTensor& t, DType dtype) {
  OCTET_CHECK(!t.buffers_taken(), "dequantize of ", t.describe(),
              ": its buffers are held by a save-for-backward context");
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "dequantize of ", t.describe(),
              ": output dtype must be f32 or bf16, got ", dtype);
  return format_of(t).dequantize(t, dtype);
}

void update_usage(QuantizedTensor& t, Usage usage, const Tensor* source) {
  OCTET_CHECK(usage != Usage::kNone, "update_usage of ", t.describe(),
              ": a quantized tensor must keep row-wise or column-wise data");
  OCTET_CHECK(!t.buffers_taken(), "update_usage of ", t.describe(),
              ": its buffers are held by a save-for-backward context");
  if (source != nullptr) {
    check_quantize_input("update_usage (source)", *source);
    OCTET_CHECK(source->shape() == t.shape(), "update_usage of ", t.describe(), ": source ",
                *source, " does not have the tensor's shape");
  }
  const Usage missing = without(usage, t.usage());
  const Usage extra = without(t.usage(), usage);
  if (missing != Usage::kNone) format_of(t).make_usage(t, missing, source);
  if (extra != Usage::kNone) t.drop_usage(extra);
}

void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) {
  OCTET_CHECK(dst.quantizer() != nullptr, "quantize_into ", dst.describe(),
              ": the tensor has no quantizer (it was built from raw buffers)");
  dst.quantizer()->quantize_into(dst, src, amax);
}

constexpr Named<GemmLayout> kGemmLayouts[] = {
    {GemmLayout::kFprop, "fprop"}, {GemmLayout::kDgrad, "dgrad"}, {GemmLayout::kWgrad, "wgrad"}};
std::string_view gemm_layout_name(GemmLayout layout) { return name_in(kGemmLayouts, layout); }

Usage gemm_a_usage(GemmLayout layout) {
  return layout == GemmLayout::kWgrad ? Usage::kColumnwise : Usage::kRowwise;
}

Usage gemm_b_usage(GemmLayout layout) {
  return layout == GemmLayout::kFprop ? Usage::kRowwise : Usage::kColumnwise;
}

bool fp8_gemm_shape_supported(std::string_view format, const Shape& shape) {
  return quantized_format(format).shape_violation(shape).empty();
}

void check_fp8_gemm_shape(std::string_view format, const Shape& shape, std::string_view what) {
  const std::string violation = quantized_format(format).shape_violation(shape);
  OCTET_CHECK(violation.empty(), what, " has shape ", shape_str(shape), ": ", violation);
}

void fp8_gemm(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout, Tensor& out,
              const FP8GemmOptions& options) {
  check_gemm_operands(a, b, layout);
  const Shape want = gemm_out_shape(a, b, layout);
  OCTET_CHECK(out.defined() && out.shape() == want, "fp8_gemm (", gemm_layout_name(layout),
              "): output must have shape ", shape_str(want), ", got ", out);
  OCTET_CHECK(out.dtype() == DType::kF32 || out.dtype() == DType::kBF16, "fp8_gemm (",
              gemm_layout_name(layout), "): output must be f32 or bf16, got ", out);
  Tensor out_2d = out.flatten_2d();
  format_of(a).gemm(a, gemm_a_usage(layout), b, gemm_b_usage(layout), layout, out_2d, options);
}

Tensor fp8_gemm(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout,
                DType out_dtype, const FP8GemmOptions& options) {
  OCTET_CHECK(options.accumulate == Accumulate::kNo,
              "fp8_gemm: accumulate needs an existing output tensor");
  check_gemm_operands(a, b, layout);
  Tensor out = Tensor::empty(gemm_out_shape(a, b, layout), out_dtype, a.device());
  fp8_gemm(a, b, layout, out, options);
  return out;
}

}  // namespace octet::ops
