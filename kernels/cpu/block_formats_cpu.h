// CPU kernels of the blockwise FP8 and NVFP4 formats behind kernels/backend.h. Arguments are
// already validated by kernels/blockwise.cpp and kernels/nvfp4.cpp.
#pragma once

#include "kernels/blockwise.h"
#include "kernels/nvfp4.h"
#include "runtime/tensor.h"

namespace octet::cpu {

// x (rows, cols) -> data (rows, cols) and scale_inv per blockwise_scale_shape, blocks along cols.
void quantize_blockwise(const Tensor& x, const ops::BlockwiseCast& cast, Tensor& data,
                        Tensor& scale_inv, FP8CastCounts* counts);
void dequantize_blockwise(const Tensor& data, const Tensor& scale_inv, BlockScaling blocks,
                          Tensor& out);
// out (M, N) = A·Bᵀ: A (M, K), B (N, K), each blocked along K.
void blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                    const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks, Tensor& out,
                    const Tensor* bias, ops::Accumulate accumulate);

// y = x · R (or the inverse) per group of 16 values of x[0, n), n a multiple of 16.
void hadamard16(const float* x, int64_t n, bool inverse, float* y);
// x (rows, cols) -> data (rows, cols / 2) packed E2M1, scales per nvfp4_scale_shape, amax (1,).
void quantize_nvfp4(const Tensor& x, const ops::NVFP4Cast& cast, Tensor& data, Tensor& scales,
                    Tensor& amax, FP8CastCounts* counts);
// 16x16-tiled data stored (rows, cols) -> (cols, rows) with the tiles' scales moved along.
void transpose_nvfp4_tiles(const Tensor& data, const Tensor& scales, int64_t rows, int64_t cols,
                           Tensor& out_data, Tensor& out_scales);
// Quartet II (kernels/math/quartet2.h): x (rows, cols) f32/bf16, cols a multiple of 128 -> out
// f32, each 128 values of a row transformed with the signs drawn at `offset` of `seed`.
void rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse, Tensor& out);
// v (rows, cols) f32 -> MS-EDEN data and scales (NVFP4's layouts) and the decode scale g (1,) f32;
// block (r, b)'s scale takes draw offset + r * cols / 16 + b.
void quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                         Tensor& scales, Tensor& decode);
// out (rows, cols) f32/bf16 = e2m1 * the block's scale, times amax / 2688 when amax is given.
void expand_nvfp4(const Tensor& data, const Tensor& scales, const Tensor* amax, float e4m3_max,
                  Tensor& out);

}  // namespace octet::cpu
