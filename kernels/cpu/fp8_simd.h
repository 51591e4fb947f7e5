// f32 <-> FP8 conversion of blocks on the CPU, in AVX-512 or AVX2 registers where the processor has
// them (chosen at run time), else runtime/fp8.h's scalar rule: bit for bit the same; and the byte
// transpose that makes column-wise FP8 data.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace octet::cpu {

// The instruction sets the conversions below have a path for.
enum class SimdPath { kScalar, kAvx2, kAvx512 };

const char* simd_path_name(SimdPath path);
bool simd_path_available(SimdPath path);
// The widest path this processor has, held to AVX2 (or to the scalar code) when
// ONEDNN_MAX_CPU_ISA names an ISA below AVX-512 (AVX2, AVX2_VNNI...; SSE41, AVX), so that one
// setting emulates an AVX2 machine for oneDNN and every octet CPU path alike. Read at each call.
SimdPath default_simd_path();
// The path the conversions take: default_simd_path() at the first conversion, unless a test chose
// one.
SimdPath fp8_simd_path();
// A hook for tests, so that each path can be checked on a processor that has a wider one: every
// later conversion takes `path` (it must be available). Returns the path taken before.
SimdPath set_fp8_simd_path(SimdPath path);

// fp8 is kE4M3 or kE5M2 in every call below (the ops layer has checked it; these run inside
// parallel regions and do not throw).

// q[i] = fp8(x[i] * scale) for i < n; returns max |x[i]|, NaN ignored
// (0 when n is 0 or every x is NaN).
float cast_fp8_amax(DType fp8, const float* x, int64_t n, float scale, uint8_t* q);
// q[i] = fp8(x[i] * scale), no max.
void cast_fp8(DType fp8, const float* x, int64_t n, float scale, uint8_t* q);

// out[i] = the value of FP8 code q[i], exact (runtime/fp8.h's from_e4m3 / from_e5m2).
void fp8_to_f32(DType fp8, const uint8_t* q, int64_t n, float* out);
// The same, transposing: dst[j * dst_stride + i] = value(src[i * src_stride + j]) for i < rows,
// j < cols; one pass, no f32 copy in between.
void fp8_to_f32_transposed(DType fp8, const uint8_t* src, int64_t src_stride, int64_t rows,
                           int64_t cols, float* dst, int64_t dst_stride);

// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols (16x16 blocks through
// SSE2 registers on x86-64).
void transpose_bytes(const uint8_t* src, int64_t src_stride, int64_t rows, int64_t cols,
                     uint8_t* dst, int64_t dst_stride);

}  // namespace octet::cpu
