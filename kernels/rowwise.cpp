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

void quantize_rowwise(const Tensor& x, const RowwiseCast& cast, Tensor& data, Tensor& scale_inv,
                      FP8CastCounts* counts) {
  constexpr const char* op = "quantize_rowwise";
  check_quantize_input(op, x);
  check_fp8_data_2d(op, data, x);
  OCTET_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::kF32 &&
                  scale_inv.shape() == Shape{x.rows()},
              op, ": scale_inv must be f32(", x.rows(), ") (one per row), got ", scale_inv);
  detail::quantize_on_device(op, x, data, scale_inv, "scale_inv",
                             [&](const detail::Backend& backend) {
                               backend.quantize_rowwise(x, cast, data, scale_inv, counts);
                             });
}

Tensor dequantize_rowwise(const Tensor& data, const Tensor& scale_inv, DType dtype) {
  constexpr const char* op = "dequantize_rowwise";
  check_fp8_data(op, data);
  OCTET_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::kF32 &&
                  scale_inv.shape() == Shape{data.rows()},
              op, ": scale_inv for data ", data, " must be f32(", data.rows(),
              ") (one per row), got ", scale_inv);
  check_dequantize_dtype(op, dtype);
  return detail::dequantize_on_device(op, data, scale_inv, "scale_inv", data.shape(), dtype,
                                      [&](const detail::Backend& backend, Tensor& out) {
                                        backend.dequantize_rowwise(data, scale_inv, out);
                                      });
}

namespace {

// One f32 scale per row of each operand along K, each direction cast from high precision; the
// GEMM takes every value as its FP8 value times its row's scale_inv, the products summed in f32.
class RowwiseFormat final : public ExpandedFormat<RowwiseFP8Tensor, dequantize_rowwise> {
 public:
  // The wgrad GEMM reduces over the token rows, so both dims of every operand follow the rule of
  // the FP8 tensor cores' leading dimensions.
  RowwiseFormat()
      : ExpandedFormat(
            kRowwiseFormat,
            "e4m3/e5m2 values, one f32 scale_inv per row along the last dim (column-wise: per "
            "column, quantized separately from high precision), power-of-two by default",
            16, 16, "row-wise FP8") {}

  void make_usage(QuantizedTensor& t, Usage missing, const Tensor* source) const override {
    recast_from_source(as_format<RowwiseFP8Tensor>(t), missing, source, "row-wise FP8");
  }
};

}  // namespace

std::shared_ptr<const QuantizedFormat> make_rowwise_format() {
  return std::make_shared<RowwiseFormat>();
}

}  // namespace ops

RowwiseQuantizer::RowwiseQuantizer(DType dtype, bool power_2_scale, float amax_epsilon,
                                   std::shared_ptr<SlotStats> stats)
    : ScaledTensorQuantizer("RowwiseQuantizer", "a rowwise", dtype, std::move(stats)) {
  OCTET_CHECK(std::isfinite(amax_epsilon) && amax_epsilon >= 0.f,
              "RowwiseQuantizer: amax_epsilon must be finite and >= 0, got ", amax_epsilon);
  cast_ = {fp8_max(dtype_), power_2_scale, amax_epsilon};
}

void RowwiseQuantizer::cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scale_inv,
                            AmaxRecording amax) const {
  SlotStats* stats = recording(amax);
  const Tensor x_2d = x.reshape({x.rows(), x.cols()});
  const Tensor source = direction == Usage::kRowwise ? x_2d : ops::transpose_2d(x_2d);
  Tensor data_2d = data.reshape({data.rows(), data.cols()});
  ops::quantize_rowwise(source, cast_, data_2d, scale_inv,
                        stats != nullptr ? &stats->counts : nullptr);
  add_scale_spread(stats, scale_inv);
}

std::shared_ptr<ScaledTensor> RowwiseQuantizer::make_tensor(const Shape& shape, Tensor rowwise,
                                                            Tensor rowwise_scale_inv,
                                                            Tensor columnwise,
                                                            Tensor columnwise_scale_inv,
                                                            Ownership ownership) const {
  return std::make_shared<RowwiseFP8Tensor>(shape, std::move(rowwise), std::move(rowwise_scale_inv),
                                            std::move(columnwise), std::move(columnwise_scale_inv),
                                            ownership);
}

std::string RowwiseQuantizer::describe() const {
  return std::string("rowwise ") + std::string(dtype_name(dtype_));
}

}  // namespace octet
