// The MXFP8 block cast and its inverse, the MXFP8 quantizer, and the MXFP8 format entry.
#include "kernels/mxfp8.h"

#include "kernels/device_policy.h"
#include "kernels/quantized_format.h"
#include "runtime/memory.h"

namespace octet {
namespace ops {

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
  detail::quantize_on_device(op, x, data, scales, "exponents", [&](const detail::Backend& backend) {
    if (row) {
      backend.quantize_mxfp8_rowwise(x, data, scales, counts);
    } else {
      backend.quantize_mxfp8_columnwise(x, data, scales, counts);
    }
  });
}

Tensor dequantize_mxfp8(const Tensor& data, const Tensor& scales, DType dtype) {
  constexpr const char* op = "dequantize_mxfp8";
  check_fp8_data(op, data);
  check_dequantize_scales(op, data, scales, "exponents", DType::kE8M0,
                          mxfp8_scale_shape(data.rows(), data.cols()));
  check_dequantize_dtype(op, dtype);
  return detail::dequantize_on_device(op, data, scales, "exponents", data.shape(), dtype,
                                      [&](const detail::Backend& backend, Tensor& out) {
                                        backend.dequantize_mxfp8(data, scales, out);
                                      });
}

namespace {

// The MXFP8 form of one direction of `source`, in new buffers of `t`'s format.
void make_mxfp8_direction(MXFP8Tensor& t, const Tensor& source, Usage direction) {
  const bool row = direction == Usage::kRowwise;
  Tensor data = row ? Tensor::empty(t.shape(), t.dtype(), t.device())
                    : Tensor::empty({t.cols(), t.rows()}, t.dtype(), t.device());
  Tensor scales = Tensor::empty(
      row ? mxfp8_scale_shape(t.rows(), t.cols()) : mxfp8_scale_shape(t.cols(), t.rows()),
      DType::kE8M0, t.device());
  quantize_mxfp8(source, direction, data, scales);
  t.set_direction(direction, std::move(data), std::move(scales));
}

// One E8M0 exponent per 32 values along K, each direction cast from high precision.
class MXFP8Format final : public ExpandedFormat<MXFP8Tensor, dequantize_mxfp8> {
 public:
  MXFP8Format()
      : ExpandedFormat(
            kMXFP8Format,
            "e4m3 values, one e8m0 exponent per block of 32 along the last dim (column-wise: "
            "along 32 consecutive rows, quantized separately from high precision)",
            kMXFP8BlockSize, kMXFP8BlockSize, "MXFP8") {}

  // Each direction cast by itself, with no need of the tensor's quantizer (a loaded tensor may
  // have none).
  void make_usage(QuantizedTensor& t, Usage missing, const Tensor* source) const override {
    check_recast_source(t, missing, source, "MXFP8");
    MXFP8Tensor& m = as_format<MXFP8Tensor>(t);
    for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
      if (has_usage(missing, d)) make_mxfp8_direction(m, *source, d);
    }
  }
};

}  // namespace

std::shared_ptr<const QuantizedFormat> make_mxfp8_format() {
  return std::make_shared<MXFP8Format>();
}

}  // namespace ops

MXFP8Quantizer::MXFP8Quantizer(DType dtype, std::shared_ptr<SlotStats> stats)
    : ScaledTensorQuantizer("MXFP8Quantizer", "an MXFP8", dtype, std::move(stats)) {}

void MXFP8Quantizer::cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scales,
                          AmaxRecording amax) const {
  SlotStats* stats = recording(amax);
  ops::quantize_mxfp8(x, direction, data, scales, stats != nullptr ? &stats->counts : nullptr);
  add_scale_spread(stats, scales);
}

std::shared_ptr<ScaledTensor> MXFP8Quantizer::make_tensor(const Shape& shape, Tensor rowwise,
                                                          Tensor rowwise_scales, Tensor columnwise,
                                                          Tensor columnwise_scales,
                                                          Ownership ownership) const {
  return std::make_shared<MXFP8Tensor>(shape, std::move(rowwise), std::move(rowwise_scales),
                                       std::move(columnwise), std::move(columnwise_scales),
                                       ownership);
}

std::string MXFP8Quantizer::describe() const {
  return std::string("mxfp8 ") + std::string(dtype_name(dtype_));
}

}  // namespace octet
