// octet's own f32 GEMM on the CPU: BLIS-style blocks (B, and any A but a row-major f32 one, each
// packed once per call by the pool's threads and shared by every task; a row-major f32 A is read
// in place) and register-blocked micro-kernels in AVX-512 or AVX2+FMA, chosen at run time, else
// portable C++. The packing reads f32, bf16, f16 or FP8 operands in either layout and converts
// them to f32 as it packs, so no operand is converted or transposed in a pass of its own.
#pragma once

#include <cstdint>

#include "kernels/cpu/fp8_simd.h"
#include "runtime/dtype.h"

namespace octet::cpu {

// One operand as stored, row-major with `ld` elements between rows. A is logically (M, K): stored
// (M, K), or (K, M) when transposed. B is logically (K, N): stored (K, N), or (N, K) when
// transposed.
struct GemmOperand {
  const void* data;
  DType dtype;
  bool transposed;
  int64_t ld;
};

// Whether the result is added to what C holds (C += alpha A·B) or replaces it (C = alpha A·B).
enum class GemmUpdate { kOverwrite, kAdd };

// C (M, N, row stride ldc) = alpha * A·B (+ C). The bits of every element depend on the shape,
// alpha, the operands and the micro-kernel path only: K is summed in blocks of a fixed size in
// order, each block by one thread, whatever the thread count. K > 0.
void sgemm(int64_t m, int64_t n, int64_t k, float alpha, const GemmOperand& a, const GemmOperand& b,
           GemmUpdate update, float* c, int64_t ldc);

// The micro-kernel path sgemm takes: the widest this processor has (AVX2 needs FMA too), held to
// AVX2 when ONEDNN_MAX_CPU_ISA names an ISA below AVX-512 (so one setting emulates an AVX2 machine
// for oneDNN and octet alike), unless set_gemm_simd_path chose one. The setter is for tests and
// benchmarks (the path must be available); it returns the path taken before.
SimdPath gemm_simd_path();
SimdPath set_gemm_simd_path(SimdPath path);

// What ops::gemm runs on the CPU: octet's own sgemm above (the default; OCTET_CPU_GEMM=octet),
// or oneDNN's sgemm in shape-fixed tiles on operands converted to f32 first
// (OCTET_CPU_GEMM=onednn); the setter changes it and returns the choice before. Another value of
// OCTET_CPU_GEMM is an error at the first GEMM. The own sgemm decodes FP8 and bf16 operands while
// it packs them; how it compares with oneDNN and OpenBLAS is in docs/perf.
enum class CpuGemmLibrary { kOctet, kOnednn };
CpuGemmLibrary cpu_gemm_library();
CpuGemmLibrary set_cpu_gemm_library(CpuGemmLibrary library);

// dst[j * dst_stride + i] = src[i * src_stride + j] for i < n_src_rows, j < n_src_cols: 16x16
// blocks through AVX-512 registers or 8x8 blocks through AVX2 ones, as gemm_simd_path() says
// (so an AVX2 machine, or one held to AVX2, does not transpose element by element), the ragged
// edges element by element.
void transpose_f32(const float* src, int64_t src_stride, int64_t n_src_rows, int64_t n_src_cols,
                   float* dst, int64_t dst_stride);

}  // namespace octet::cpu
