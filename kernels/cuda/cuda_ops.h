// The CUDA-only functions that are not backend ops, shared between kernels/cuda's files or read by
// tests and tools: the block-scaled GEMM and its path counts, which GEMM and attention paths ran,
// the own attention kernels alone, and the scale spread of the block casts. The backend ops are
// CudaBackend's methods (kernels/cuda/cuda_backend.h; declared once, in kernels/backend.h's list).
// Compiled only when nvcc is found, or in the CUDA emulation. As for the ops: tensors live on the
// current CUDA device and kernels run on its octet stream (runtime/cuda.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "runtime/dtype.h"
#include "runtime/fp8.h"
#include "runtime/recipe.h"
#include "runtime/tensor.h"

namespace octet::cuda {

// ---- block-scaled FP8 GEMM (gemm.cu; CudaBackend::blockwise_gemm in blockwise.cu) ----
// out (M, N) = A·Bᵀ (+ bias) (+ out) through cuBLASLt's VEC128 / BLK128x128 scale modes (not
// both 2D), the scale_inv tensors read in place. false (nothing enqueued) where the device, the
// cuBLASLt version, the shape or the heuristic rule it out; decided and logged once per shape.
bool gemm_block_scaled(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                       const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,
                       Tensor& out, const Tensor* bias, ops::Accumulate accumulate);
// Blockwise GEMMs run so far (process-wide): natively, and through the f32 expansion.
struct BlockwiseGemmCounts {
  int64_t native = 0, fallback = 0;
};
BlockwiseGemmCounts blockwise_gemm_counts();
void note_blockwise_fallback();  // a fallback gemm_block_scaled was not asked about

// What CudaBackend::gemm settled on for each shape it has planned (on the shape's first call;
// later calls reuse it). fp8_native: FP8 operands on FP8 tensor cores; fp8_via_bf16: FP8 operands
// that fell back to exact bf16 copies (logged as a warning). For tests and tools/gpu-check.
struct GemmChoice {
  int device;
  int64_t m, n, k;
  DType a, b, out;
  bool fp8_native;
  bool fp8_via_bf16;
};
std::vector<GemmChoice> gemm_choices();

// ---- the scale spread of the block casts (cast.cu) ----
// The block scales of a block-scaled cast into its spread (BlockScaleSpread's rule), on the
// device: f32 scale_inv (blockwise; the layout's zero padding is skipped), E8M0 exponents
// (MXFP8), or NVFP4's E4M3 factors times amax / (6 * nvfp4_e4m3_max) over rows [0, rows) in
// steps of row_step, `blocks` per row, `stride` apart. Nothing when counts is null.
enum class SpreadScales : uint8_t { kF32, kE8M0, kNVFP4 };
void add_block_scale_spread(const Tensor& scales, SpreadScales kind, int64_t rows, int64_t row_step,
                            int64_t blocks, int64_t stride, const Tensor* amax,
                            FP8CastCounts* counts, float nvfp4_e4m3_max = 448.f);
// Every entry of the scale tensor (kF32 or kE8M0) into the spread: one row of numel() blocks.
void add_flat_block_scale_spread(const Tensor& scales, SpreadScales kind, FP8CastCounts* counts);

// ---- causal attention (attention.cu) ----
// The own kernels alone, without cuDNN (CudaBackend::causal_attention's fallback, and the
// reference the cuDNN path is tested against): qkv (B, T, 3, H, D), out (B, T, H*D),
// lse (B, H, T).
void causal_attention_fallback(const Tensor& qkv, int64_t heads, float scale, Tensor& out,
                               Tensor& lse);
void causal_attention_backward_fallback(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                        const Tensor& lse, int64_t heads, float scale,
                                        Tensor& dqkv);
// True when the last causal_attention call on this thread ran on cuDNN (for tests and bench).
bool last_attention_used_cudnn();

}  // namespace octet::cuda
