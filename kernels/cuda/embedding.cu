// Embedding lookup and its gradient on the GPU. The lookup writes the gathered table rows in the
// output's dtype (f32, or bf16 for a bf16 table) through the shared conversions
// (runtime/float16.h); the gradient zeroes the f32 table gradient and adds every position's row
// of dy (f32 or bf16) with float atomics (summation order is not deterministic, unlike
// the CPU's per-id position order). Ids are checked on the device (runtime/cuda.h's deferred
// checks): an id outside the table gives a zero row (forward) or adds nothing (backward), and is
// raised at the host's next read.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace octet::cuda {
namespace {

// The CPU's message (kernels/nn.cpp) for a bad id of `op`.
int32_t register_id_check(const char* op) {
  return octet::cuda::register_device_check([op](const DeviceCheckRecord& r) {
    return std::string(op) + ": id " + std::to_string(r.value) + " at position " +
           std::to_string(r.position) + " is out of range for a table of " +
           std::to_string(r.limit) + " rows (ids must be in [0, " + std::to_string(r.limit) + "))";
  });
}
const int32_t kForwardIds = register_id_check("embedding");
const int32_t kBackwardIds = register_id_check("embedding_backward");

// out (N, C) = table[ids] (V, C), in out's dtype (f32, or bf16 for a bf16 table). Element i of out
// is position i / C, column i % C.
template <typename Id>
__global__ void embedding_kernel(const void* table, DType dtype, const Id* ids, ActOut out,
                                 int64_t positions, int64_t cols, int64_t rows,
                                 DeviceCheckRecord* check) {
  grid_stride_rows(positions * cols, cols, [&](int64_t i, int64_t p, int64_t c) {
    const auto id = static_cast<int64_t>(ids[p]);
    if (id < 0 || id >= rows) {
      report_bad_value(check, p);
      out.set(i, 0.f);
      return;
    }
    out.set(i, load_f32(table, dtype, id * cols + c));
  });
}

// dtable[ids[p], c] += dy[p, c] for every position p; dtable zeroed before.
template <typename Id>
__global__ void embedding_backward_kernel(ActIn dy, const Id* ids, float* dtable, int64_t positions,
                                          int64_t cols, int64_t rows, DeviceCheckRecord* check) {
  grid_stride_rows(positions * cols, cols, [&](int64_t i, int64_t p, int64_t c) {
    const auto id = static_cast<int64_t>(ids[p]);
    if (id < 0 || id >= rows) {
      report_bad_value(check, p);
      return;
    }
    atomicAdd(dtable + id * cols + c, dy[i]);
  });
}

template <typename Id>
void launch_embedding(const Tensor& table, const Id* ids, ActOut out, int64_t positions,
                      int64_t cols, cudaStream_t stream) {
  DeviceCheckRecord* check = octet::cuda::device_check_record(table.device());
  embedding_kernel<<<blocks_for(positions * cols), kThreads, 0, stream>>>(
      table.data(), table.dtype(), ids, out, positions, cols, table.rows(), check);
  OCTET_CUDA_LAUNCH_CHECK("embedding");
  finish_check(check, ids, kForwardIds, table.rows(), 0, stream);
}

template <typename Id>
void launch_embedding_backward(ActIn dy, const Id* ids, Tensor& dtable, int64_t positions,
                               cudaStream_t stream) {
  const int64_t cols = dtable.cols();
  DeviceCheckRecord* check = octet::cuda::device_check_record(dtable.device());
  embedding_backward_kernel<<<blocks_for(positions * cols), kThreads, 0, stream>>>(
      dy, ids, dtable.data_as<float>(), positions, cols, dtable.rows(), check);
  OCTET_CUDA_LAUNCH_CHECK("embedding_backward");
  finish_check(check, ids, kBackwardIds, dtable.rows(), 0, stream);
}

}  // namespace

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t positions = ids.numel(), cols = table.cols();
  if (positions * cols == 0) return;
  cudaStream_t stream = stream_of(table);
  const ActOut po = act_out(out);  // (N, C), the table's dtype
  if (ids.dtype() == DType::kI32) {
    launch_embedding(table, ids.data_as<int32_t>(), po, positions, cols, stream);
  } else {
    launch_embedding(table, ids.data_as<int64_t>(), po, positions, cols, stream);
  }
}

void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable) {
  const int64_t positions = ids.numel(), cols = dtable.cols();
  cudaStream_t stream = stream_of(dtable);
  OCTET_CUDA_CHECK(cudaMemsetAsync(dtable.data(), 0, dtable.nbytes(), stream));
  if (positions * cols == 0) return;
  const ActIn pdy = act_in(dy);  // (N, C)
  if (ids.dtype() == DType::kI32) {
    launch_embedding_backward(pdy, ids.data_as<int32_t>(), dtable, positions, stream);
  } else {
    launch_embedding_backward(pdy, ids.data_as<int64_t>(), dtable, positions, stream);
  }
}

}  // namespace octet::cuda
