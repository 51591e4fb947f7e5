// NVFP4Tensor: the shapes of its packed data, scales and amaxes.
#include "runtime/nvfp4_tensor.h"

namespace octet {
namespace {

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

const Tensor& any_data(const Tensor& rowwise, const Tensor& columnwise) {
  OCTET_CHECK(rowwise.defined() || columnwise.defined(),
              "NVFP4Tensor needs row-wise or column-wise data; both are undefined");
  return rowwise.defined() ? rowwise : columnwise;
}

}  // namespace

Shape nvfp4_data_shape(int64_t rows, int64_t cols) { return {rows, cols / 2}; }

Shape nvfp4_scale_shape(int64_t rows, int64_t cols) {
  return {round_up(rows, 128), round_up((cols + kNVFP4BlockLen - 1) / kNVFP4BlockLen, 4)};
}

NVFP4Tensor::NVFP4Tensor(Shape shape, NVFP4Layout layout, Tensor rowwise, Tensor rowwise_scales,
                         Tensor rowwise_amax, Tensor columnwise, Tensor columnwise_scales,
                         Tensor columnwise_amax, Ownership ownership)
    : ScaledTensor(std::move(shape), DType::kU8, held(rowwise, columnwise), ownership,
                   any_data(rowwise, columnwise).device()),
      layout_(layout) {
  OCTET_CHECK(this->rows() % kNVFP4BlockLen == 0 && this->cols() % kNVFP4BlockLen == 0,
              "NVFP4Tensor of shape ", shape_str(this->shape()),
              ": NVFP4 needs prod(leading dims) and the last dim to be multiples of 16");
  if (rowwise.defined()) {
    set_direction(Usage::kRowwise, std::move(rowwise), std::move(rowwise_scales),
                  std::move(rowwise_amax));
  }
  if (columnwise.defined()) {
    set_direction(Usage::kColumnwise, std::move(columnwise), std::move(columnwise_scales),
                  std::move(columnwise_amax));
  }
}

void NVFP4Tensor::check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                                  const Tensor& amax) const {
  const bool row = direction == Usage::kRowwise;
  const int64_t r = row ? rows() : cols(), c = row ? cols() : rows();
  OCTET_CHECK(data.dtype() == DType::kU8 && data.shape() == nvfp4_data_shape(r, c),
              "NVFP4Tensor: ", usage_name(direction), " data must be u8",
              shape_str(nvfp4_data_shape(r, c)), " (two E2M1 values a byte) for logical shape ",
              shape_str(shape()), ", got ", data);
  OCTET_CHECK(scales.dtype() == DType::kE4M3 && scales.shape() == nvfp4_scale_shape(r, c),
              "NVFP4Tensor: ", usage_name(direction), " scales must be e4m3",
              shape_str(nvfp4_scale_shape(r, c)), ", got ", scales);
  OCTET_CHECK(amax.defined() && amax.dtype() == DType::kF32 && amax.numel() == 1,
              "NVFP4Tensor: ", usage_name(direction),
              " needs its tensor amax as a one-element f32 tensor, got ", amax);
}

std::vector<std::pair<std::string, Tensor>> NVFP4Tensor::rowwise_state() const {
  OCTET_CHECK(rowwise_data().defined(), "the checkpoint form of ", describe(),
              " needs row-wise data");
  return {{"", rowwise_data()}, {".scales", rowwise_scales()}, {".amax", rowwise_extra()}};
}

std::vector<std::pair<std::string, std::string>> NVFP4Tensor::attributes() const {
  return {{"blocks", layout_.tiles_2d ? "16x16" : "1x16"},
          {"packing", "u8 bytes of two e2m1 values, element 2j in the low nibble"},
          {"tensor_scale", layout_.rht128              ? "decode scale"
                           : layout_.e4m3_max == 256.f ? "amax / 1536"
                                                       : "amax / 2688"}};
}

}  // namespace octet
