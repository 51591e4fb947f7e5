// Blockwise FP8 (TE's Float8BlockScaling, DeepSeek-V3's recipe; docs/recipes.md):
// the 1x128 / 128x128 block cast and its inverse, the K-block-scaled GEMM, the quantizer, and the
// format's entry in the format table. Scales are power-of-two by default, stored as f32 scale_inv.
#pragma once

#include <memory>
#include <string>

#include "kernels/ops.h"
#include "kernels/quantized_format.h"
#include "runtime/blockwise_tensor.h"
#include "runtime/fp8.h"
#include "runtime/fp8_stats.h"
#include "runtime/quantized_tensor.h"

namespace octet {
namespace ops {

// How one direction is cast.
struct BlockwiseCast {
  BlockScaling blocks = BlockScaling::k1D;
  float fp8_max = kE4M3Max;  // of the data's dtype
  bool power_2_scale = true;
  float amax_epsilon = 0.f;
};

// x (f32/bf16) viewed as (rows, cols) -> data (rows, cols) e4m3/e5m2 and scale_inv f32 per
// blockwise_scale_shape(blocks, rows, cols) (padding zeroed), blocked along cols: per block
// (1x128 of a row, or a 128x128 tile) scale = blockwise_scale(block amax, ...) (runtime/
// fp8_scaling.h), element = fp8(x * scale), scale_inv = 1 / scale. `counts` (host, nullable)
// gets what saturated and flushed.
void quantize_blockwise(const Tensor& x, const BlockwiseCast& cast, Tensor& data, Tensor& scale_inv,
                        FP8CastCounts* counts = nullptr);
// Both directions of a 1x128 cast (cast.blocks k1D) from one read of x (rows, cols): rowwise
// (rows, cols) and rowwise_scale_inv as quantize_blockwise(x), columnwise (cols, rows) and
// columnwise_scale_inv as quantize_blockwise of x's transpose, byte for byte; `counts` gets what
// the two casts would add.
void quantize_blockwise_both(const Tensor& x, const BlockwiseCast& cast, Tensor& rowwise,
                             Tensor& rowwise_scale_inv, Tensor& columnwise,
                             Tensor& columnwise_scale_inv, FP8CastCounts* counts = nullptr);
// data (rows, cols) with its scale_inv -> f32/bf16: fp8 value * the block's scale_inv.
Tensor dequantize_blockwise(const Tensor& data, const Tensor& scale_inv, BlockScaling blocks,
                            DType dtype);
// out (M, N) = A·Bᵀ (+ bias) with A (M, K), B (N, K) blocked along K (at most one of them 2D):
// every value is its FP8 value times its block's scale_inv (exact for power-of-two scales), and
// the products are summed in f32 (on the CPU by one f32 GEMM of the expanded operands); bias and
// accumulation (kYes adds out's old value) as in ops::gemm.
void blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                    const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks, Tensor& out,
                    const Tensor* bias = nullptr, Accumulate accumulate = Accumulate::kNo);

}  // namespace ops

// The quantizer of one tensor role under the blockwise recipe: its dtype (hybrid: e5m2 for
// gradients) and block shape. No state; with AmaxRecording::kRecord its casts add their
// saturated / flushed counts and block-scale spread to `stats` (the slot's health).
class BlockwiseQuantizer final : public ScaledTensorQuantizer {
 public:
  BlockwiseQuantizer(DType dtype, BlockScaling blocks, bool power_2_scale, float amax_epsilon,
                     std::shared_ptr<SlotStats> stats = nullptr);

  std::string_view format() const override { return kBlockwiseFormat; }
  std::string describe() const override;

 private:
  // One direction of x: row-wise from x, column-wise from its transpose (a 2D tile of the
  // transpose is the transpose of the tile, so 2D column-wise data is the byte transpose).
  void cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scale_inv,
            AmaxRecording amax) const override;
  // 1x128 blocks: both directions from one read of x (quantize_blockwise_both); 128x128: cast().
  void cast_both(const Tensor& x, Tensor& rowwise, Tensor& rowwise_scale_inv, Tensor& columnwise,
                 Tensor& columnwise_scale_inv, AmaxRecording amax) const override;
  Shape scale_shape(int64_t rows, int64_t cols) const override {
    return blockwise_scale_shape(cast_.blocks, rows, cols);
  }
  DType scale_dtype() const override { return DType::kF32; }
  std::shared_ptr<ScaledTensor> make_tensor(const Shape& shape, Tensor rowwise,
                                            Tensor rowwise_scale_inv, Tensor columnwise,
                                            Tensor columnwise_scale_inv,
                                            Ownership ownership) const override;
  void check_destination(const std::string& who, const ScaledTensor& dst) const override;

  ops::BlockwiseCast cast_;
};

}  // namespace octet
