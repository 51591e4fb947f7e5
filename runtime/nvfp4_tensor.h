// NVFP4Tensor: E2M1 values (two per byte) with one E4M3 scale per 16 values and one f32 amax per
// direction (TE's NVFP4Tensor). Weights may use 16x16 tiles (one scale per tile, the column-wise
// copy then the nibble transpose of the row-wise one); the column-wise copy of activations and
// gradients may be quantized after a 16-point random Hadamard transform along the rows it
// reduces (the wgrad GEMM's operands), which the GEMM's two transforms cancel.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/scaled_tensor.h"

namespace octet {

inline constexpr int64_t kNVFP4BlockLen = 16;
inline constexpr std::string_view kNVFP4Format = "nvfp4";

// Data stored (rows, cols) E2M1 values: bytes (rows, cols / 2), element 2j of a row in the low
// nibble of byte j. Its scales, E4M3, in TE's compact layout with zeroed padding:
// (roundup(rows, 128), roundup(cols / 16, 4)), element [row][col block].
Shape nvfp4_data_shape(int64_t rows, int64_t cols);
Shape nvfp4_scale_shape(int64_t rows, int64_t cols);

struct NVFP4Layout {
  bool tiles_2d = false;        // 16x16 tiles (weights), else 1x16 blocks
  bool columnwise_rht = false;  // the column-wise copy holds the RHT of the values
  // The tensor scale is amax / (6 * e4m3_max): 448 (amax / 2688), or 256 under 4over6.
  float e4m3_max = 448.f;
  // Quartet II's backward operands: every direction's data holds the 128-point random-sign
  // Hadamard transform of the values (signs at draw rht128_offset of rht128_seed's stream) cast
  // by MS-EDEN, and its f32 per direction is the decode scale itself rather than an amax.
  bool rht128 = false;
  uint64_t rht128_seed = 0, rht128_offset = 0;
};

class NVFP4Tensor final : public ScaledTensor {
 public:
  // Row-wise: data u8 (rows, cols / 2), scales e4m3 per nvfp4_scale_shape(rows, cols), amax f32
  // (1,): the tensor amax the scales were made from. Column-wise: the same for the transpose,
  // (cols, rows). Either triple may be undefined, not both.
  NVFP4Tensor(Shape shape, NVFP4Layout layout, Tensor rowwise, Tensor rowwise_scales,
              Tensor rowwise_amax, Tensor columnwise, Tensor columnwise_scales,
              Tensor columnwise_amax, Ownership ownership);

  std::string_view format() const override { return kNVFP4Format; }
  const NVFP4Layout& layout() const { return layout_; }
  std::vector<std::pair<std::string, Tensor>> rowwise_state() const override;
  std::vector<std::pair<std::string, std::string>> attributes() const override;

 private:
  void check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                       const Tensor& extra) const override;
  NVFP4Layout layout_;
};

}  // namespace octet
