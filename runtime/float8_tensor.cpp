// Float8Tensor: buffer checks, usage bookkeeping and the save-for-backward hand-over.
#include "runtime/float8_tensor.h"

#include <utility>

namespace octet {
namespace {

DType data_dtype(const Tensor& rowwise, const Tensor& columnwise) {
  if (rowwise.defined()) return rowwise.dtype();
  OCTET_CHECK(columnwise.defined(),
              "Float8Tensor needs row-wise or column-wise data; both are undefined");
  return columnwise.dtype();
}

Device data_device(const Tensor& rowwise, const Tensor& columnwise) {
  if (rowwise.defined()) return rowwise.device();
  OCTET_CHECK(columnwise.defined(),
              "Float8Tensor needs row-wise or column-wise data; both are undefined");
  return columnwise.device();
}

Usage held(const Tensor& rowwise, const Tensor& columnwise) {
  return (rowwise.defined() ? Usage::kRowwise : Usage::kNone) |
         (columnwise.defined() ? Usage::kColumnwise : Usage::kNone);
}

Shape columnwise_shape(const Shape& shape) {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t rows = shape.empty() ? 1 : shape_numel(Shape(shape.begin(), shape.end() - 1));
  return {cols, rows};
}

}  // namespace

Float8Tensor::Float8Tensor(Shape shape, Tensor rowwise, Tensor columnwise, Tensor scale_inv,
                           Ownership ownership)
    : QuantizedTensor(std::move(shape), data_dtype(rowwise, columnwise), held(rowwise, columnwise),
                      ownership, data_device(rowwise, columnwise)),
      rowwise_(std::move(rowwise)),
      columnwise_(std::move(columnwise)),
      scale_inv_(std::move(scale_inv)) {
  OCTET_CHECK(is_fp8(dtype()), "Float8Tensor holds e4m3 or e5m2 data, got ", dtype());
  if (rowwise_.defined()) {
    OCTET_CHECK(rowwise_.shape() == this->shape(), "Float8Tensor: row-wise data ", rowwise_,
                " must have the logical shape ", shape_str(this->shape()));
  }
  if (columnwise_.defined()) set_columnwise_data(columnwise_);
  OCTET_CHECK(scale_inv_.defined() && scale_inv_.numel() == 1 && scale_inv_.dtype() == DType::kF32,
              "Float8Tensor: scale_inv must be a one-element f32 tensor, got ", scale_inv_);
  OCTET_CHECK(scale_inv_.device() == device(), "Float8Tensor: scale_inv on ", scale_inv_.device(),
              " but data on ", device());
}

size_t Float8Tensor::nbytes(Usage usage) const {
  OCTET_CHECK(usage == Usage::kRowwise || usage == Usage::kColumnwise,
              "Float8Tensor::nbytes: one usage at a time, got ", usage_name(usage));
  const Tensor& t = usage == Usage::kRowwise ? rowwise_ : columnwise_;
  return t.defined() ? t.nbytes() : 0;
}

std::vector<std::pair<std::string, Tensor>> Float8Tensor::rowwise_state() const {
  OCTET_CHECK(rowwise_data().defined(), "the checkpoint form of ", describe(),
              " needs row-wise data");
  return {{"", rowwise_}, {".scale_inv", scale_inv_}};
}

const Tensor& Float8Tensor::rowwise_data() const {
  check_buffers_present("rowwise_data");
  return rowwise_;
}

const Tensor& Float8Tensor::columnwise_data() const {
  check_buffers_present("columnwise_data");
  return columnwise_;
}

const Tensor& Float8Tensor::scale_inv() const {
  check_buffers_present("scale_inv");
  return scale_inv_;
}

void Float8Tensor::set_columnwise_data(Tensor data) {
  check_buffers_present("set_columnwise_data");
  const Shape want = columnwise_shape(shape());
  OCTET_CHECK(data.defined() && data.dtype() == dtype() && data.shape() == want,
              "Float8Tensor: column-wise data must be ", dtype(), shape_str(want),
              " (last dim, prod(leading dims)) for logical shape ", shape_str(shape()), ", got ",
              data);
  OCTET_CHECK(data.device() == device(), "Float8Tensor: column-wise data on ", data.device(),
              " but the tensor is on ", device());
  columnwise_ = std::move(data);
  set_usage(usage() | Usage::kColumnwise);
  bump_version();
}

void Float8Tensor::drop_usage(Usage drop) {
  check_buffers_present("drop_usage");
  const Usage keep =
      static_cast<Usage>(static_cast<uint8_t>(usage()) & ~static_cast<uint8_t>(drop));
  OCTET_CHECK(keep != Usage::kNone, "dropping ", usage_name(drop), " from ", describe(),
              " would leave no data");
  if (!has_usage(keep, Usage::kRowwise)) rowwise_ = Tensor();
  if (!has_usage(keep, Usage::kColumnwise)) columnwise_ = Tensor();
  set_usage(keep);
  bump_version();
}

std::vector<Tensor> Float8Tensor::take_buffers() {
  begin_take();
  return {std::exchange(rowwise_, Tensor()), std::exchange(columnwise_, Tensor()),
          std::exchange(scale_inv_, Tensor())};
}

void Float8Tensor::give_buffers(std::vector<Tensor> buffers) {
  begin_give(buffers.size(), 3);
  rowwise_ = std::move(buffers[0]);
  columnwise_ = std::move(buffers[1]);
  scale_inv_ = std::move(buffers[2]);
  OCTET_ASSERT(held(rowwise_, columnwise_) == usage(), "give_buffers of ", describe(),
               " returned buffers for ", usage_name(held(rowwise_, columnwise_)));
}

}  // namespace octet
