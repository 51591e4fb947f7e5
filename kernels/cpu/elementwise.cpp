// Elementwise arithmetic and dtype conversion on the CPU.
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/fp8_simd.h"
#include "kernels/cpu/simd.h"
#include "runtime/float16.h"
#include "runtime/fp8.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

OCTET_VECTOR_CLONES
void binary_f32(BinaryOp op, const float* a, const float* b, float* out, int64_t n) {
  switch (op) {
    case BinaryOp::kAdd:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      break;
    case BinaryOp::kSub:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
      break;
    case BinaryOp::kMul:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
      break;
    case BinaryOp::kDiv:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] / b[i];
      break;
  }
}

OCTET_VECTOR_CLONES
void axpy_f32(float* dst, const float* src, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += alpha * src[i];
}

OCTET_VECTOR_CLONES
void scale_f32(const float* x, float s, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
}

OCTET_VECTOR_CLONES
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = from_bf16(src[i]);
}

OCTET_VECTOR_CLONES
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

// Non-f32 tensors go through f32 buffers of this many elements.
constexpr int64_t kBlock = 1024;

// out = x with `f(buf, m)` applied in place to each f32 block of m values on the way.
template <typename F>
void map_blocks(const Tensor& x, Tensor& out, F f) {
  const auto* px = static_cast<const uint8_t*>(x.data());
  auto* po = static_cast<uint8_t*>(out.data());
  parallel_for(0, x.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    float buf[kBlock];
    for (int64_t i = lo; i < hi; i += kBlock) {
      const int64_t m = std::min(kBlock, hi - i);
      to_f32(x.dtype(), px + i * x.element_size(), buf, m);
      f(buf, m);
      from_f32(buf, out.dtype(), po + i * out.element_size(), m);
    }
  });
}

}  // namespace

void to_f32(DType dtype, const void* src, float* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16:
      bf16_to_f32(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::kE4M3:
    case DType::kE5M2:
      fp8_to_f32(dtype, static_cast<const uint8_t*>(src), n, dst);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as_f32(dtype, src, static_cast<size_t>(i));
  }
}

void from_f32(const float* src, DType dtype, void* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16:
      f32_to_bf16(src, static_cast<uint16_t*>(dst), n);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) store_from_f32(dtype, dst, static_cast<size_t>(i), src[i]);
  }
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) const {
  const int64_t n = a.numel();
  const int64_t row = b.numel() == n ? n : b.numel();  // b repeats every `row` elements
  const bool all_f32 =
      a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && out.dtype() == DType::kF32;
  const auto* pa = static_cast<const uint8_t*>(a.data());
  const auto* pb = static_cast<const uint8_t*>(b.data());
  auto* po = static_cast<uint8_t*>(out.data());
  const size_t sa = a.element_size(), sb = b.element_size(), so = out.element_size();
  // Chunks are whole rows when broadcasting, so b's index restarts at each chunk start.
  const int64_t rows = n / std::max<int64_t>(row, 1);
  parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(row, 1)),
               [&](int64_t r0, int64_t r1) {
                 float fa[kBlock], fb[kBlock], fo[kBlock];
                 for (int64_t r = r0; r < r1; ++r) {
                   for (int64_t j = 0; j < row; j += kBlock) {
                     const int64_t m = std::min(kBlock, row - j);
                     const int64_t i = r * row + j;
                     if (all_f32) {
                       binary_f32(op, reinterpret_cast<const float*>(pa) + i,
                                  reinterpret_cast<const float*>(pb) + j,
                                  reinterpret_cast<float*>(po) + i, m);
                       continue;
                     }
                     to_f32(a.dtype(), pa + i * sa, fa, m);
                     to_f32(b.dtype(), pb + j * sb, fb, m);
                     binary_f32(op, fa, fb, fo, m);
                     from_f32(fo, out.dtype(), po + i * so, m);
                   }
                 }
               });
}

void CpuBackend::axpy(Tensor& dst, const Tensor& src, float alpha) const {
  const int64_t n = dst.numel();
  if (dst.dtype() == DType::kF32 && src.dtype() == DType::kF32) {
    float* d = dst.data_as<float>();
    const float* s = src.data_as<float>();
    parallel_for(0, n, kElementwiseGrain,
                 [&](int64_t lo, int64_t hi) { axpy_f32(d + lo, s + lo, alpha, hi - lo); });
    return;
  }
  auto* pd = static_cast<uint8_t*>(dst.data());
  const auto* ps = static_cast<const uint8_t*>(src.data());
  parallel_for(0, n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    float fd[kBlock], fs[kBlock];
    for (int64_t i = lo; i < hi; i += kBlock) {
      const int64_t m = std::min(kBlock, hi - i);
      to_f32(dst.dtype(), pd + i * dst.element_size(), fd, m);
      to_f32(src.dtype(), ps + i * src.element_size(), fs, m);
      axpy_f32(fd, fs, alpha, m);
      from_f32(fd, dst.dtype(), pd + i * dst.element_size(), m);
    }
  });
}

void CpuBackend::scale(const Tensor& x, float s, Tensor& out) const {
  map_blocks(x, out, [s](float* buf, int64_t m) { scale_f32(buf, s, buf, m); });
}

void CpuBackend::fill(Tensor& dst, float value) const {
  auto* pd = static_cast<uint8_t*>(dst.data());
  const size_t es = dst.element_size();
  parallel_for(0, dst.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    float buf[kBlock];
    std::fill(buf, buf + kBlock, value);
    for (int64_t i = lo; i < hi; i += kBlock) {
      from_f32(buf, dst.dtype(), pd + i * es, std::min(kBlock, hi - i));
    }
  });
}

void CpuBackend::fill_from(const Tensor& value, Tensor& dst) const {
  fill(dst, *value.data_as<float>());
}

void CpuBackend::convert(const Tensor& src, Tensor& dst) const {
  map_blocks(src, dst, [](float*, int64_t) {});
}

}  // namespace octet::cpu
