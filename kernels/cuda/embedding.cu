// Embedding lookup and its gradient on the GPU. The lookup converts the gathered table rows to
// f32 with the shared conversions (runtime/float16.h); the gradient zeroes the table gradient and
// adds every position's row of dy with float atomics (summation order is not deterministic, unlike
// the CPU's per-id position order).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace octet::cuda {
namespace {

// out (N, C) = table[ids] (V, C) as f32. Element i of out is position i / C, column i % C.
template <typename Id>
__global__ void embedding_kernel(const void* table, DType dtype, const Id* ids, float* out,
                                 int64_t positions, int64_t cols) {
  const int64_t n = positions * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t p = i / cols, c = i - p * cols;
    out[i] = load_f32(table, dtype, static_cast<int64_t>(ids[p]) * cols + c);
  }
}

// dtable[ids[p], c] += dy[p, c] for every position p; dtable zeroed before.
template <typename Id>
__global__ void embedding_backward_kernel(const float* dy, const Id* ids, float* dtable,
                                          int64_t positions, int64_t cols) {
  const int64_t n = positions * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t p = i / cols, c = i - p * cols;
    atomicAdd(dtable + static_cast<int64_t>(ids[p]) * cols + c, dy[i]);
  }
}

}  // namespace

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t positions = ids.numel(), cols = table.cols();
  if (positions * cols == 0) return;
  const unsigned blocks = blocks_for(positions * cols);
  cudaStream_t stream = stream_of(table);
  float* po = out.data_as<float>();  // (N, C)
  if (ids.dtype() == DType::kI32) {
    embedding_kernel<<<blocks, kThreads, 0, stream>>>(table.data(), table.dtype(),
                                                      ids.data_as<int32_t>(), po, positions, cols);
  } else {
    embedding_kernel<<<blocks, kThreads, 0, stream>>>(table.data(), table.dtype(),
                                                      ids.data_as<int64_t>(), po, positions, cols);
  }
  OCTET_CUDA_LAUNCH_CHECK("embedding");
}

void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable) {
  const int64_t positions = ids.numel(), cols = dtable.cols();
  cudaStream_t stream = stream_of(dtable);
  OCTET_CUDA_CHECK(cudaMemsetAsync(dtable.data(), 0, dtable.nbytes(), stream));
  if (positions * cols == 0) return;
  const unsigned blocks = blocks_for(positions * cols);
  const float* pdy = dy.data_as<float>();  // (N, C)
  float* pd = dtable.data_as<float>();     // (V, C)
  if (ids.dtype() == DType::kI32) {
    embedding_backward_kernel<<<blocks, kThreads, 0, stream>>>(pdy, ids.data_as<int32_t>(), pd,
                                                               positions, cols);
  } else {
    embedding_backward_kernel<<<blocks, kThreads, 0, stream>>>(pdy, ids.data_as<int64_t>(), pd,
                                                               positions, cols);
  }
  OCTET_CUDA_LAUNCH_CHECK("embedding_backward");
}

}  // namespace octet::cuda
