// Float8Tensor: FP8 data with one per-tensor scale (delayed or current scaling). Row-wise data has
// the logical shape; column-wise data is its byte transpose, made from row-wise data on demand.
#pragma once

#include <vector>

#include "runtime/quantized_tensor.h"

namespace octet {

class Float8Tensor final : public QuantizedTensor {
 public:
  // `rowwise`: e4m3/e5m2 data of `shape`, or undefined; `columnwise`: the same dtype in
  // (last dim, prod(leading dims)), or undefined; at least one is defined. `scale_inv`: a
  // one-element f32 tensor, the factor dequantization multiplies by (1 / the cast's scale).
  Float8Tensor(Shape shape, Tensor rowwise, Tensor columnwise, Tensor scale_inv,
               Ownership ownership);

  std::string_view format() const override { return kPerTensorFormat; }
  using QuantizedTensor::nbytes;
  size_t nbytes(Usage usage) const override;
  std::vector<std::pair<std::string, Tensor>> rowwise_state() const override;
  std::vector<std::string> positive_state() const override { return {".scale_inv"}; }

  // Undefined when that usage is not held; throws while a context holds the buffers.
  const Tensor& rowwise_data() const override;
  const Tensor& columnwise_data() const;  // (cols, rows)
  const Tensor& scale_inv() const;        // (1,) f32

  // For the kernels that create and drop usages (ops::update_usage). Column-wise data must be
  // the byte transpose of the row-wise data; the caller guarantees it, this checks shape and dtype.
  void set_columnwise_data(Tensor data);
  void drop_usage(Usage usage) override;

  // Saveable (internal tensors only): {row-wise, column-wise, scale_inv}, undefined entries for
  // usages not held. Metadata (shape, dtype, usages, quantizer) stays with the tensor.
  std::vector<Tensor> take_buffers() override;
  void give_buffers(std::vector<Tensor> buffers) override;

 private:
  std::vector<Tensor> held_buffers() const override { return {rowwise_, columnwise_, scale_inv_}; }

  Tensor rowwise_;
  Tensor columnwise_;
  Tensor scale_inv_;
};

}  // namespace octet
