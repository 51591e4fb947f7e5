// Embedding lookup and its gradient on the GPU. The lookup writes the gathered table rows in the
// output's dtype (f32, or bf16 for a bf16 table) through the shared conversions
// (runtime/float16.h). The gradient is deterministic and the CPU's bits (kernels/cpu/
// embedding.cpp): each table row is the sum of its positions' rows of dy (f32 or bf16) in
// position order, starting from the first, with no atomics. The positions are sorted by
// (id, position) on the device (a bitonic sort of 64-bit keys, in shared memory up to 2048 keys
// and in global passes above), then one block per id walks its run of sorted positions, a thread
// per column. Ids are checked on the device (runtime/cuda.h's deferred checks): an id outside the
// table gives a zero row (forward) or adds nothing (backward), and is raised at the host's next
// read.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

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

template <typename Id>
void launch_embedding(const Tensor& table, const Id* ids, ActOut out, int64_t positions,
                      int64_t cols, cudaStream_t stream) {
  DeviceCheckRecord* check = octet::cuda::device_check_record(table.device());
  embedding_kernel<<<blocks_for(positions * cols), kThreads, 0, stream>>>(
      table.data(), table.dtype(), ids, out, positions, cols, table.rows(), check);
  OCTET_CUDA_LAUNCH_CHECK("embedding");
  finish_check(check, ids, kForwardIds, table.rows(), 0, stream);
}

// ---- the gradient: sort positions by (id, position), then sum each id's run in order ----

// Keys sort to (id, position) order: id in the high 32 bits, position in the low. A bad id gets
// the id `rows` (after every real one; its run is skipped), the padding up to a power of two the
// largest key.
constexpr unsigned long long kPadKey = ~0ull;
constexpr int kSortTile = 2048;  // keys sorted in one block's shared memory, two per thread

__device__ __forceinline__ int64_t key_id(unsigned long long key) {
  return static_cast<int64_t>(key >> 32);
}
__device__ __forceinline__ int64_t key_position(unsigned long long key) {
  return static_cast<int64_t>(key & 0xFFFFFFFFull);
}

template <typename Id>
__global__ void embedding_keys_kernel(const Id* ids, int64_t positions, int64_t padded,
                                      int64_t rows, unsigned long long* keys,
                                      DeviceCheckRecord* check) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < padded;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (p >= positions) {
      keys[p] = kPadKey;
      continue;
    }
    auto id = static_cast<int64_t>(ids[p]);
    if (id < 0 || id >= rows) {
      report_bad_value(check, p);
      id = rows;
    }
    keys[p] = (static_cast<unsigned long long>(id) << 32) | static_cast<unsigned long long>(p);
  }
}

// One compare-exchange of the bitonic network: pair `t` of the stage with distance j in the merge
// of length k; the pair's direction is ascending where bit k of its lower index is 0.
__device__ __forceinline__ void bitonic_step(unsigned long long* a, int64_t base, int64_t t,
                                             int64_t j, int64_t k) {
  const int64_t i = (t / j) * 2 * j + t % j, l = i + j;
  const unsigned long long x = a[i], y = a[l];
  const bool ascending = ((base + i) & k) == 0;
  if ((x > y) == ascending) {
    a[i] = y;
    a[l] = x;
  }
}

// Blocks of `tile` keys (a power of two up to kSortTile, tile / 2 threads): with k == 0 each block
// sorts its tile (merges of length 2 .. tile); otherwise it runs the stages of distance below
// `tile` of the merge of length k (the global passes did the longer ones).
__global__ void bitonic_tile_kernel(unsigned long long* keys, int64_t tile, int64_t k) {
  __shared__ unsigned long long a[kSortTile];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * tile;
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x) a[i] = keys[base + i];
  __syncthreads();
  const int64_t first = k == 0 ? 2 : k, last = k == 0 ? tile : k;
  for (int64_t m = first; m <= last; m *= 2) {
    for (int64_t j = (m < tile ? m : tile) / 2; j > 0; j /= 2) {
      bitonic_step(a, base, threadIdx.x, j, m);
      __syncthreads();
    }
  }
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x) keys[base + i] = a[i];
}

// One stage of distance j >= kSortTile of the merge of length k, over all `padded` keys.
__global__ void bitonic_global_kernel(unsigned long long* keys, int64_t padded, int64_t j,
                                      int64_t k) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < padded / 2;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    bitonic_step(keys, 0, t, j, k);
  }
}

// Block s (grid-stride) at the first sorted key of an id's run writes that id's row: the sum of
// the run's rows of dy in position order, starting from the first, a thread per column.
__global__ void embedding_sum_runs_kernel(ActIn dy, const unsigned long long* keys,
                                          int64_t positions, int64_t cols, int64_t rows,
                                          float* dtable) {
  for (int64_t s = blockIdx.x; s < positions; s += gridDim.x) {
    const int64_t id = key_id(keys[s]);
    if (id >= rows || (s > 0 && key_id(keys[s - 1]) == id)) continue;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float acc = dy[key_position(keys[s]) * cols + c];
      for (int64_t t = s + 1; t < positions && key_id(keys[t]) == id; ++t) {
        acc += dy[key_position(keys[t]) * cols + c];
      }
      dtable[id * cols + c] = acc;
    }
  }
}

int64_t next_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Sorts `padded` keys (a power of two) in place on `stream`.
void bitonic_sort(unsigned long long* keys, int64_t padded, cudaStream_t stream) {
  const int64_t tile = std::min<int64_t>(padded, kSortTile);
  const auto tiles = static_cast<unsigned>(padded / tile);
  const auto tile_threads = static_cast<unsigned>(std::max<int64_t>(1, tile / 2));
  bitonic_tile_kernel<<<tiles, tile_threads, 0, stream>>>(keys, tile, 0);
  OCTET_CUDA_LAUNCH_CHECK("bitonic_tile_kernel");
  for (int64_t k = 2 * tile; k <= padded; k *= 2) {
    for (int64_t j = k / 2; j >= tile; j /= 2) {
      bitonic_global_kernel<<<blocks_for(padded / 2), kThreads, 0, stream>>>(keys, padded, j, k);
      OCTET_CUDA_LAUNCH_CHECK("bitonic_global_kernel");
    }
    bitonic_tile_kernel<<<tiles, tile_threads, 0, stream>>>(keys, tile, k);
    OCTET_CUDA_LAUNCH_CHECK("bitonic_tile_kernel");
  }
}

template <typename Id>
void launch_embedding_backward(ActIn dy, const Id* ids, Tensor& dtable, int64_t positions,
                               cudaStream_t stream) {
  const int64_t cols = dtable.cols(), rows = dtable.rows();
  OCTET_CHECK(positions < (int64_t{1} << 32) && rows < (int64_t{1} << 31),
              "embedding_backward on the GPU: ", positions, " positions and a table of ", rows,
              " rows; expected fewer than 2^32 positions and 2^31 rows");
  const int64_t padded = next_power_of_two(positions);
  Tensor keys_ws;
  {
    MemTagScope tag(MemTag::kWorkspace);
    keys_ws = Tensor::empty({padded}, DType::kI64, dtable.device());
  }
  auto* keys = reinterpret_cast<unsigned long long*>(keys_ws.data_as<int64_t>());
  DeviceCheckRecord* check = octet::cuda::device_check_record(dtable.device());
  embedding_keys_kernel<<<blocks_for(padded), kThreads, 0, stream>>>(ids, positions, padded, rows,
                                                                     keys, check);
  OCTET_CUDA_LAUNCH_CHECK("embedding_keys_kernel");
  finish_check(check, ids, kBackwardIds, rows, 0, stream);
  bitonic_sort(keys, padded, stream);
  const auto threads = static_cast<unsigned>(std::min<int64_t>(kThreads, (cols + 31) / 32 * 32));
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(positions, 1 << 20));
  embedding_sum_runs_kernel<<<blocks, threads, 0, stream>>>(dy, keys, positions, cols, rows,
                                                            dtable.data_as<float>());
  OCTET_CUDA_LAUNCH_CHECK("embedding_sum_runs_kernel");
}

}  // namespace

void CudaBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) const {
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

void CudaBackend::embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable) const {
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
