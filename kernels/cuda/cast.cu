// FP8 quantize on the GPU: the same element rule as the CPU (runtime/fp8.h), amax fused.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/float16.h"
#include "runtime/fp8.h"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// |x| is non-negative, so its f32 bits order like unsigned integers: atomicMax on the bits is a
// float max.
__device__ void atomic_max_abs(float* target, float value) {
  atomicMax(reinterpret_cast<unsigned int*>(target), __float_as_uint(value));
}

template <typename In, bool kE4M3>
__global__ void quantize_kernel(const In* x, const float* scale, uint8_t* rowwise,
                                uint8_t* columnwise, float* amax, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const float s = *scale;
  float local = 0.f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v;
    if constexpr (sizeof(In) == 4) {
      v = x[i];
    } else {
      v = from_bf16(x[i]);
    }
    const float a = fabsf(v);
    local = a > local ? a : local;  // NaN compares false: ignored
    const uint8_t q = kE4M3 ? to_e4m3(v * s) : to_e5m2(v * s);
    if (rowwise != nullptr) rowwise[i] = q;
    if (columnwise != nullptr) columnwise[(i % cols) * rows + i / cols] = q;
  }
  if (amax != nullptr) atomic_max_abs(amax, local);
}

template <typename In>
void launch(const Tensor& x, const Tensor& scale, uint8_t* row, uint8_t* col, float* amax,
            bool e4m3) {
  const In* px = static_cast<const In*>(x.data());
  const float* ps = scale.data_as<float>();
  const int64_t rows = x.rows(), cols = x.cols();
  const int blocks = blocks_for(x.numel());
  if (e4m3) {
    quantize_kernel<In, true><<<blocks, kThreads>>>(px, ps, row, col, amax, rows, cols);
  } else {
    quantize_kernel<In, false><<<blocks, kThreads>>>(px, ps, row, col, amax, rows, cols);
  }
  OCTET_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                  Tensor* amax) {
  const DType fp8 = rowwise ? rowwise->dtype() : columnwise->dtype();
  uint8_t* row = rowwise ? rowwise->data_as<uint8_t>() : nullptr;
  uint8_t* col = columnwise ? columnwise->data_as<uint8_t>() : nullptr;
  float* pa = amax ? amax->data_as<float>() : nullptr;
  if (x.dtype() == DType::kF32) {
    launch<float>(x, scale, row, col, pa, fp8 == DType::kE4M3);
  } else {
    launch<uint16_t>(x, scale, row, col, pa, fp8 == DType::kE4M3);
  }
}

}  // namespace octet::cuda
