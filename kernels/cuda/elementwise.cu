// Elementwise arithmetic, fill and dtype conversion on the GPU: kernels/cpu/elementwise.cpp's
// math (f32 arithmetic, RNE stores through runtime/float16.h), one grid-stride loop per op, kVec
// elements per access where the buffers allow (common.cuh).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/dtype.h"

namespace octet::cuda {
namespace {

using ops::detail::BinaryOp;

// The _rn intrinsics keep nvcc from contracting a multiply and an add into an FMA: the CPU
// kernels round each operation separately.
template <BinaryOp kOp>
__device__ __forceinline__ float apply(float a, float b) {
  if constexpr (kOp == BinaryOp::kAdd) return __fadd_rn(a, b);
  if constexpr (kOp == BinaryOp::kSub) return __fsub_rn(a, b);
  if constexpr (kOp == BinaryOp::kMul) return __fmul_rn(a, b);
  if constexpr (kOp == BinaryOp::kDiv) return __fdiv_rn(a, b);
}

// out = a (op) b; b repeats every `row` elements (row == n when b has a's shape). `vector`: every
// buffer is Vec-aligned, and row is a multiple of kVec, so no group straddles two rows of b.
template <BinaryOp kOp, typename I>
__global__ void binary_kernel(const void* a, DType da, const void* b, DType db, void* out,
                              DType dout, I n, I row, bool vector) {
  const auto op = [](float x, float y) { return apply<kOp>(x, y); };
  if (row == n) {
    zip_elements(a, da, b, db, out, dout, n, vector, op);
    return;
  }
  if (vector) {  // groups of kVec: n and row are multiples of kVec
    grid_stride_rows(n / kVec, row / kVec, [&](I g, I, I c) {
      float x[kVec], y[kVec];
      load_f32_vec(a, da, g * kVec, x);
      load_f32_vec(b, db, c * kVec, y);
      for (int k = 0; k < kVec; ++k) x[k] = op(x[k], y[k]);
      store_f32_vec(out, dout, g * kVec, x);
    });
    return;
  }
  // n > 0 inside, so row > 0 (row == 0 means n == 0).
  grid_stride_rows(n, row, [&](I i, I, I c) {
    store_f32(out, dout, i, op(load_f32(a, da, i), load_f32(b, db, c)));
  });
}

template <typename I>
__global__ void axpy_kernel(void* dst, DType dd, const void* src, DType ds, float alpha, I n,
                            bool vector) {
  zip_elements(dst, dd, src, ds, dst, dd, n, vector,
               [=](float d, float x) { return __fadd_rn(d, __fmul_rn(alpha, x)); });
}

// x and out may be the same buffer (scale_): each element is read before it is written.
template <typename I>
__global__ void scale_kernel(const void* x, DType dx, float s, void* out, DType dout, I n,
                             bool vector) {
  map_elements(x, dx, out, dout, n, vector, [=](float v) { return __fmul_rn(v, s); });
}

// dst = value[0] (read once per thread from the device), stored as every kernel stores f32.
template <typename I>
__global__ void fill_from_kernel(const float* value, void* dst, DType d, I n) {
  const float v = *value;
  grid_stride_vec(
      n, /*vector=*/false, [](I) {}, [&](I i) { store_f32(dst, d, i, v); });
}

template <typename T, typename I>
__global__ void fill_kernel(T* dst, T value, I n, bool vector) {
  Vec<T> v;
  for (int k = 0; k < kVec; ++k) v.v[k] = value;
  grid_stride_vec(
      n, vector, [&](I i) { store_vec(dst, i, v); }, [&](I i) { dst[i] = value; });
}

template <typename I>
__global__ void convert_kernel(const void* src, DType ds, void* dst, DType dd, I n, bool vector) {
  grid_stride_vec(
      n, vector,
      [&](I i) {
        float v[kVec];
        load_f32_vec(src, ds, i, v);
        store_f32_vec(dst, dd, i, v);
      },
      [&](I i) { store_f32(dst, dd, i, load_f32(src, ds, i)); });
}

// Whether t's buffer can be accessed a Vec at a time.
bool vec_ok(const Tensor& t) { return vec_aligned(t.data(), t.element_size()); }

template <BinaryOp kOp>
void launch_binary(const Tensor& a, const Tensor& b, Tensor& out, int64_t n, int64_t row) {
  const bool vector = vec_ok(a) && vec_ok(b) && vec_ok(out) && (row == n || row % kVec == 0);
  with_index_type(n, [&]<typename I>(I) {
    binary_kernel<kOp, I><<<vec_blocks_for(n), kThreads, 0, stream_of(out)>>>(
        a.data(), a.dtype(), b.data(), b.dtype(), out.data(), out.dtype(), static_cast<I>(n),
        static_cast<I>(row), vector);
    OCTET_CUDA_LAUNCH_CHECK("binary_kernel");
  });
}

template <typename T>
void launch_fill(Tensor& dst, uint64_t pattern, int64_t n) {
  T value;
  std::memcpy(&value, &pattern, sizeof(T));  // element 0 of the pattern (little-endian)
  const bool vector = vec_ok(dst);
  with_index_type(n, [&]<typename I>(I) {
    fill_kernel<T, I><<<vec_blocks_for(n), kThreads, 0, stream_of(dst)>>>(
        dst.data_as<T>(), value, static_cast<I>(n), vector);
    OCTET_CUDA_LAUNCH_CHECK("fill_kernel");
  });
}

}  // namespace

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) const {
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

void CudaBackend::axpy(Tensor& dst, const Tensor& src, float alpha) const {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const bool vector = vec_ok(dst) && vec_ok(src);
  with_index_type(n, [&]<typename I>(I) {
    axpy_kernel<I><<<vec_blocks_for(n), kThreads, 0, stream_of(dst)>>>(
        dst.data(), dst.dtype(), src.data(), src.dtype(), alpha, static_cast<I>(n), vector);
    OCTET_CUDA_LAUNCH_CHECK("axpy_kernel");
  });
}

void CudaBackend::scale(const Tensor& x, float s, Tensor& out) const {
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool vector = vec_ok(x) && vec_ok(out);
  with_index_type(n, [&]<typename I>(I) {
    scale_kernel<I><<<vec_blocks_for(n), kThreads, 0, stream_of(out)>>>(
        x.data(), x.dtype(), s, out.data(), out.dtype(), static_cast<I>(n), vector);
    OCTET_CUDA_LAUNCH_CHECK("scale_kernel");
  });
}

void CudaBackend::fill_from(const Tensor& value, Tensor& dst) const {
  const int64_t n = dst.numel();
  if (n == 0) return;
  with_index_type(n, [&]<typename I>(I) {
    fill_from_kernel<I><<<blocks_for(n), kThreads, 0, stream_of(dst)>>>(
        value.data_as<float>(), dst.data(), dst.dtype(), static_cast<I>(n));
    OCTET_CUDA_LAUNCH_CHECK("fill_from_kernel");
  });
}

void CudaBackend::fill(Tensor& dst, float value) const {
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

void CudaBackend::convert(const Tensor& src, Tensor& dst) const {
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == DType::kF32 && dst.dtype() == DType::kF32) {
    // The CPU copies f32 bytes too; other same-dtype pairs go through f32 as the CPU does (a
    // signalling NaN comes out quiet).
    OCTET_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                     stream_of(dst)));
    return;
  }
  const bool vector = vec_ok(src) && vec_ok(dst);
  with_index_type(n, [&]<typename I>(I) {
    convert_kernel<I><<<vec_blocks_for(n), kThreads, 0, stream_of(dst)>>>(
        src.data(), src.dtype(), dst.data(), dst.dtype(), static_cast<I>(n), vector);
    OCTET_CUDA_LAUNCH_CHECK("convert_kernel");
  });
}

}  // namespace octet::cuda
