// BlockwiseFP8Tensor: FP8 data with one f32 scale per block (TE's Float8BlockwiseQTensor, the
// DeepSeek-V3 recipe): 1x128 blocks along the dimension a GEMM reduces (inputs and gradients), or
// 128x128 tiles (weights). Scales are stored as scale_inv (the dequantization factor) in TE's
// GEMM-ready layout, the one cuBLASLt's VEC128 / BLK128x128 modes read, with zeroed padding.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/recipe.h"
#include "runtime/scaled_tensor.h"

namespace octet {

inline constexpr int64_t kFP8BlockLen = 128;
inline constexpr std::string_view kBlockwiseFormat = "blockwise";

// The scale_inv shape of data stored (rows, cols) and blocked along cols (1D: blocks of 128
// consecutive values of a stored row; 2D: 128x128 tiles):
//   1D: (ceil(cols / 128), roundup(rows, 4))          element [col block][row]
//   2D: (ceil(rows / 128), roundup(ceil(cols / 128), 4))  element [row block][col block]
// Row-wise data is stored (M, K); column-wise data (K, M), the transpose.
Shape blockwise_scale_shape(BlockScaling blocks, int64_t rows, int64_t cols);

class BlockwiseFP8Tensor final : public ScaledTensor {
 public:
  // Row-wise: `rowwise` e4m3/e5m2 in the logical shape, `rowwise_scale_inv` f32 per
  // blockwise_scale_shape(blocks, M, K). Column-wise: data (K, M), scale_inv per
  // blockwise_scale_shape(blocks, K, M). Under 1D blocks each direction is quantized from high
  // precision; under 2D the column-wise copy is the byte transpose of the row-wise one. Either
  // pair may be undefined, not both.
  BlockwiseFP8Tensor(Shape shape, BlockScaling blocks, Tensor rowwise, Tensor rowwise_scale_inv,
                     Tensor columnwise, Tensor columnwise_scale_inv, Ownership ownership);

  std::string_view format() const override { return kBlockwiseFormat; }
  BlockScaling blocks() const { return blocks_; }
  std::vector<std::pair<std::string, Tensor>> rowwise_state() const override;
  std::vector<std::pair<std::string, std::string>> attributes() const override;

 private:
  void check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                       const Tensor& extra) const override;
  BlockScaling blocks_;
};

}  // namespace octet
