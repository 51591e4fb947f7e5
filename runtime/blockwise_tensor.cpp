// BlockwiseFP8Tensor: the shapes of its data and scales.
#include "runtime/blockwise_tensor.h"

namespace octet {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

const Tensor& any_data(const Tensor& rowwise, const Tensor& columnwise) {
  OCTET_CHECK(rowwise.defined() || columnwise.defined(),
              "BlockwiseFP8Tensor needs row-wise or column-wise data; both are undefined");
  return rowwise.defined() ? rowwise : columnwise;
}

}  // namespace

Shape blockwise_scale_shape(BlockScaling blocks, int64_t rows, int64_t cols) {
  if (blocks == BlockScaling::k1D) return {ceil_div(cols, kFP8BlockLen), round_up(rows, 4)};
  return {ceil_div(rows, kFP8BlockLen), round_up(ceil_div(cols, kFP8BlockLen), 4)};
}

BlockwiseFP8Tensor::BlockwiseFP8Tensor(Shape shape, BlockScaling blocks, Tensor rowwise,
                                       Tensor rowwise_scale_inv, Tensor columnwise,
                                       Tensor columnwise_scale_inv, Ownership ownership)
    : ScaledTensor(std::move(shape), any_data(rowwise, columnwise).dtype(),
                   held(rowwise, columnwise), ownership, any_data(rowwise, columnwise).device()),
      blocks_(blocks) {
  OCTET_CHECK(is_fp8(dtype()), "BlockwiseFP8Tensor holds e4m3 or e5m2 data, got ", dtype());
  OCTET_CHECK(blocks == BlockScaling::k1D || blocks == BlockScaling::k2D,
              "BlockwiseFP8Tensor: unknown block scaling ", static_cast<int>(blocks));
  if (rowwise.defined()) {
    set_direction(Usage::kRowwise, std::move(rowwise), std::move(rowwise_scale_inv));
  }
  if (columnwise.defined()) {
    set_direction(Usage::kColumnwise, std::move(columnwise), std::move(columnwise_scale_inv));
  }
}

void BlockwiseFP8Tensor::check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                                         const Tensor&) const {
  const bool row = direction == Usage::kRowwise;
  const Shape data_shape = row ? shape() : Shape{cols(), rows()};
  OCTET_CHECK(data.dtype() == dtype() && data.shape() == data_shape,
              "BlockwiseFP8Tensor: ", usage_name(direction), " data must be ", dtype(),
              shape_str(data_shape), " for ", "logical shape ", shape_str(shape()), ", got ", data);
  const Shape want = row ? blockwise_scale_shape(blocks_, rows(), cols())
                         : blockwise_scale_shape(blocks_, cols(), rows());
  OCTET_CHECK(scales.dtype() == DType::kF32 && scales.shape() == want,
              "BlockwiseFP8Tensor: ", usage_name(direction), " scale_inv must be f32",
              shape_str(want), " (", blocks_ == BlockScaling::k1D ? "1x128" : "128x128",
              " blocks), got ", scales);
}

std::vector<std::pair<std::string, Tensor>> BlockwiseFP8Tensor::rowwise_state() const {
  OCTET_CHECK(rowwise_data().defined(), "the checkpoint form of ", describe(),
              " needs row-wise data");
  return {{"", rowwise_data()}, {".scale_inv", rowwise_scales()}};
}

std::vector<std::pair<std::string, std::string>> BlockwiseFP8Tensor::attributes() const {
  return {{"blocks", blocks_ == BlockScaling::k1D ? "1x128" : "128x128"}};
}

}  // namespace octet
