// Reductions on the GPU, in two passes with no atomics: per-block partials into a workspace, then
// one block combines them in a fixed order, so a result depends only on the data and its size.
// Sums accumulate in f64 like kernels/cpu/reduce.cpp; max propagates NaN, amax ignores it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/memory.h"

namespace octet::cuda {
namespace {

// Partials of the first pass: enough blocks to fill a large GPU (over a hundred SMs), few enough
// for one block to finish.
constexpr unsigned kMaxPartials = 1024;
constexpr int kFinalThreads = 1024;

// What each reduction loads per element, how two values combine, and where it starts.
struct SumReducer {
  using T = double;
  static __device__ T identity() { return 0.0; }
  static __device__ T load(const void* x, DType d, int64_t i) { return load_f32(x, d, i); }
  static __device__ T combine(T a, T b) { return a + b; }
};

struct SumSquaresReducer {
  using T = double;
  static __device__ T identity() { return 0.0; }
  static __device__ T load(const void* x, DType d, int64_t i) {
    const double v = load_f32(x, d, i);
    return v * v;
  }
  static __device__ T combine(T a, T b) { return a + b; }
};

// max |x| with NaN ignored: a NaN element loads as 0, so combine never sees one.
struct AmaxReducer {
  using T = float;
  static __device__ T identity() { return 0.f; }
  static __device__ T load(const void* x, DType d, int64_t i) {
    const float a = fabsf(load_f32(x, d, i));
    return a > 0.f ? a : 0.f;
  }
  static __device__ T combine(T a, T b) { return a > b ? a : b; }
};

// max x with NaN winning, as the CPU's max: once a NaN is in, it stays.
struct MaxReducer {
  using T = float;
  static __device__ T identity() { return -INFINITY; }
  static __device__ T load(const void* x, DType d, int64_t i) { return load_f32(x, d, i); }
  static __device__ T combine(T a, T b) { return (isnan(a) || a > b) ? a : b; }
};

// Reduces v over the block (blockDim.x a multiple of 32); thread 0 gets the result.
template <typename R>
__device__ typename R::T block_combine(typename R::T v) {
  using T = typename R::T;
  __shared__ T partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = R::combine(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T result = R::identity();
  if (threadIdx.x == 0) {
    // Warp results in warp order: the same order every run.
    for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) {
      result = R::combine(result, partial[w]);
    }
  }
  return result;
}

// Pass 1: partials[blockIdx.x] = the block's reduction of its grid-stride share of x.
template <typename R>
__global__ void reduce_partials_kernel(const void* x, DType d, int64_t n, typename R::T* partials) {
  typename R::T acc = R::identity();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    acc = R::combine(acc, R::load(x, d, i));
  }
  acc = block_combine<R>(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Pass 2, one block: the partials combined; written as f32 to out[0] and, when asked, in full
// precision to *exact.
template <typename R>
__global__ void reduce_final_kernel(const typename R::T* partials, int count, float* out,
                                    typename R::T* exact) {
  typename R::T acc = R::identity();
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc = R::combine(acc, partials[i]);
  acc = block_combine<R>(acc);
  if (threadIdx.x == 0) {
    if (out != nullptr) out[0] = static_cast<float>(acc);
    if (exact != nullptr) *exact = acc;
  }
}

// A device scratch buffer of `count` 8-byte slots (f64 partials), counted as workspace.
Tensor scratch_8byte(int64_t count, Device device) {
  MemTagScope tag(MemTag::kWorkspace);
  return Tensor::empty({count}, DType::kI64, device);
}

// Runs both passes; returns the workspace, which holds the full-precision result in its last
// slot (valid once the stream reaches it).
template <typename R>
Tensor reduce(const Tensor& x, float* out) {
  static_assert(sizeof(typename R::T) <= 8);
  const int64_t n = x.numel();
  const unsigned blocks = std::min(blocks_for(n), kMaxPartials);
  Tensor ws = scratch_8byte(int64_t{blocks} + 1, x.device());
  auto* partials = reinterpret_cast<typename R::T*>(ws.data_as<int64_t>());
  // The exact result goes after the partials, at an 8-byte boundary.
  auto* exact = reinterpret_cast<typename R::T*>(ws.data_as<int64_t>() + blocks);
  const cudaStream_t stream = stream_of(x);
  reduce_partials_kernel<R><<<blocks, kThreads, 0, stream>>>(x.data(), x.dtype(), n, partials);
  OCTET_CUDA_LAUNCH_CHECK("reduce_partials_kernel");
  reduce_final_kernel<R>
      <<<1, kFinalThreads, 0, stream>>>(partials, static_cast<int>(blocks), out, exact);
  OCTET_CUDA_LAUNCH_CHECK("reduce_final_kernel");
  return ws;
}

// Column sums over a slice of rows: block (32, 8) covers 32 columns, blockIdx.y the slice
// [y * rows_per_split, ...). partial (splits, cols) f64.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;

__global__ void sum_rows_partial_kernel(const void* x, DType d, int64_t rows, int64_t cols,
                                        int64_t rows_per_split, double* partial) {
  __shared__ double acc_tile[kRowLanes][kColTile + 1];
  const int64_t c = blockIdx.x * int64_t{kColTile} + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_split;
  const int64_t r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
  double acc = 0.0;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += load_f32(x, d, r * cols + c);
  }
  acc_tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double total = 0.0;
    for (int k = 0; k < kRowLanes; ++k) total += acc_tile[k][threadIdx.x];
    partial[blockIdx.y * cols + c] = total;
  }
}

// out[c] = the slices' sums added in slice order, rounded to f32 and stored in out's dtype (the
// CPU's two roundings).
__global__ void sum_rows_final_kernel(const double* partial, int64_t splits, int64_t cols,
                                      void* out, DType dout) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    double total = 0.0;
    for (int64_t s = 0; s < splits; ++s) total += partial[s * cols + c];
    store_f32(out, dout, c, static_cast<float>(total));
  }
}

// out[0] = values[0..n) added in order from 0 (f64), one thread: the CPU's order.
__global__ void add_in_order_kernel(const double* values, int n, double* out) {
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += values[i];
  *out = total;
}

// After every part of the total, exact, is in totals[0..n): the norm (their sum in order,
// then sqrt, in f64 as the CPU computes it) and the clip factor, one thread.
__global__ void clip_factor_kernel(const double* totals, int n, double max_norm, double* norm,
                                   float* factor) {
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += totals[i];
  const double v = sqrt(total);
  *norm = v;
  *factor = (max_norm > 0 && isfinite(v) && v > max_norm)
                ? static_cast<float>(max_norm / (v + 1e-6))
                : 1.f;
}

// g *= factor[0], as scale_ does; nothing when the factor is 1 (no clipping).
__global__ void scale_by_factor_kernel(void* g, DType d, int64_t n, const float* factor) {
  const float s = *factor;
  if (s == 1.f) return;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_f32(g, d, i, __fmul_rn(load_f32(g, d, i), s));
  }
}

}  // namespace

// On the device, with no wait: the sums, the norm, the factor and the scaling, the f64s' bits in
// the (1,) i64 total and norm.
void CudaBackend::sum_of_squares_part(const std::vector<const Tensor*>& xs, Tensor& total) const {
  const auto n = static_cast<int64_t>(xs.size());
  const Device device = total.device();
  const cudaStream_t stream = static_cast<cudaStream_t>(octet::cuda::stream(device));
  // Each tensor's exact sum (n,) f64, then the shared partials of each reduction.
  Tensor ws = scratch_8byte(n + kMaxPartials, device);
  auto* sums = reinterpret_cast<double*>(ws.data_as<int64_t>());
  auto* partials = reinterpret_cast<double*>(ws.data_as<int64_t>() + n);
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& x = *xs[static_cast<size_t>(i)];
    const unsigned blocks = std::min(blocks_for(x.numel()), kMaxPartials);
    reduce_partials_kernel<SumSquaresReducer>
        <<<blocks, kThreads, 0, stream>>>(x.data(), x.dtype(), x.numel(), partials);
    OCTET_CUDA_LAUNCH_CHECK("reduce_partials_kernel");
    reduce_final_kernel<SumSquaresReducer>
        <<<1, kFinalThreads, 0, stream>>>(partials, static_cast<int>(blocks), nullptr, sums + i);
    OCTET_CUDA_LAUNCH_CHECK("reduce_final_kernel");
  }
  add_in_order_kernel<<<1, 1, 0, stream>>>(sums, static_cast<int>(n),
                                           reinterpret_cast<double*>(total.data_as<int64_t>()));
  OCTET_CUDA_LAUNCH_CHECK("add_in_order_kernel");
}

void CudaBackend::clip_grad_norm_from_parts(const std::vector<Tensor*>& grads, const Tensor& parts,
                                            double max_norm, Tensor& norm) const {
  const Device device = norm.device();
  const cudaStream_t stream = static_cast<cudaStream_t>(octet::cuda::stream(device));
  Tensor ws = scratch_8byte(1, device);  // the factor's slot
  auto* factor = reinterpret_cast<float*>(ws.data_as<int64_t>());
  OCTET_CHECK(parts.numel() <= int64_t{0x7FFFFFFF}, "clip_grad_norm_from_parts: ", parts.numel(),
              " parts is too many");
  clip_factor_kernel<<<1, 1, 0, stream>>>(
      reinterpret_cast<const double*>(parts.data_as<int64_t>()), static_cast<int>(parts.numel()),
      max_norm, reinterpret_cast<double*>(norm.data_as<int64_t>()), factor);
  OCTET_CUDA_LAUNCH_CHECK("clip_factor_kernel");
  for (Tensor* g : grads) {
    if (g->numel() == 0) continue;
    scale_by_factor_kernel<<<blocks_for(g->numel()), kThreads, 0, stream>>>(g->data(), g->dtype(),
                                                                            g->numel(), factor);
    OCTET_CUDA_LAUNCH_CHECK("scale_by_factor_kernel");
  }
}

void CudaBackend::sum(const Tensor& x, Tensor& out) const {
  reduce<SumReducer>(x, out.data_as<float>());
}

// The sum, then scaled by 1 / n (rounded to f32) on the device: CUDA's rounding of sum / n
// (the CPU divides in f64; kernels/backend.h).
void CudaBackend::mean(const Tensor& x, Tensor& out) const {
  sum(x, out);
  scale(out, static_cast<float>(1.0 / static_cast<double>(x.numel())), out);
}

void CudaBackend::max(const Tensor& x, Tensor& out) const {
  reduce<MaxReducer>(x, out.data_as<float>());
}

void CudaBackend::amax(const Tensor& x, Tensor& out) const {
  reduce<AmaxReducer>(x, out.data_as<float>());
}

// The one reduction that waits: the f64 result is copied to the host.
double CudaBackend::sum_of_squares(const Tensor& x) const {
  const Tensor ws = reduce<SumSquaresReducer>(x, nullptr);
  const int64_t blocks = ws.numel() - 1;
  double result = 0.0;
  const cudaStream_t stream = stream_of(x);
  octet::cuda::detail::count_device_to_host();
  OCTET_CUDA_CHECK(cudaMemcpyAsync(&result, ws.data_as<int64_t>() + blocks, sizeof(result),
                                   cudaMemcpyDeviceToHost, stream));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

void CudaBackend::sum_rows(const Tensor& x, Tensor& out) const {
  const int64_t rows = x.rows(), cols = x.cols();
  if (cols == 0) return;
  const int64_t col_blocks = (cols + kColTile - 1) / kColTile;
  // Slices of rows so that narrow outputs (a bias of C columns over B*T rows) still fill the
  // GPU: about 2048 blocks, each slice at least 32 rows.
  int64_t splits = std::max<int64_t>(1, std::min<int64_t>((rows + 31) / 32, 2048 / col_blocks));
  splits = std::min<int64_t>(splits, 65535);
  const int64_t rows_per_split = std::max<int64_t>(1, (rows + splits - 1) / splits);
  splits = std::max<int64_t>(1, (rows + rows_per_split - 1) / rows_per_split);

  Tensor ws = scratch_8byte(splits * cols, x.device());
  auto* partial = reinterpret_cast<double*>(ws.data_as<int64_t>());  // (splits, cols)
  const cudaStream_t stream = stream_of(x);
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits));
  sum_rows_partial_kernel<<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(
      x.data(), x.dtype(), rows, cols, rows_per_split, partial);
  OCTET_CUDA_LAUNCH_CHECK("sum_rows_partial_kernel");
  sum_rows_final_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(partial, splits, cols,
                                                                   out.data(), out.dtype());
  OCTET_CUDA_LAUNCH_CHECK("sum_rows_final_kernel");
}

}  // namespace octet::cuda
