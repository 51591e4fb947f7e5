// Elementwise arithmetic, fill and dtype conversion on the GPU: kernels/cpu/elementwise.cpp's
// math (f32 arithmetic, RNE stores through runtime/float16.h), one grid-stride loop per op.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/dtype.h"

namespace octet::cuda {
namespace {

// The _rn intrinsics keep nvcc from contracting a multiply and an add into an FMA: the CPU
// kernels round each operation separately.
template <BinaryOp kOp>
__device__ __forceinline__ float apply(float a, float b) {
  if constexpr (kOp == BinaryOp::kAdd) return __fadd_rn(a, b);
  if constexpr (kOp == BinaryOp::kSub) return __fsub_rn(a, b);
  if constexpr (kOp == BinaryOp::kMul) return __fmul_rn(a, b);
  if constexpr (kOp == BinaryOp::kDiv) return __fdiv_rn(a, b);
}

// out = a (op) b; b repeats every `row` elements (row == n when b has a's shape).
template <BinaryOp kOp>
__global__ void binary_kernel(const void* a, DType da, const void* b, DType db, void* out,
                              DType dout, int64_t n, int64_t row) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  if (row == n) {
    for (int64_t i = first; i < n; i += stride) {
      store_f32(out, dout, i, apply<kOp>(load_f32(a, da, i), load_f32(b, db, i)));
    }
    return;
  }
  if (first >= n) return;  // also keeps row > 0 below (row == 0 means n == 0)
  math::GridRowCol at = math::GridRowCol::start(first, stride, row);
  for (int64_t i = first; i < n; i += stride, at.advance()) {
    store_f32(out, dout, i, apply<kOp>(load_f32(a, da, i), load_f32(b, db, at.col)));
  }
}

__global__ void axpy_kernel(void* dst, DType dd, const void* src, DType ds, float alpha,
                            int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float d = load_f32(dst, dd, i);
    store_f32(dst, dd, i, __fadd_rn(d, __fmul_rn(alpha, load_f32(src, ds, i))));
  }
}

// x and out may be the same buffer (scale_): each element is read before it is written.
__global__ void scale_kernel(const void* x, DType dx, float s, void* out, DType dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_f32(out, dout, i, __fmul_rn(load_f32(x, dx, i), s));
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = value;
  }
}

__global__ void convert_kernel(const void* src, DType ds, void* dst, DType dd, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_f32(dst, dd, i, load_f32(src, ds, i));
  }
}

template <BinaryOp kOp>
void launch_binary(const Tensor& a, const Tensor& b, Tensor& out, int64_t n, int64_t row) {
  binary_kernel<kOp><<<blocks_for(n), kThreads, 0, stream_of(out)>>>(
      a.data(), a.dtype(), b.data(), b.dtype(), out.data(), out.dtype(), n, row);
  OCTET_CUDA_LAUNCH_CHECK("binary_kernel");
}

template <typename T>
void launch_fill(Tensor& dst, uint64_t pattern, int64_t n) {
  T value;
  std::memcpy(&value, &pattern, sizeof(T));  // element 0 of the pattern (little-endian)
  fill_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dst)>>>(dst.data_as<T>(), value, n);
  OCTET_CUDA_LAUNCH_CHECK("fill_kernel");
}

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.numel();
  if (n == 0) return;
  const int64_t row = b.numel() == n ? n : b.numel();  // b repeats every `row` elements
  switch (op) {
    case BinaryOp::kAdd:
      return launch_binary<BinaryOp::kAdd>(a, b, out, n, row);
    case BinaryOp::kSub:
      return launch_binary<BinaryOp::kSub>(a, b, out, n, row);
    case BinaryOp::kMul:
      return launch_binary<BinaryOp::kMul>(a, b, out, n, row);
    case BinaryOp::kDiv:
      return launch_binary<BinaryOp::kDiv>(a, b, out, n, row);
  }
  OCTET_FAIL("cuda::binary: unknown op ", static_cast<int>(op));
}

void axpy(Tensor& dst, const Tensor& src, float alpha) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  axpy_kernel<<<blocks_for(n), kThreads, 0, stream_of(dst)>>>(dst.data(), dst.dtype(), src.data(),
                                                              src.dtype(), alpha, n);
  OCTET_CUDA_LAUNCH_CHECK("axpy_kernel");
}

void scale(const Tensor& x, float s, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream_of(out)>>>(x.data(), x.dtype(), s, out.data(),
                                                               out.dtype(), n);
  OCTET_CUDA_LAUNCH_CHECK("scale_kernel");
}

void fill(Tensor& dst, float value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  // The element's bytes, made on the host by the CPU's own scalar store, so every dtype
  // (integers: round to nearest even, saturating; NaN -> 0) gets exactly the CPU's value.
  uint64_t pattern = 0;
  store_from_f32(dst.dtype(), &pattern, 0, value);
  const size_t es = dst.element_size();
  const auto* bytes = reinterpret_cast<const uint8_t*>(&pattern);
  bool uniform = true;  // one repeated byte (zeros above all): a memset does it
  for (size_t k = 1; k < es; ++k) uniform = uniform && bytes[k] == bytes[0];
  if (uniform) {
    OCTET_CUDA_CHECK(cudaMemsetAsync(dst.data(), bytes[0], dst.nbytes(), stream_of(dst)));
    return;
  }
  switch (es) {
    case 2:
      return launch_fill<uint16_t>(dst, pattern, n);
    case 4:
      return launch_fill<uint32_t>(dst, pattern, n);
    case 8:
      return launch_fill<uint64_t>(dst, pattern, n);
  }
  OCTET_FAIL("cuda::fill: unsupported element size ", es, " of ", dst);
}

void convert(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == DType::kF32 && dst.dtype() == DType::kF32) {
    // The CPU copies f32 bytes too; other same-dtype pairs go through f32 as the CPU does (a
    // signalling NaN comes out quiet).
    OCTET_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                     stream_of(dst)));
    return;
  }
  convert_kernel<<<blocks_for(n), kThreads, 0, stream_of(dst)>>>(src.data(), src.dtype(),
                                                                 dst.data(), dst.dtype(), n);
  OCTET_CUDA_LAUNCH_CHECK("convert_kernel");
}

}  // namespace octet::cuda
