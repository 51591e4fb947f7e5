// MXFP8Tensor: buffer and exponent-shape checks, usage bookkeeping, save-for-backward hand-over.
#include "runtime/mxfp8_tensor.h"

#include <utility>

namespace octet {
namespace {

DType data_dtype(const Tensor& rowwise, const Tensor& columnwise) {
  if (rowwise.defined()) return rowwise.dtype();
  OCTET_CHECK(columnwise.defined(),
              "MXFP8Tensor needs row-wise or column-wise data; both are undefined");
  return columnwise.dtype();
}

Device data_device(const Tensor& rowwise, const Tensor& columnwise) {
  if (rowwise.defined()) return rowwise.device();
  OCTET_CHECK(columnwise.defined(),
              "MXFP8Tensor needs row-wise or column-wise data; both are undefined");
  return columnwise.device();
}

Usage held(const Tensor& rowwise, const Tensor& columnwise) {
  return (rowwise.defined() ? Usage::kRowwise : Usage::kNone) |
         (columnwise.defined() ? Usage::kColumnwise : Usage::kNone);
}

}  // namespace

Shape mxfp8_scale_shape(int64_t rows, int64_t cols) {
  return {rows, (cols + kMXFP8BlockSize - 1) / kMXFP8BlockSize};
}

MXFP8Tensor::MXFP8Tensor(Shape shape, Tensor rowwise, Tensor rowwise_scales, Tensor columnwise,
                         Tensor columnwise_scales, Ownership ownership)
    : QuantizedTensor(std::move(shape), data_dtype(rowwise, columnwise), held(rowwise, columnwise),
                      ownership, data_device(rowwise, columnwise)) {
  OCTET_CHECK(is_fp8(dtype()), "MXFP8Tensor holds e4m3 or e5m2 data, got ", dtype());
  if (rowwise.defined()) set_rowwise(std::move(rowwise), std::move(rowwise_scales));
  if (columnwise.defined()) set_columnwise(std::move(columnwise), std::move(columnwise_scales));
}

size_t MXFP8Tensor::nbytes(Usage usage) const {
  OCTET_CHECK(usage == Usage::kRowwise || usage == Usage::kColumnwise,
              "MXFP8Tensor::nbytes: one usage at a time, got ", usage_name(usage));
  const bool row = usage == Usage::kRowwise;
  const Tensor& data = row ? rowwise_ : columnwise_;
  const Tensor& scales = row ? rowwise_scales_ : columnwise_scales_;
  return data.defined() ? data.nbytes() + scales.nbytes() : 0;
}

std::vector<std::pair<std::string, Tensor>> MXFP8Tensor::rowwise_state() const {
  OCTET_CHECK(rowwise_data().defined(), "the checkpoint form of ", describe(),
              " needs row-wise data");
  return {{"", rowwise_}, {".scales", rowwise_scales_}};
}

const Tensor& MXFP8Tensor::rowwise_data() const {
  check_buffers_present("rowwise_data");
  return rowwise_;
}

const Tensor& MXFP8Tensor::rowwise_scales() const {
  check_buffers_present("rowwise_scales");
  return rowwise_scales_;
}

const Tensor& MXFP8Tensor::columnwise_data() const {
  check_buffers_present("columnwise_data");
  return columnwise_;
}

const Tensor& MXFP8Tensor::columnwise_scales() const {
  check_buffers_present("columnwise_scales");
  return columnwise_scales_;
}

void MXFP8Tensor::set_rowwise(Tensor data, Tensor scales) {
  check_buffers_present("set_rowwise");
  OCTET_CHECK(data.defined() && data.dtype() == dtype() && data.shape() == shape(),
              "MXFP8Tensor: row-wise data must be ", dtype(), shape_str(shape()), ", got ", data);
  const Shape want = mxfp8_scale_shape(rows(), cols());
  OCTET_CHECK(scales.defined() && scales.dtype() == DType::kE8M0 && scales.shape() == want,
              "MXFP8Tensor: row-wise exponents must be e8m0", shape_str(want), " (rows, ceil(",
              cols(), " / 32)), got ", scales);
  OCTET_CHECK(data.device() == device() && scales.device() == device(),
              "MXFP8Tensor: row-wise buffers must be on ", device());
  rowwise_ = std::move(data);
  rowwise_scales_ = std::move(scales);
  set_usage(usage() | Usage::kRowwise);
  bump_version();
}

void MXFP8Tensor::set_columnwise(Tensor data, Tensor scales) {
  check_buffers_present("set_columnwise");
  const Shape data_shape = {cols(), rows()};
  OCTET_CHECK(data.defined() && data.dtype() == dtype() && data.shape() == data_shape,
              "MXFP8Tensor: column-wise data must be ", dtype(), shape_str(data_shape),
              " (last dim, prod(leading dims)) for logical shape ", shape_str(shape()), ", got ",
              data);
  const Shape want = mxfp8_scale_shape(cols(), rows());
  OCTET_CHECK(scales.defined() && scales.dtype() == DType::kE8M0 && scales.shape() == want,
              "MXFP8Tensor: column-wise exponents must be e8m0", shape_str(want), " (cols, ceil(",
              rows(), " / 32)), got ", scales);
  OCTET_CHECK(data.device() == device() && scales.device() == device(),
              "MXFP8Tensor: column-wise buffers must be on ", device());
  columnwise_ = std::move(data);
  columnwise_scales_ = std::move(scales);
  set_usage(usage() | Usage::kColumnwise);
  bump_version();
}

void MXFP8Tensor::drop_usage(Usage drop) {
  check_buffers_present("drop_usage");
  const Usage keep =
      static_cast<Usage>(static_cast<uint8_t>(usage()) & ~static_cast<uint8_t>(drop));
  OCTET_CHECK(keep != Usage::kNone, "dropping ", usage_name(drop), " from ", describe(),
              " would leave no data");
  if (!has_usage(keep, Usage::kRowwise)) {
    rowwise_ = Tensor();
    rowwise_scales_ = Tensor();
  }
  if (!has_usage(keep, Usage::kColumnwise)) {
    columnwise_ = Tensor();
    columnwise_scales_ = Tensor();
  }
  set_usage(keep);
  bump_version();
}

std::vector<Tensor> MXFP8Tensor::take_buffers() {
  begin_take();
  return {std::exchange(rowwise_, Tensor()), std::exchange(rowwise_scales_, Tensor()),
          std::exchange(columnwise_, Tensor()), std::exchange(columnwise_scales_, Tensor())};
}

void MXFP8Tensor::give_buffers(std::vector<Tensor> buffers) {
  begin_give(buffers.size(), 4);
  rowwise_ = std::move(buffers[0]);
  rowwise_scales_ = std::move(buffers[1]);
  columnwise_ = std::move(buffers[2]);
  columnwise_scales_ = std::move(buffers[3]);
  OCTET_ASSERT(held(rowwise_, columnwise_) == usage(), "give_buffers of ", describe(),
               " returned buffers for ", usage_name(held(rowwise_, columnwise_)));
}

}  // namespace octet
