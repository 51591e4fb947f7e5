// MXFP8Tensor: the shapes of its data and exponents.
#include "runtime/mxfp8_tensor.h"

#include <utility>

namespace octet {
namespace {

const Tensor& any_data(const Tensor& rowwise, const Tensor& columnwise) {
  OCTET_CHECK(rowwise.defined() || columnwise.defined(),
              "MXFP8Tensor needs row-wise or column-wise data; both are undefined");
  return rowwise.defined() ? rowwise : columnwise;
}

}  // namespace

Shape mxfp8_scale_shape(int64_t rows, int64_t cols) {
  return {rows, (cols + kMXFP8BlockSize - 1) / kMXFP8BlockSize};
}

MXFP8Tensor::MXFP8Tensor(Shape shape, Tensor rowwise, Tensor rowwise_scales, Tensor columnwise,
                         Tensor columnwise_scales, Ownership ownership)
    : ScaledTensor(std::move(shape), any_data(rowwise, columnwise).dtype(),
                   held(rowwise, columnwise), ownership, any_data(rowwise, columnwise).device()) {
  OCTET_CHECK(is_fp8(dtype()), "MXFP8Tensor holds e4m3 or e5m2 data, got ", dtype());
  if (rowwise.defined()) set_rowwise(std::move(rowwise), std::move(rowwise_scales));
  if (columnwise.defined()) set_columnwise(std::move(columnwise), std::move(columnwise_scales));
}

void MXFP8Tensor::check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                                  const Tensor&) const {
  const bool row = direction == Usage::kRowwise;
  const Shape data_shape = row ? shape() : Shape{cols(), rows()};
  OCTET_CHECK(data.dtype() == dtype() && data.shape() == data_shape,
              "MXFP8Tensor: ", usage_name(direction), " data must be ", dtype(),
              shape_str(data_shape), row ? "" : " (last dim, prod(leading dims))",
              " for logical shape ", shape_str(shape()), ", got ", data);
  const Shape want = row ? mxfp8_scale_shape(rows(), cols()) : mxfp8_scale_shape(cols(), rows());
  OCTET_CHECK(scales.dtype() == DType::kE8M0 && scales.shape() == want,
              "MXFP8Tensor: ", usage_name(direction), " exponents must be e8m0", shape_str(want),
              " (", row ? "rows" : "cols", ", ceil(", row ? cols() : rows(), " / 32)), got ",
              scales);
}

std::vector<std::pair<std::string, Tensor>> MXFP8Tensor::rowwise_state() const {
  OCTET_CHECK(rowwise_data().defined(), "the checkpoint form of ", describe(),
              " needs row-wise data");
  return {{"", rowwise_data()}, {".scales", rowwise_scales()}};
}

}  // namespace octet
