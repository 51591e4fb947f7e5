// The MXFP8 block cast and its inverse, the MXFP8 quantizer, and the MXFP8 format entry.
#include "kernels/mxfp8.h"

#include "kernels/device_policy.h"
#include "kernels/quantized_format.h"
#include "runtime/memory.h"

namespace octet {
namespace ops {

using detail::on_device;
using detail::op_device;

void quantize_mxfp8(const Tensor& x, Usage direction, Tensor& data, Tensor& scales,
                    FP8CastCounts* counts) {
  constexpr const char* op = "quantize_mxfp8";
  check_quantize_input(op, x);
  OCTET_CHECK(direction == Usage::kRowwise || direction == Usage::kColumnwise, op,
              ": direction must be row-wise or column-wise, got ", usage_name(direction));
  const bool row = direction == Usage::kRowwise;
  const Shape data_shape = row ? x.shape() : Shape{x.cols(), x.rows()};
  const Shape scale_shape =
      row ? mxfp8_scale_shape(x.rows(), x.cols()) : mxfp8_scale_shape(x.cols(), x.rows());
  OCTET_CHECK(data.defined() && is_fp8(data.dtype()) && data.shape() == data_shape, op, ": ",
              usage_name(direction), " data must be e4m3 or e5m2 of shape ", shape_str(data_shape),
              ", got ", data);
  OCTET_CHECK(scales.defined() && scales.dtype() == DType::kE8M0 && scales.shape() == scale_shape,
              op, ": ", usage_name(direction), " exponents must be e8m0", shape_str(scale_shape),
              ", got ", scales);
  const Device device = op_device(op, {{x, "x"}, {data, "data"}, {scales, "exponents"}});
  if (row) {
    on_device(device)->quantize_mxfp8_rowwise(x, data, scales, counts);
  } else {
    on_device(device)->quantize_mxfp8_columnwise(x, data, scales, counts);
  }
  data.bump_version();
  scales.bump_version();
}

Tensor dequantize_mxfp8(const Tensor& data, const Tensor& scales, DType dtype) {
  constexpr const char* op = "dequantize_mxfp8";
  OCTET_CHECK(data.defined() && is_fp8(data.dtype()), op, ": data must be e4m3 or e5m2, got ",
              data);
  const Shape scale_shape = mxfp8_scale_shape(data.rows(), data.cols());
  OCTET_CHECK(scales.defined() && scales.dtype() == DType::kE8M0 && scales.shape() == scale_shape,
              op, ": exponents for data ", data, " must be e8m0", shape_str(scale_shape), ", got ",
              scales);
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, op,
              ": output dtype must be f32 or bf16, got ", dtype);
  const Device device = op_device(op, {{data, "data"}, {scales, "exponents"}});
  Tensor out = Tensor::empty(data.shape(), dtype, device);
  on_device(device)->dequantize_mxfp8(data, scales, out);
  return out;
}

namespace {

const MXFP8Tensor& as_mxfp8(const QuantizedTensor& t) {
  const auto* m = dynamic_cast<const MXFP8Tensor*>(&t);
  OCTET_ASSERT(m != nullptr, t.describe(), " names the mxfp8 format but is not an MXFP8Tensor");
  return *m;
}
MXFP8Tensor& as_mxfp8(QuantizedTensor& t) {
  auto* m = dynamic_cast<MXFP8Tensor*>(&t);
  OCTET_ASSERT(m != nullptr, t.describe(), " names the mxfp8 format but is not an MXFP8Tensor");
  return *m;
}

// The MXFP8 form of one direction of `source`, in new buffers of `t`'s format.
void make_mxfp8_direction(MXFP8Tensor& t, const Tensor& source, Usage direction) {
  const bool row = direction == Usage::kRowwise;
  Tensor data = row ? Tensor::empty(t.shape(), t.dtype(), t.device())
                    : Tensor::empty({t.cols(), t.rows()}, t.dtype(), t.device());
  Tensor scales = Tensor::empty(
      row ? mxfp8_scale_shape(t.rows(), t.cols()) : mxfp8_scale_shape(t.cols(), t.rows()),
      DType::kE8M0, t.device());
  quantize_mxfp8(source, direction, data, scales);
  if (row) {
    t.set_rowwise(std::move(data), std::move(scales));
  } else {
    t.set_columnwise(std::move(data), std::move(scales));
  }
}

// One E8M0 exponent per 32 values along K, each direction cast from high precision.
class MXFP8Format final : public QuantizedFormat {
 public:
  std::string_view name() const override { return kMXFP8Format; }
  std::string layout() const override {
    return "e4m3 values, one e8m0 exponent per block of 32 along the last dim (column-wise: "
           "along 32 consecutive rows, quantized separately from high precision)";
  }

  std::string shape_violation(const Shape& shape) const override {
    return multiple_rule_violation(shape, kMXFP8BlockSize, kMXFP8BlockSize, "MXFP8");
  }
  int64_t row_multiple() const override { return 32; }

  Tensor dequantize(const QuantizedTensor& t, DType dtype) const override {
    const MXFP8Tensor& m = as_mxfp8(t);
    if (t.has(Usage::kRowwise)) {
      return dequantize_mxfp8(m.rowwise_data().reshape({t.rows(), t.cols()}), m.rowwise_scales(),
                              dtype)
          .reshape(t.shape());
    }
    // Column-wise data is (cols, rows): transpose it back to the logical layout.
    return transpose_2d(dequantize_mxfp8(m.columnwise_data(), m.columnwise_scales(), dtype))
        .reshape(t.shape());
  }

  void make_usage(QuantizedTensor& t, Usage missing, const Tensor* source) const override {
    OCTET_CHECK(source != nullptr, "update_usage of ", t.describe(), ": MXFP8 ",
                usage_name(missing),
                " data is quantized from high precision and cannot be made from the other "
                "direction; pass the f32/bf16 source (e.g. the master weight)");
    MXFP8Tensor& m = as_mxfp8(t);
    for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
      if (has_usage(missing, d)) make_mxfp8_direction(m, *source, d);
    }
  }

  void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b, Usage b_usage,
            GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options) const override {
    const MXFP8Tensor& ma = as_mxfp8(a);
    const MXFP8Tensor& mb = as_mxfp8(b);
    const bool a_row = a_usage == Usage::kRowwise, b_row = b_usage == Usage::kRowwise;
    const Tensor da = operand_data(a, ma.rowwise_data(), ma.columnwise_data(), a_usage, layout);
    const Tensor db = operand_data(b, mb.rowwise_data(), mb.columnwise_data(), b_usage, layout);
    // Every expanded value is exact in f32, and so is every product of two of them: the f32
    // GEMM's accumulation is the only rounding, as on the FP8 tensor cores. On CUDA the blocks
    // expand to bf16 instead (FP8 mantissas fit, and bf16 has f32's exponent range) for a bf16
    // tensor-core GEMM with f32 accumulation: Hopper has no block-scaled FP8 GEMM.
    MemTagScope workspace(MemTag::kWorkspace);
    const DType expanded = a.device().is_cuda() ? DType::kBF16 : DType::kF32;
    const Tensor ax =
        dequantize_mxfp8(da, a_row ? ma.rowwise_scales() : ma.columnwise_scales(), expanded);
    const Tensor bx =
        dequantize_mxfp8(db, b_row ? mb.rowwise_scales() : mb.columnwise_scales(), expanded);
    GemmOptions g;
    g.bias = options.bias;
    g.accumulate = options.accumulate;
    ops::gemm(ax, Transpose::kNo, bx, Transpose::kYes, out_2d, g);
  }
};

}  // namespace

std::shared_ptr<const QuantizedFormat> make_mxfp8_format() {
  return std::make_shared<MXFP8Format>();
}

}  // namespace ops

MXFP8Quantizer::MXFP8Quantizer(DType dtype, std::shared_ptr<SlotStats> stats)
    : dtype_(dtype), stats_(std::move(stats)) {
  OCTET_CHECK(is_fp8(dtype_), "MXFP8Quantizer: dtype must be e4m3 or e5m2, got ", dtype_);
}

void MXFP8Quantizer::cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scales,
                          AmaxRecording amax) const {
  const bool record = amax == AmaxRecording::kRecord && stats_ != nullptr;
  ops::quantize_mxfp8(x, direction, data, scales, record ? &stats_->counts : nullptr);
  // The spread of the exponents this cast chose (one byte per block, read on the host).
  if (record && scales.device().is_cpu()) {
    const uint8_t* e = scales.data_as<uint8_t>();
    for (int64_t i = 0; i < scales.numel(); ++i) stats_->scales.add(from_e8m0(e[i]));
  }
}

std::shared_ptr<QuantizedTensor> MXFP8Quantizer::quantize(const Tensor& x, Usage usage,
                                                          Ownership ownership,
                                                          AmaxRecording amax) const {
  ops::check_quantize_input("MXFP8Quantizer::quantize", x);
  ops::check_quantize_usage("MXFP8Quantizer::quantize", usage);
  Tensor row, row_scales, col, col_scales;
  if (has_usage(usage, Usage::kRowwise)) {
    row = Tensor::empty(x.shape(), dtype_, x.device());
    row_scales = Tensor::empty(mxfp8_scale_shape(x.rows(), x.cols()), DType::kE8M0, x.device());
    cast(x, Usage::kRowwise, row, row_scales, amax);
  }
  if (has_usage(usage, Usage::kColumnwise)) {
    col = Tensor::empty({x.cols(), x.rows()}, dtype_, x.device());
    col_scales = Tensor::empty(mxfp8_scale_shape(x.cols(), x.rows()), DType::kE8M0, x.device());
    cast(x, Usage::kColumnwise, col, col_scales, amax);
  }
  auto t = std::make_shared<MXFP8Tensor>(x.shape(), std::move(row), std::move(row_scales),
                                         std::move(col), std::move(col_scales), ownership);
  t->set_quantizer(ops::quantizer_handle(*this));
  return t;
}

void MXFP8Quantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                   AmaxRecording amax) const {
  constexpr const char* who = "MXFP8Quantizer::quantize_into";
  OCTET_CHECK(dst.format() == kMXFP8Format && dst.dtype() == dtype_, who, ": destination ",
              dst.describe(), " is not an MXFP8 ", dtype_, " tensor");
  OCTET_CHECK(!dst.buffers_taken(), who, ": destination ", dst.describe(),
              " has its buffers with a save-for-backward context");
  ops::check_quantize_input(who, src, &dst.shape());
  auto* mx = dynamic_cast<MXFP8Tensor*>(&dst);
  OCTET_ASSERT(mx != nullptr, dst.describe(), " is not an MXFP8Tensor");
  MXFP8Tensor& m = *mx;
  if (m.has(Usage::kRowwise)) {
    Tensor data = m.rowwise_data(), scales = m.rowwise_scales();
    cast(src, Usage::kRowwise, data, scales, amax);
  }
  if (m.has(Usage::kColumnwise)) {
    Tensor data = m.columnwise_data(), scales = m.columnwise_scales();
    cast(src, Usage::kColumnwise, data, scales, amax);
  }
  dst.bump_version();
}

std::string MXFP8Quantizer::describe() const {
  return std::string("mxfp8 ") + std::string(dtype_name(dtype_));
}

}  // namespace octet
