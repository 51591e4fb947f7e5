// Shared pieces of the CUDA kernels: launch sizes, the tensor's stream, dtype loads and stores
// through the same conversion code as the CPU (runtime/float16.h, runtime/fp8.h), and block
// reductions. Included by kernels/cuda/*.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/math/grid_index.h"
#include "runtime/cuda.h"
#include "runtime/float16.h"
#include "runtime/fp8.h"
#include "runtime/fp8_stats.h"
#include "runtime/memory.h"
#include "runtime/tensor.h"

namespace octet::cuda {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

// Blocks for a grid-stride loop over n elements (at least 1, at most 65535 * 8).
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  constexpr int64_t kMax = int64_t{65535} * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMax ? kMax : blocks));
}

// Threads for one block per row of `cols`: a warp multiple, no more than the row needs, and one
// warp for empty rows (a launch with 0 threads is an invalid configuration; the row kernels
// still write their per-row results, as the CPU does).
inline int row_threads(int64_t cols) {
  if (cols >= 4096) return 1024;
  if (cols >= kThreads) return kThreads;
  if (cols <= 0) return kWarp;
  return static_cast<int>((cols + kWarp - 1) / kWarp * kWarp);
}

// Blocks for a loop over rows, one row per block at a time.
inline unsigned row_blocks(int64_t rows) {
  constexpr int64_t kMax = int64_t{65535} * 8;
  return static_cast<unsigned>(rows < kMax ? rows : kMax);
}

// The octet stream of the tensor's device (runtime/cuda.h).
inline cudaStream_t stream_of(const Tensor& t) {
  return static_cast<cudaStream_t>(octet::cuda::stream(t.device()));
}

// A small host table (per-tensor or per-slot pointers and sizes for a multi-tensor kernel) in a
// new device workspace, uploaded on the device's octet stream (`stream`) through the staging
// ring (runtime/cuda.h): no wait, and `table` may be freed on return.
template <typename T>
Tensor upload_table(const std::vector<T>& table, Device device, cudaStream_t stream) {
  const size_t bytes = table.size() * sizeof(T);
  Tensor out;
  {
    MemTagScope tag(MemTag::kWorkspace);
    out = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kU8, device);
  }
  OCTET_ASSERT(stream == static_cast<cudaStream_t>(octet::cuda::stream(device)),
               "upload_table: the staging ring copies on the device's octet stream");
  octet::cuda::upload_async(device, out.data(), table.data(), bytes);
  return out;
}

// After every launch: a bad configuration is reported here, naming the kernel.
#define OCTET_CUDA_LAUNCH_CHECK(name)                                   \
  OCTET_CHECK(cudaPeekAtLastError() == cudaSuccess, "launch of ", name, \
              " failed: ", cudaGetErrorString(cudaGetLastError()))

// Deferred value checks (runtime/cuda.h, DeviceCheckRecord): a checking kernel reports each bad
// position of its launch, the lowest wins; finish_check then moves it into the record, with the
// value found there, unless an earlier launch failed first. Bad values are never dereferenced.
__device__ __forceinline__ void report_bad_value(DeviceCheckRecord* record, int64_t position) {
  atomicMin(reinterpret_cast<unsigned long long*>(&record->pending),
            static_cast<unsigned long long>(position));
}

template <typename V>
__global__ void finish_check_kernel(DeviceCheckRecord* record, const V* values, int32_t check,
                                    int64_t limit, int64_t extra) {
  const unsigned long long pending = record->pending;
  if (pending == ~0ull) return;
  record->pending = ~0ull;
  if (record->failed != 0) return;  // an earlier launch's bad value is the one to raise
  record->failed = 1;
  record->check = check;
  record->position = static_cast<int64_t>(pending);
  record->value = static_cast<int64_t>(values[pending]);
  record->limit = limit;
  record->extra = extra;
}

// After a checking launch over `values` on `stream` (one thread; no wait).
template <typename V>
void finish_check(DeviceCheckRecord* record, const V* values, int32_t check, int64_t limit,
                  int64_t extra, cudaStream_t stream) {
  finish_check_kernel<<<1, 1, 0, stream>>>(record, values, check, limit, extra);
  OCTET_CUDA_LAUNCH_CHECK("finish_check_kernel");
}

// Cast health on the device (runtime/fp8_stats.h, DeviceCastStats): the words a cast counts
// into, or null when it counts nothing (uniform over a launch). The elements cast are known
// here and added on the host.
inline unsigned long long* cast_stats_words(FP8CastCounts* counts, Device device, int64_t total) {
  if (counts == nullptr) return nullptr;
  counts->total += total;
  return reinterpret_cast<unsigned long long*>(
      device_cast_stats(*counts, device).words.data_as<int64_t>());
}

// Calls f.template operator()<In, kE4M3>() for an FP8 cast's input dtype (f32: In = float; bf16:
// In = uint16_t, its bits) and output dtype (e4m3 or e5m2).
template <typename F>
void dispatch_fp8_cast(DType in, DType fp8, F&& f) {
  const bool e4m3 = fp8 == DType::kE4M3;
  if (in == DType::kF32) {
    e4m3 ? f.template operator()<float, true>() : f.template operator()<float, false>();
  } else {
    e4m3 ? f.template operator()<uint16_t, true>() : f.template operator()<uint16_t, false>();
  }
}

// One thread's saturated and flushed elements, by the CPU's rules (kernels/cpu/fp8_cast.cpp,
// nvfp4.cpp): saturated when |x * scale| > the format's max (NaN never), flushed when x != 0 and
// not NaN but the code is +-0 (`magnitude`: the code's bits without the sign). Added with one
// atomic per nonzero count, so a cast that saturates and flushes nothing makes none.
struct CastTally {
  unsigned saturated = 0, flushed = 0;
  __device__ __forceinline__ void add(float x, float scaled, unsigned magnitude, float max) {
    saturated += fabsf(scaled) > max ? 1u : 0u;
    flushed += (x != 0.f && magnitude == 0u) ? 1u : 0u;
  }
  __device__ __forceinline__ void add_fp8(float x, float scaled, uint8_t q, float max) {
    add(x, scaled, q & 0x7Fu, max);
  }
  __device__ __forceinline__ void flush(unsigned long long* words) const {
    if (words == nullptr) return;
    if (saturated != 0) atomicAdd(words + DeviceCastStats::kSaturated, saturated);
    if (flushed != 0) atomicAdd(words + DeviceCastStats::kFlushed, flushed);
  }
  // flush with the counts summed over the warp first: one atomic per warp and count. Every lane
  // of the warp must call it. For casts where most threads count something (NVFP4's blocks nearly
  // all flush small values to 0), one same-address atomic per thread serialises the kernel.
  __device__ __forceinline__ void flush_warp(unsigned long long* words) const {
    if (words == nullptr) return;  // the launch's pointer: the same on every lane
    unsigned s = saturated, f = flushed;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      s += __shfl_xor_sync(0xffffffffu, s, offset);
      f += __shfl_xor_sync(0xffffffffu, f, offset);
    }
    const unsigned linear = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    if (linear % kWarp != 0) return;
    if (s != 0) atomicAdd(words + DeviceCastStats::kSaturated, static_cast<unsigned long long>(s));
    if (f != 0) atomicAdd(words + DeviceCastStats::kFlushed, static_cast<unsigned long long>(f));
  }
};

// BlockScaleSpread's rule: a scale counts when positive and finite, in bucket floor(8 log2 s)
// computed in f64, as the CPU computes it; the bucket's word is its index + kBucketOffset.
__device__ __forceinline__ bool counts_in_spread(float s) { return s > 0.f && isfinite(s); }
__device__ __forceinline__ int spread_bucket_word(float s) {
  return static_cast<int>(floor(log2(static_cast<double>(s)) * 8.0)) +
         DeviceCastStats::kBucketOffset;
}

// One block scale into the spread.
__device__ __forceinline__ void add_scale_to_spread(unsigned long long* words, float s) {
  if (!counts_in_spread(s)) return;
  atomicAdd(words + DeviceCastStats::kBuckets + spread_bucket_word(s), 1ull);
  atomicAdd(words + DeviceCastStats::kBlocks, 1ull);
  const auto bits = static_cast<unsigned long long>(__float_as_uint(s));
  atomicMax(words + DeviceCastStats::kMinBitsInverted, ~bits);
  atomicMax(words + DeviceCastStats::kMaxBits, bits);
}

// Element i of a floating buffer as f32 (f32, bf16, f16, e4m3, e5m2), and a store from f32 with
// round to nearest even (f32, bf16, f16). The dtype switch is uniform across a launch.
__device__ __forceinline__ float load_f32(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kBF16:
      return from_bf16(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16:
      return from_f16(static_cast<const uint16_t*>(p)[i]);
    case DType::kE4M3:
      return from_e4m3(static_cast<const uint8_t*>(p)[i]);
    case DType::kE5M2:
      return from_e5m2(static_cast<const uint8_t*>(p)[i]);
    default:
      return 0.f;
  }
}

// Element i of an FP8 cast's input: f32 (4-byte In) or bf16 (2-byte In, the bits as uint16_t).
template <typename In>
__device__ __forceinline__ float load_in(const In* x, int64_t i) {
  if constexpr (sizeof(In) == 4) {
    return x[i];
  } else {
    return from_bf16(x[i]);
  }
}

__device__ __forceinline__ void store_f32(void* p, DType d, int64_t i, float v) {
  switch (d) {
    case DType::kF32:
      static_cast<float*>(p)[i] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = to_bf16(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(p)[i] = to_f16(v);
      break;
    default:
      break;
  }
}

// ---- vectorised access ----
// The memory-bound kernels move kVec consecutive elements per access (16 bytes of f32, 8 of
// bf16, 4 of FP8 bytes) when every buffer of the launch starts on a multiple of its kVec-element
// width (allocations do; a view's offset may not). A scalar loop takes the last n % kVec elements,
// or all of them when a buffer is not aligned. The arithmetic per element is unchanged, so the
// results are the scalar loop's bit for bit.
constexpr int kVec = 4;

template <typename T>
struct alignas(kVec * sizeof(T)) Vec {
  T v[kVec];
};

// Whether p can be accessed as Vec of elements of `element_size` bytes (host side).
inline bool vec_aligned(const void* p, size_t element_size) {
  return reinterpret_cast<uintptr_t>(p) % (kVec * element_size) == 0;
}

// Elements i .. i + kVec - 1 of p (i a multiple of kVec, p aligned).
template <typename T, typename I>
__device__ __forceinline__ Vec<T> load_vec(const T* p, I i) {
  return *reinterpret_cast<const Vec<T>*>(p + i);
}
template <typename T, typename I>
__device__ __forceinline__ void store_vec(T* p, I i, const Vec<T>& v) {
  *reinterpret_cast<Vec<T>*>(p + i) = v;
}

// load_f32 and store_f32 of elements i .. i + kVec - 1, one access each.
template <typename I>
__device__ __forceinline__ void load_f32_vec(const void* p, DType d, I i, float (&out)[kVec]) {
  switch (d) {
    case DType::kF32: {
      const Vec<float> v = load_vec(static_cast<const float*>(p), i);
      for (int k = 0; k < kVec; ++k) out[k] = v.v[k];
      return;
    }
    case DType::kBF16:
    case DType::kF16: {
      const Vec<uint16_t> v = load_vec(static_cast<const uint16_t*>(p), i);
      for (int k = 0; k < kVec; ++k)
        out[k] = d == DType::kBF16 ? from_bf16(v.v[k]) : from_f16(v.v[k]);
      return;
    }
    case DType::kE4M3:
    case DType::kE5M2: {
      const Vec<uint8_t> v = load_vec(static_cast<const uint8_t*>(p), i);
      for (int k = 0; k < kVec; ++k)
        out[k] = d == DType::kE4M3 ? from_e4m3(v.v[k]) : from_e5m2(v.v[k]);
      return;
    }
    default:
      for (int k = 0; k < kVec; ++k) out[k] = 0.f;
  }
}

template <typename I>
__device__ __forceinline__ void store_f32_vec(void* p, DType d, I i, const float (&in)[kVec]) {
  switch (d) {
    case DType::kF32: {
      Vec<float> v;
      for (int k = 0; k < kVec; ++k) v.v[k] = in[k];
      store_vec(static_cast<float*>(p), i, v);
      return;
    }
    case DType::kBF16:
    case DType::kF16: {
      Vec<uint16_t> v;
      for (int k = 0; k < kVec; ++k) v.v[k] = d == DType::kBF16 ? to_bf16(in[k]) : to_f16(in[k]);
      store_vec(static_cast<uint16_t*>(p), i, v);
      return;
    }
    default:
      return;
  }
}

// ---- activations: f32, bf16 or f16 ----
// An nn kernel's floating operand (kernels/nn.h: activations and their gradients are f32, bf16 or
// f16, each operand its own, uniform over a launch): elements load as f32 and store rounded to
// nearest even (load_f32 / store_f32 above), so a kernel's arithmetic is f32 whatever the
// operand's width and a 16-bit output is the f32 result rounded once. `+ offset` moves by
// elements (a row's start).
__device__ __forceinline__ int64_t act_bytes(DType d) { return d == DType::kF32 ? 4 : 2; }

struct ActIn {
  const void* p;
  DType dtype;
  template <typename I>
  __device__ __forceinline__ float operator[](I i) const {
    return load_f32(p, dtype, static_cast<int64_t>(i));
  }
  // Elements i .. i + kVec - 1 (i a multiple of kVec, the buffer aligned: act_vec_ok).
  template <typename I>
  __device__ __forceinline__ Vec<float> vec(I i) const {
    Vec<float> out;
    load_f32_vec(p, dtype, i, out.v);
    return out;
  }
  __device__ __forceinline__ ActIn operator+(int64_t offset) const {
    return {static_cast<const char*>(p) + offset * act_bytes(dtype), dtype};
  }
};

struct ActOut {
  void* p;
  DType dtype;
  template <typename I>
  __device__ __forceinline__ void set(I i, float v) const {
    store_f32(p, dtype, static_cast<int64_t>(i), v);
  }
  template <typename I>
  __device__ __forceinline__ void set_vec(I i, const Vec<float>& v) const {
    store_f32_vec(p, dtype, i, v.v);
  }
  // The element as stored (a 16-bit output reads back rounded).
  template <typename I>
  __device__ __forceinline__ float operator[](I i) const {
    return ActIn{p, dtype}[i];
  }
  __device__ __forceinline__ ActOut operator+(int64_t offset) const {
    return {static_cast<char*>(p) + offset * act_bytes(dtype), dtype};
  }
};

// Host side: the tensor (f32, bf16 or f16, which the ops layer guarantees) as a kernel operand.
inline DType act_dtype(const Tensor& t) {
  OCTET_ASSERT(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16);
  return t.dtype();
}
inline ActIn act_in(const Tensor& t) { return {t.data(), act_dtype(t)}; }
inline ActOut act_out(Tensor& t) { return {t.data(), act_dtype(t)}; }
// Whether the tensor's buffer can be accessed kVec elements at a time.
inline bool act_vec_ok(const Tensor& t) { return vec_aligned(t.data(), t.element_size()); }
// Rows of `cols` elements starting at every row: aligned when the buffer is and cols is a
// multiple of kVec.
inline bool act_rows_vec_ok(const Tensor& t, int64_t cols) {
  return cols % kVec == 0 && act_vec_ok(t);
}

// Calls f(I{}) with I = uint32_t when every index of a grid-stride loop over n elements, plus
// one stride (below 2^28), fits in 32 bits, else with I = uint64_t: the kernels' index math is
// 32-bit for every tensor below 2^31 elements.
template <typename F>
void with_index_type(int64_t n, F&& f) {
  if (n <= int64_t{0x7FFFFFFF}) {
    f(uint32_t{});
  } else {
    f(uint64_t{});
  }
}

// Blocks for grid_stride_vec over n elements: one thread per group of kVec.
inline unsigned vec_blocks_for(int64_t n) { return blocks_for((n + kVec - 1) / kVec); }

// A grid-stride loop over [0, n): group(i) for i = 0, kVec, 2 kVec, ... while i + kVec <= n,
// then one(i) for each element left (every element when `vector` is false; uniform over the
// launch). One 32-bit or 64-bit add and compare per step, no divide.
template <typename I, typename Group, typename One>
__device__ __forceinline__ void grid_stride_vec(I n, bool vector, Group&& group, One&& one) {
  const I first = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  I done = 0;
  if (vector) {
    const I groups = n / kVec;  // unsigned: a shift
    for (I g = first; g < groups; g += stride) group(g * kVec);
    done = groups * kVec;
  }
  for (I i = done + first; i < n; i += stride) one(i);
}

// out[i] = f(x[i]) over n elements, loaded and stored as f32 (load_f32 / store_f32), kVec at a
// time when `vector`. out may be x: each element is read before it is written.
template <typename I, typename F>
__device__ __forceinline__ void map_elements(const void* x, DType dx, void* out, DType dout, I n,
                                             bool vector, F&& f) {
  grid_stride_vec(
      n, vector,
      [&](I i) {
        float v[kVec];
        load_f32_vec(x, dx, i, v);
        for (int k = 0; k < kVec; ++k) v[k] = f(v[k]);
        store_f32_vec(out, dout, i, v);
      },
      [&](I i) { store_f32(out, dout, i, f(load_f32(x, dx, i))); });
}

// out[i] = f(a[i], b[i]), as map_elements; out may be a or b.
template <typename I, typename F>
__device__ __forceinline__ void zip_elements(const void* a, DType da, const void* b, DType db,
                                             void* out, DType dout, I n, bool vector, F&& f) {
  grid_stride_vec(
      n, vector,
      [&](I i) {
        float x[kVec], y[kVec];
        load_f32_vec(a, da, i, x);
        load_f32_vec(b, db, i, y);
        for (int k = 0; k < kVec; ++k) x[k] = f(x[k], y[k]);
        store_f32_vec(out, dout, i, x);
      },
      [&](I i) { store_f32(out, dout, i, f(load_f32(a, da, i), load_f32(b, db, i))); });
}

// A grid-stride loop over n elements in rows of `cols`: body(i, row, col) with the (row, column)
// walked by math::BasicGridRowCol, so no divide or modulo per element. n > 0 implies cols > 0.
// I: the index type (int64_t, or uint32_t under with_index_type).
template <typename I, typename Body>
__device__ __forceinline__ void grid_stride_rows(I n, I cols, Body&& body) {
  const I first = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  if (first >= n) return;
  auto at = math::BasicGridRowCol<I>::start(first, stride, cols);
  for (I i = first; i < n; i += stride, at.advance()) body(i, at.row, at.col);
}

// grid_stride_rows kVec columns at a time when `vector` (cols a multiple of kVec, the buffers
// aligned): group(i, row, col) for elements i .. i + kVec - 1, columns col .. col + kVec - 1;
// else one(i, row, col) per element.
template <typename Group, typename One>
__device__ __forceinline__ void grid_stride_row_groups(int64_t n, int64_t cols, bool vector,
                                                       Group&& group, One&& one) {
  if (!vector) {
    grid_stride_rows(n, cols, one);
    return;
  }
  grid_stride_rows(n / kVec, cols / kVec,
                   [&](int64_t g, int64_t r, int64_t c) { group(g * kVec, r, c * kVec); });
}

// v * s with the CPU's NaN result. x86 returns a NaN operand itself (quieted: sign and payload
// kept), and for an invalid product of numbers (0 * inf) its default NaN 0xFFC00000, while GPU
// arithmetic returns the canonical NaN 0x7FFFFFFF for both; a NaN operand is therefore passed
// through here and a new NaN is x86's, so bit-for-bit comparisons hold for the NaN codes of FP8
// data and E8M0 and for a zero scale times an infinite amax (NVFP4's dequantization).
__device__ __forceinline__ float mul_keep_nan(float v, float s) {
  if (isnan(v)) return __uint_as_float(__float_as_uint(v) | 0x00400000u);
  if (isnan(s)) return __uint_as_float(__float_as_uint(s) | 0x00400000u);
  const float p = __fmul_rn(v, s);
  return isnan(p) ? __uint_as_float(0xFFC00000u) : p;
}

// *target = value > *target ? value : *target in one atomic step: the CPU's merge of an amax
// (kernels/cpu/fp8_cast.cpp, merge_amax) for every start, so a NaN target stays NaN and a -0.0
// target stays -0.0 when value is 0. (atomicMax on the bits as unsigned kept a -0.0 target,
// 0x80000000, above every positive value; on the bits as signed ints a negative-NaN target is
// replaced and a -0.0 one becomes +0.) The target only grows, so a stale first read costs one
// more compare-and-swap, never a wrong result. `value` is not NaN (the caller filters it).
__device__ __forceinline__ void atomic_merge_amax(float* target, float value) {
  int* bits = reinterpret_cast<int*>(target);
  int seen = *bits;
  while (value > __int_as_float(seen)) {
    const int before = atomicCAS(bits, seen, __float_as_int(value));
    if (before == seen) return;
    seen = before;
  }
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
// NaN-ignoring max: a NaN operand loses.
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Reduces v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Uses 33 floats of shared memory; safe to call repeatedly.
template <typename Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[kWarp + 1];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  if (warp == 0) {
    float w = lane < warps ? partial[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) partial[kWarp] = w;
  }
  __syncthreads();
  return partial[kWarp];
}

}  // namespace octet::cuda
