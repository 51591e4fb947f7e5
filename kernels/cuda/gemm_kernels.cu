// The own kernels around gemm.cu's cuBLASLt call: FP8 operand transposes and exact bf16/f32
// copies, alpha with the FP8 scales folded in, the bias/GELU epilogue, the staged finish, amax.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_kernels.h"
#include "kernels/math/activation.h"

namespace octet::cuda {
namespace {

constexpr int kTile = 32;

// out (cols, rows) = x (rows, cols)ᵀ for one-byte elements, 32x32 tiles through shared memory.
// Block (32, 8); the tile loops depend on blockIdx only, so every thread reaches each barrier.
__global__ void transpose_bytes_kernel(const uint8_t* __restrict__ x, uint8_t* __restrict__ out,
                                       int64_t rows, int64_t cols) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int64_t tiles_r = (rows + kTile - 1) / kTile, tiles_c = (cols + kTile - 1) / kTile;
  for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
    for (int64_t tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
      for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
        const int64_t r = tr * kTile + i, c = tc * kTile + threadIdx.x;
        if (r < rows && c < cols) tile[i][threadIdx.x] = x[r * cols + c];
      }
      __syncthreads();
      for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
        const int64_t c = tc * kTile + i, r = tr * kTile + threadIdx.x;
        if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][i];
      }
      __syncthreads();
    }
  }
}

// Any floating dtype to bf16 bits (FP8 -> bf16 is exact) or to f32 (bf16 -> f32 is exact), kVec
// elements per access when `vector` (both buffers aligned).
template <DType kOut, typename I>
__global__ void convert_kernel(const void* __restrict__ x, DType dtype, void* __restrict__ out, I n,
                               bool vector) {
  map_elements(x, dtype, out, kOut, n, vector, [](float v) { return v; });
}

// alpha and beta for the device pointer mode: the FP8 scales folded into alpha in the CPU's order
// ((alpha * a_scale_inv) * b_scale_inv); b_scale_inv null: alpha * a_scale_inv alone (a
// high-precision GEMM's alpha_scale).
__global__ void scalars_kernel(float alpha, const float* a_scale_inv, const float* b_scale_inv,
                               float beta, float* out) {
  const float scaled = alpha * a_scale_inv[0];
  out[0] = b_scale_inv != nullptr ? scaled * b_scale_inv[0] : scaled;
  out[1] = beta;
}

// out (rows, n) f32 = gelu(out + bias) in place, bias (n,) on every row; bias null adds nothing.
// The GELU is kernels/math/activation.h's, as in the activation kernel and the CPU's epilogue.
__global__ void epilogue_kernel(float* __restrict__ out, const void* __restrict__ bias,
                                DType bias_dtype, bool gelu, int64_t n, int64_t total) {
  grid_stride_rows(total, n, [&](int64_t i, int64_t, int64_t c) {
    float v = out[i];
    if (bias != nullptr) v += load_f32(bias, bias_dtype, c);
    out[i] = gelu ? math::gelu_tanh(v) : v;
  });
}

// out = epilogue(product + ((keep ? out : 0) + bias)), rounded once into out's dtype (f32, bf16);
// the CPU's order (it preloads out + bias, then adds the product). product null means a zero
// product (K = 0).
__global__ void finish_kernel(const float* __restrict__ product, void* out, DType out_dtype,
                              bool keep, const void* __restrict__ bias, DType bias_dtype, bool gelu,
                              int64_t n, int64_t total) {
  grid_stride_rows(total, n, [&](int64_t i, int64_t, int64_t col) {
    float v = product != nullptr ? product[i] : 0.f;
    if (keep || bias != nullptr) {
      float c = keep ? load_f32(out, out_dtype, i) : 0.f;
      if (bias != nullptr) {
        const float b = load_f32(bias, bias_dtype, col);
        c = keep ? c + b : b;
      }
      v = product != nullptr ? v + c : c;
    }
    store_f32(out, out_dtype, i, gelu ? math::gelu_tanh(v) : v);
  });
}

// *target = max(*target, *value): cuBLASLt sets its amax, octet's contract max-accumulates. A NaN
// compares false and is ignored, as in quantize_fp8's amax.
__global__ void max_into_kernel(const float* __restrict__ value, float* __restrict__ target) {
  const float v = *value;
  if (v > *target) *target = v;
}

}  // namespace

namespace detail {

void launch_transpose_bytes(const uint8_t* x, uint8_t* out, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  const int64_t tiles_r = (rows + kTile - 1) / kTile, tiles_c = (cols + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(tiles_c < 65535 ? tiles_c : 65535),
                  static_cast<unsigned>(tiles_r < 65535 ? tiles_r : 65535));
  transpose_bytes_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(x, out, rows, cols);
  OCTET_CUDA_LAUNCH_CHECK("transpose_bytes_kernel");
}

// x (n,) into out (n,) of kOut (bf16 or f32) by convert_kernel; `name` for the launch check.
template <DType kOut>
void launch_convert(const void* x, DType dtype, void* out, int64_t n, cudaStream_t stream,
                    const char* name) {
  const bool vector = vec_aligned(x, dtype_size(dtype)) && vec_aligned(out, dtype_size(kOut));
  with_index_type(n, [&]<typename I>(I) {
    convert_kernel<kOut, I>
        <<<vec_blocks_for(n), kThreads, 0, stream>>>(x, dtype, out, static_cast<I>(n), vector);
    OCTET_CUDA_LAUNCH_CHECK(name);
  });
}

void launch_to_bf16(const void* x, DType dtype, uint16_t* out, int64_t n, cudaStream_t stream) {
  launch_convert<DType::kBF16>(x, dtype, out, n, stream, "to_bf16_kernel");
}

void launch_to_f32(const void* x, DType dtype, float* out, int64_t n, cudaStream_t stream) {
  launch_convert<DType::kF32>(x, dtype, out, n, stream, "to_f32_kernel");
}

void launch_scalars(float alpha, const float* a_scale_inv, const float* b_scale_inv, float beta,
                    float* out, cudaStream_t stream) {
  scalars_kernel<<<1, 1, 0, stream>>>(alpha, a_scale_inv, b_scale_inv, beta, out);
  OCTET_CUDA_LAUNCH_CHECK("scalars_kernel");
}

void launch_epilogue(float* out, const void* bias, DType bias_dtype, bool gelu, int64_t n,
                     int64_t total, cudaStream_t stream) {
  epilogue_kernel<<<blocks_for(total), kThreads, 0, stream>>>(out, bias, bias_dtype, gelu, n,
                                                              total);
  OCTET_CUDA_LAUNCH_CHECK("epilogue_kernel");
}

void launch_finish(const float* product, void* out, DType out_dtype, bool keep, const void* bias,
                   DType bias_dtype, bool gelu, int64_t n, int64_t total, cudaStream_t stream) {
  finish_kernel<<<blocks_for(total), kThreads, 0, stream>>>(product, out, out_dtype, keep, bias,
                                                            bias_dtype, gelu, n, total);
  OCTET_CUDA_LAUNCH_CHECK("finish_kernel");
}

void launch_max_into(const float* value, float* target, cudaStream_t stream) {
  max_into_kernel<<<1, 1, 0, stream>>>(value, target);
  OCTET_CUDA_LAUNCH_CHECK("max_into_kernel");
}

}  // namespace detail
}  // namespace octet::cuda
