// Launchers of the own kernels around gemm.cu's cuBLASLt call (gemm_kernels.cu): each enqueues one
// kernel on `stream` and checks the launch. Internal to the GEMM.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace octet::cuda::detail {

// transpose_bytes_kernel: out (cols, rows) = x (rows, cols)ᵀ for one-byte (FP8) elements.
void launch_transpose_bytes(const uint8_t* x, uint8_t* out, int64_t rows, int64_t cols,
                            cudaStream_t stream);
// to_bf16_kernel, to_f32_kernel: out (n,) = x (n,) of any floating dtype, as bf16 bits or f32.
void launch_to_bf16(const void* x, DType dtype, uint16_t* out, int64_t n, cudaStream_t stream);
void launch_to_f32(const void* x, DType dtype, float* out, int64_t n, cudaStream_t stream);
// scalars_kernel: out (2,) = {(alpha * a_scale_inv) * b_scale_inv, beta} for device pointer mode.
void launch_scalars(float alpha, const float* a_scale_inv, const float* b_scale_inv, float beta,
                    float* out, cudaStream_t stream);
// epilogue_kernel: out (total / n, n) f32 = gelu(out + bias) in place; bias (n,) or null.
void launch_epilogue(float* out, const void* bias, DType bias_dtype, bool gelu, int64_t n,
                     int64_t total, cudaStream_t stream);
// finish_kernel: out (total / n, n) = epilogue(product + ((keep ? out : 0) + bias)), rounded once
// into out_dtype; product null means a zero product.
void launch_finish(const float* product, void* out, DType out_dtype, bool keep, const void* bias,
                   DType bias_dtype, bool gelu, int64_t n, int64_t total, cudaStream_t stream);
// max_into_kernel: *target = max(*target, *value), a NaN ignored.
void launch_max_into(const float* value, float* target, cudaStream_t stream);

}  // namespace octet::cuda::detail
