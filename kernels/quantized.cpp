// Argument checks and dispatch for kernels/quantized.h: MXFP8 casts, dequantize, usage changes,
// in-place requantization and the FP8 GEMM layouts.
#include "kernels/quantized.h"

#include "kernels/device_policy.h"
#include "runtime/memory.h"

namespace octet::ops {
namespace {

using detail::on_device;
using detail::op_device;

void check_high_precision(const char* op, const Tensor& x, const char* name) {
  OCTET_CHECK(x.defined(), op, ": ", name, " is an undefined tensor");
  OCTET_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, op, ": ", name,
              " must be f32 or bf16, got ", x);
}

// The scaling mode says which concrete class a quantized tensor is; checked, not assumed.
template <typename T, typename Q>
T& as(Q& t) {
  auto* p = dynamic_cast<T*>(&t);
  OCTET_ASSERT(p != nullptr, t.describe(), " is not the class its scaling mode implies");
  return *p;
}
Float8Tensor& as_float8(QuantizedTensor& t) { return as<Float8Tensor>(t); }
const Float8Tensor& as_float8(const QuantizedTensor& t) { return as<const Float8Tensor>(t); }
MXFP8Tensor& as_mxfp8(QuantizedTensor& t) { return as<MXFP8Tensor>(t); }
const MXFP8Tensor& as_mxfp8(const QuantizedTensor& t) { return as<const MXFP8Tensor>(t); }

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

// The stored 2-D operand of a GEMM layout and, for per-tensor scaling, its scale_inv.
struct Operand {
  Tensor data;       // (rows, K): the GEMM reads it along its last dimension
  Tensor scales;     // MXFP8 exponents (rows, K / 32); undefined for per-tensor
  Tensor scale_inv;  // per-tensor (1,) f32; undefined for MXFP8
};

Operand operand(const QuantizedTensor& t, Usage usage, GemmLayout layout, const char* name) {
  OCTET_CHECK(t.has(usage), "fp8_gemm (", gemm_layout_name(layout), "): operand ", name, " ",
              t.describe(), " lacks ", usage_name(usage),
              " data this layout reads (request it with update_usage)");
  Operand op;
  const bool row = usage == Usage::kRowwise;
  if (t.scaling_mode() == ScalingMode::kPerTensor) {
    const Float8Tensor& f = as_float8(t);
    op.data = row ? f.rowwise_data().reshape({t.rows(), t.cols()}) : f.columnwise_data();
    op.scale_inv = f.scale_inv();
  } else {
    const MXFP8Tensor& m = as_mxfp8(t);
    op.data = row ? m.rowwise_data().reshape({t.rows(), t.cols()}) : m.columnwise_data();
    op.scales = row ? m.rowwise_scales() : m.columnwise_scales();
  }
  return op;
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

void check_gemm_operands(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout) {
  const char* l = gemm_layout_name(layout).data();
  OCTET_CHECK(!a.buffers_taken() && !b.buffers_taken(), "fp8_gemm (", l,
              "): an operand's buffers are held by a save-for-backward context");
  OCTET_CHECK(a.scaling_mode() == b.scaling_mode(), "fp8_gemm (", l, "): operands ", a.describe(),
              " and ", b.describe(), " use different scaling modes");
  OCTET_CHECK(a.device() == b.device(), "fp8_gemm (", l, "): operands on ", a.device(), " and ",
              b.device());
  // Names follow Y = X·Wᵀ so the message says which tensor of the layer is wrong.
  const char* a_name = layout == GemmLayout::kFprop ? "X" : "dY";
  const char* b_name = layout == GemmLayout::kWgrad ? "X" : "W";
  check_fp8_gemm_shape(a.scaling_mode(), a.shape(), std::string("fp8_gemm (") + l + ") " + a_name);
  check_fp8_gemm_shape(b.scaling_mode(), b.shape(), std::string("fp8_gemm (") + l + ") " + b_name);
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

void quantize_mxfp8(const Tensor& x, Usage direction, Tensor& data, Tensor& scales) {
  constexpr const char* op = "quantize_mxfp8";
  check_high_precision(op, x, "x");
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
    on_device(device)->quantize_mxfp8_rowwise(x, data, scales);
  } else {
    on_device(device)->quantize_mxfp8_columnwise(x, data, scales);
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

Tensor dequantize(const QuantizedTensor& t, DType dtype) {
  OCTET_CHECK(!t.buffers_taken(), "dequantize of ", t.describe(),
              ": its buffers are held by a save-for-backward context");
  const bool row = t.has(Usage::kRowwise);
  Tensor out;
  if (t.scaling_mode() == ScalingMode::kPerTensor) {
    const Float8Tensor& f = as_float8(t);
    out = dequantize_fp8(row ? f.rowwise_data() : f.columnwise_data(), f.scale_inv(), dtype);
  } else {
    const MXFP8Tensor& m = as_mxfp8(t);
    out = row ? dequantize_mxfp8(m.rowwise_data().reshape({t.rows(), t.cols()}), m.rowwise_scales(),
                                 dtype)
              : dequantize_mxfp8(m.columnwise_data(), m.columnwise_scales(), dtype);
  }
  // Column-wise data is (cols, rows): transpose it back to the logical layout.
  if (!row) out = transpose_2d(out);
  return out.reshape(t.shape());
}

void update_usage(QuantizedTensor& t, Usage usage, const Tensor* source) {
  OCTET_CHECK(usage != Usage::kNone, "update_usage of ", t.describe(),
              ": a quantized tensor must keep row-wise or column-wise data");
  OCTET_CHECK(!t.buffers_taken(), "update_usage of ", t.describe(),
              ": its buffers are held by a save-for-backward context");
  const Usage missing =
      static_cast<Usage>(static_cast<uint8_t>(usage) & ~static_cast<uint8_t>(t.usage()));
  const Usage extra =
      static_cast<Usage>(static_cast<uint8_t>(t.usage()) & ~static_cast<uint8_t>(usage));
  if (t.scaling_mode() == ScalingMode::kPerTensor) {
    Float8Tensor& f = as_float8(t);
    OCTET_CHECK(!has_usage(missing, Usage::kRowwise), "update_usage of ", t.describe(),
                ": row-wise data cannot be made from column-wise data (per-tensor FP8 keeps the "
                "row-wise data whenever it may be needed; quantize again from high precision)");
    if (has_usage(missing, Usage::kColumnwise)) {
      f.set_columnwise_data(transpose_2d(f.rowwise_data().reshape({t.rows(), t.cols()})));
    }
    if (extra != Usage::kNone) f.drop_usage(extra);
    return;
  }
  MXFP8Tensor& m = as_mxfp8(t);
  if (missing != Usage::kNone) {
    OCTET_CHECK(source != nullptr, "update_usage of ", t.describe(), ": MXFP8 ",
                usage_name(missing),
                " data is quantized from high precision and cannot be made from the other "
                "direction; pass the f32/bf16 source (e.g. the master weight)");
    check_high_precision("update_usage", *source, "source");
    OCTET_CHECK(source->shape() == t.shape(), "update_usage of ", t.describe(), ": source ",
                *source, " does not have the tensor's shape");
    for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
      if (has_usage(missing, d)) make_mxfp8_direction(m, *source, d);
    }
  }
  if (extra != Usage::kNone) m.drop_usage(extra);
}

void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) {
  OCTET_CHECK(dst.quantizer() != nullptr, "quantize_into ", dst.describe(),
              ": the tensor has no quantizer (it was built from raw buffers)");
  dst.quantizer()->quantize_into(dst, src, amax);
}

void update_fp8_metas(const std::vector<FP8Meta*>& metas, FP8Direction direction) {
  // One batch for the host's slots and one for the GPU's (one launch there).
  std::vector<detail::SlotUpdate> host, device_slots;
  Device device;
  for (FP8Meta* meta : metas) {
    OCTET_CHECK(meta != nullptr, "update_fp8_metas: null FP8Meta");
    const Recipe& r = meta->recipe();
    for (FP8Slot& s : meta->slots(direction)) {
      const detail::SlotUpdate u{&s, fp8_max(r.dtype(direction)), r.margin, r.amax_compute_algo};
      if (s.scale.device().is_cpu()) {
        host.push_back(u);
        continue;
      }
      OCTET_CHECK(device_slots.empty() || s.scale.device() == device,
                  "update_fp8_metas: FP8 metas on more than one CUDA device (", device, " and ",
                  s.scale.device(), ")");
      device = s.scale.device();
      device_slots.push_back(u);
    }
    meta->count_update(direction);
  }
  if (!host.empty()) on_device(Device::cpu())->update_fp8_slots(host);
  if (!device_slots.empty()) on_device(device)->update_fp8_slots(device_slots);
}

std::string_view gemm_layout_name(GemmLayout layout) {
  switch (layout) {
    case GemmLayout::kFprop:
      return "fprop";
    case GemmLayout::kDgrad:
      return "dgrad";
    case GemmLayout::kWgrad:
      return "wgrad";
  }
  OCTET_FAIL("unknown GEMM layout ", static_cast<int>(layout));
}

bool fp8_gemm_shape_supported(ScalingMode mode, const Shape& shape) {
  const int64_t rows = shape.empty() ? 1 : shape_numel(Shape(shape.begin(), shape.end() - 1));
  const int64_t cols = shape.empty() ? 1 : shape.back();
  if (mode == ScalingMode::kMXFP8) return rows % 32 == 0 && cols % 32 == 0;
  return rows % 8 == 0 && cols % 16 == 0;
}

void check_fp8_gemm_shape(ScalingMode mode, const Shape& shape, std::string_view what) {
  if (fp8_gemm_shape_supported(mode, shape)) return;
  const int64_t rows = shape.empty() ? 1 : shape_numel(Shape(shape.begin(), shape.end() - 1));
  const int64_t cols = shape.empty() ? 1 : shape.back();
  if (mode == ScalingMode::kMXFP8) {
    OCTET_FAIL(what, " has shape ", shape_str(shape),
               ": MXFP8 GEMMs need prod(leading dims) and the last dim to be multiples of 32 (",
               rows, " % 32 = ", rows % 32, ", ", cols, " % 32 = ", cols % 32, ")");
  }
  OCTET_FAIL(what, " has shape ", shape_str(shape),
             ": per-tensor FP8 GEMMs need prod(leading dims) % 8 == 0 and last dim % 16 == 0 (",
             rows, " % 8 = ", rows % 8, ", ", cols, " % 16 = ", cols % 16, ")");
}

void fp8_gemm(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout, Tensor& out,
              const FP8GemmOptions& options) {
  check_gemm_operands(a, b, layout);
  const Usage a_usage = layout == GemmLayout::kWgrad ? Usage::kColumnwise : Usage::kRowwise;
  const Usage b_usage = layout == GemmLayout::kFprop ? Usage::kRowwise : Usage::kColumnwise;
  const Operand pa = operand(a, a_usage, layout, layout == GemmLayout::kFprop ? "X" : "dY");
  const Operand pb = operand(b, b_usage, layout, layout == GemmLayout::kWgrad ? "X" : "W");
  const Shape want = gemm_out_shape(a, b, layout);
  OCTET_CHECK(out.defined() && out.shape() == want, "fp8_gemm (", gemm_layout_name(layout),
              "): output must have shape ", shape_str(want), ", got ", out);
  GemmOptions gemm_options;
  gemm_options.bias = options.bias;
  gemm_options.accumulate = options.accumulate;
  Tensor out_2d = out.flatten_2d();
  if (a.scaling_mode() == ScalingMode::kPerTensor) {
    gemm_options.a_scale_inv = &pa.scale_inv;
    gemm_options.b_scale_inv = &pb.scale_inv;
    gemm_options.fp8_accumulation =
        layout == GemmLayout::kFprop ? FP8Accumulation::kFast : FP8Accumulation::kSplit;
    gemm(pa.data, Transpose::kNo, pb.data, Transpose::kYes, out_2d, gemm_options);
  } else {
    // Every expanded value is exact in f32, and so is every product of two of them: the f32
    // GEMM's accumulation is the only rounding, as on the FP8 tensor cores. On CUDA the blocks
    // expand to bf16 instead (FP8 mantissas fit, and bf16 has f32's exponent range) for a bf16
    // tensor-core GEMM with f32 accumulation: Hopper has no block-scaled FP8 GEMM.
    MemTagScope workspace(MemTag::kWorkspace);
    const DType expanded = a.device().is_cuda() ? DType::kBF16 : DType::kF32;
    const Tensor ax = dequantize_mxfp8(pa.data, pa.scales, expanded);
    const Tensor bx = dequantize_mxfp8(pb.data, pb.scales, expanded);
    gemm(ax, Transpose::kNo, bx, Transpose::kYes, out_2d, gemm_options);
  }
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
