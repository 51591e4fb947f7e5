// NVFP4 (TE's NVFP4BlockScaling; docs/recipes.md): E2M1 values with an E4M3
// scale per 16 values and an f32 tensor scale, 16x16 tiles for weights, stochastic rounding of
// gradients from octet's Philox stream, the 16-point random Hadamard transform on the wgrad
// GEMM's operands; the cast, the expansion a GEMM multiplies, the quantizer and the format's
// entry in the format table. The rules are TE 2.14's and later (runtime/fp8_scaling.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/ops.h"
#include "runtime/fp8_stats.h"
#include "runtime/nvfp4_tensor.h"
#include "runtime/quantized_tensor.h"
#include "runtime/recipe.h"

namespace octet {
namespace ops {

// How one direction is cast.
struct NVFP4Cast {
  bool tiles_2d = false;    // 16x16 tiles (weights), else 1x16 blocks along the row
  bool hadamard = false;    // transform each 16 values of a row first (bf16-rounded), then cast
  bool stochastic = false;  // stochastic rounding; element i of the (rows, cols) grid takes
                            // Philox draw offset + i of `seed` (its low 8 bits)
  uint64_t seed = 0;
  uint64_t offset = 0;
  // 4over6 (runtime/fp8_scaling.h): each block keeps the nearer of its map-to-4 and map-to-6
  // casts, by the sum of |error| or, with `squared_error`, of error^2. Neither transform nor
  // stochastic rounding goes with it (TE has no such cast).
  bool four_over_six = false;
  bool squared_error = false;
  // The largest block scale the tensor scale allows for: 448, or 256 (TE's 4over6 default).
  float e4m3_max = 448.f;
};

// x (f32/bf16) viewed as (rows, cols), both multiples of 16 -> data u8 (rows, cols / 2) (element
// 2j in the low nibble), scales e4m3 per nvfp4_scale_shape(rows, cols) (padding zeroed), amax
// (1,) f32: the tensor amax (after the transform when there is one; NaN ignored). Per block:
// sf = e4m3(block amax * 2688 / amax / 6), element = e2m1(x / (sf * amax / 2688)) (TE's exact
// order of f32 operations; 2688 = 6 * cast.e4m3_max, and 4over6's own rule when it is on). `counts`
// (host, nullable) gets what saturated and flushed.
void quantize_nvfp4(const Tensor& x, const NVFP4Cast& cast, Tensor& data, Tensor& scales,
                    Tensor& amax, FP8CastCounts* counts = nullptr);
// (rows, cols) values e2m1 * the block's E4M3 scale, exact in f32 and bf16: what the GEMM
// multiplies (the tensor scales go into its alpha).
Tensor expand_nvfp4(const Tensor& data, const Tensor& scales, int64_t rows, int64_t cols,
                    DType dtype);
// TE's dequantization: e2m1 * RN(RN(sf * amax) * RN(1 / (6 * e4m3_max))), 1 / 2688 by default.
Tensor dequantize_nvfp4(const Tensor& data, const Tensor& scales, const Tensor& amax, int64_t rows,
                        int64_t cols, DType dtype, float e4m3_max = 448.f);
// The 16-point random Hadamard transform of every 16 values of x's rows (x f32/bf16, cols a
// multiple of 16): y = x · diag(s) H16 / 4 with TE's fixed signs, rounded to bf16 values (in an
// f32 tensor); `inverse` undoes it (rounded to f32).
Tensor hadamard16(const Tensor& x, bool inverse = false);

// Quartet II's transform (kernels/math/quartet2.h): each 128 values of x's rows (x f32/bf16,
// cols a multiple of 128) to H (d ⊙ x) / sqrt(128), the signs d from draws offset .. offset + 127
// of `seed` (a draw's low bit set: -1); `inverse` undoes it. f32 out.
Tensor rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse = false);
// MS-EDEN: v (rows, cols) f32, cols a multiple of 16 -> data and scales in NVFP4's layouts and
// decode (1,) f32 = g: per 1x16 block, E2M1 codes of v / m rounded to nearest and the corrected
// scale f = m <u, u> / <u, q>; g = max f / 256 and each block's E4M3 code f / g rounded
// stochastically with draw offset + r * cols / 16 + b. A value decodes as e2m1 * e4m3 * g.
void quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                         Tensor& scales, Tensor& decode);

}  // namespace ops

// The tensor roles of the NVFP4 recipe: what TE's recipe turns on for each.
enum class NVFP4Role : uint8_t {
  kActivation,  // inputs (and outputs): the column-wise copy gets the transform
  kWeight,      // 16x16 tiles (unless switched off), no transform, round to nearest
  kGradient,    // the column-wise copy gets the transform; both copies rounded stochastically
};

// TE's nvfp4_4over6 for one role (weights and activations; gradients never take it).
struct NVFP4FourOverSix {
  bool on = false;
  bool squared_error = false;  // MSE, else MAE
  bool e4m3_max_256 = true;    // the tensor scale amax / (6 * 256), else amax / 2688
};

class NVFP4Quantizer final : public Quantizer {
 public:
  // `rng` (i64 (2,) on the host: seed, offset) is the slot's stochastic-rounding stream; each
  // cast uses numel draws per direction and advances the offset, so a checkpoint that holds the
  // tensor resumes the stream exactly. Null when the role rounds to nearest.
  // `four_over_six` on refuses the transform and stochastic rounding (TE's rule).
  // `method` kQuartet2: a forward slot of Quartet II, whose backward re-casts its row-wise data.
  NVFP4Quantizer(NVFP4Role role, bool tiles_2d, bool hadamard, bool stochastic, Tensor rng,
                 std::shared_ptr<SlotStats> stats = nullptr, NVFP4FourOverSix four_over_six = {},
                 NVFP4Method method = NVFP4Method::kTE);

  std::string_view format() const override { return kNVFP4Format; }
  DType dtype() const override { return DType::kU8; }
  std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage, Ownership ownership,
                                            AmaxRecording amax) const override;
  void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const override;
  std::string describe() const override;
  bool backward_recasts_rowwise() const override { return method_ == NVFP4Method::kQuartet2; }

 private:
  ops::NVFP4Cast cast_for(Usage direction, int64_t numel) const;
  void cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scales, Tensor& amax,
            AmaxRecording recording) const;

  NVFP4Role role_;
  NVFP4Layout layout_;
  bool stochastic_;
  NVFP4FourOverSix four_over_six_;
  NVFP4Method method_;
  Tensor rng_;
  std::shared_ptr<SlotStats> stats_;
};

// Quartet II's output-gradient slot. Each backward draws 128 signs from the slot's stream `rng`
// (i64 (2,) on the host: seed, offset) and casts, with the 128-point transform along each
// backward GEMM's inner dimension and MS-EDEN: dY row-wise (dgrad, along out), dY column-wise
// (wgrad, along the tokens), the forward's weight dequantized and transposed (dgrad, along out)
// and its input likewise (wgrad, along the tokens); each cast then takes one draw per 1x16
// block, in that order. A checkpoint that holds the stream resumes it exactly. Every dimension of
// the GEMM must be a multiple of 128.
class Quartet2GradQuantizer final : public Quantizer {
 public:
  explicit Quartet2GradQuantizer(Tensor rng);

  std::string_view format() const override { return kNVFP4Format; }
  DType dtype() const override { return DType::kU8; }
  // dY alone, with fresh signs (what backward_operands casts it to).
  std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage, Ownership ownership,
                                            AmaxRecording amax) const override;
  void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const override;
  std::string describe() const override { return "nvfp4 quartet2 gradient rht128 ms-eden"; }
  bool backward_recasts_rowwise() const override { return true; }
  BackwardOperands backward_operands(const Tensor& dy, const QuantizedTensor* x,
                                     const QuantizedTensor* w) const override;

 private:
  uint64_t take(int64_t draws) const;  // the first of the stream's next `draws` draws
  Tensor rng_;
};

}  // namespace octet
