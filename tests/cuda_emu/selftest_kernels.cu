// Kernels for the emulator's own tests (selftest.cpp): correct uses of the warp intrinsics,
// atomics and shared memory, and one kernel per class of GPU bug the emulator must report.
// Compiled only in the CUDA emulation build, through octet_cuda_translate like kernels/cuda.
#include <cuda_runtime.h>

#include <cstdint>

#include "tests/cuda_emu/selftest.h"

namespace octet::emu_test {
namespace {

// out[w * 8 + k] for warp w: the shuffle and vote results of lane 3 (k = 0..7).
__global__ void warp_intrinsics_kernel(int* out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int v = lane * 10;
  const int x = __shfl_xor_sync(0xffffffffu, v, 1);
  const int d = __shfl_down_sync(0xffffffffu, v, 2);
  const int u = __shfl_up_sync(0xffffffffu, v, 4);
  const int i = __shfl_sync(0xffffffffu, v, 7);
  const int seg = __shfl_sync(0xffffffffu, v, 1, 8);  // lane 1 of each group of 8
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 2 == 0);
  const int any = __any_sync(0xffffffffu, lane == 31);
  const int all = __all_sync(0xffffffffu, lane < 31);
  if (lane == 3) {
    int* o = out + warp * 8;
    o[0] = x;
    o[1] = d;
    o[2] = u;
    o[3] = i;
    o[4] = seg;
    o[5] = static_cast<int>(ballot);
    o[6] = any;
    o[7] = all;
  }
}

// A block tree sum through shared memory; out[blockIdx.x] = sum of in over the block.
__global__ void block_sum_kernel(const float* in, float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) s[threadIdx.x] += s[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void atomic_kernel(float* sum, unsigned* max, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomicAdd(sum, 1.f);
    atomicMax(max, static_cast<unsigned>(i));
  }
}

// Reads shared memory nobody wrote: the poison pattern.
__global__ void read_unwritten_shared_kernel(float* out, float* dyn_out) {
  __shared__ float s[32];
  extern __shared__ float dyn[];
  out[threadIdx.x] = s[threadIdx.x];
  dyn_out[threadIdx.x] = dyn[threadIdx.x];
}

// A missing __syncthreads: thread i reads what thread i + 1 writes.
__global__ void missing_barrier_kernel(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

__global__ void early_exit_then_barrier_kernel(float* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1.f;
}

__global__ void divergent_barriers_kernel(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.f;
}

__global__ void shuffle_with_exited_lane_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

__global__ void full_mask_in_partial_warp_kernel(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

__global__ void deadlock_kernel(float* out) {
  if (threadIdx.x < 16) __syncwarp();
  __syncthreads();
  out[threadIdx.x] = 1.f;
}

__global__ void write_kernel(float* out) { out[threadIdx.x] = 1.f; }

__global__ void dynamic_smem_overrun_kernel(float* out, int n) {
  extern __shared__ float dyn[];
  dyn[n + 4] = 1.f;  // past the n floats of the launch
  out[0] = dyn[0];
}

__global__ void big_smem_kernel(float* out) {
  extern __shared__ float dyn[];
  dyn[threadIdx.x] = 2.f;
  out[threadIdx.x] = dyn[threadIdx.x];
}

// out[i] = in[i] and bump[i] += 1 for i < n: pages of `in` read, of `out` written, of `bump` both.
__global__ void copy_and_bump_kernel(const float* in, float* out, float* bump, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i];
    bump[i] += 1.f;
  }
}

}  // namespace

void warp_intrinsics(int* out, int warps) { warp_intrinsics_kernel<<<1, 32 * warps>>>(out); }
void block_sum(const float* in, float* out, int blocks) {
  block_sum_kernel<<<blocks, 256>>>(in, out);
}
void atomics(float* sum, unsigned* max, int n) {
  atomic_kernel<<<(n + 127) / 128, 128>>>(sum, max, n);
}
void read_unwritten_shared(float* out, float* dyn_out) {
  read_unwritten_shared_kernel<<<1, 32, 32 * sizeof(float)>>>(out, dyn_out);
}
void missing_barrier(float* out) { missing_barrier_kernel<<<1, 64>>>(out); }
void early_exit_then_barrier(float* out) { early_exit_then_barrier_kernel<<<1, 64>>>(out); }
void divergent_barriers(float* out) { divergent_barriers_kernel<<<1, 64>>>(out); }
void shuffle_with_exited_lane(float* out) { shuffle_with_exited_lane_kernel<<<1, 32>>>(out); }
void full_mask_in_partial_warp(float* out) { full_mask_in_partial_warp_kernel<<<1, 48>>>(out); }
void deadlock(float* out) { deadlock_kernel<<<1, 64>>>(out); }
void write_with(float* out, int threads, int blocks) { write_kernel<<<blocks, threads>>>(out); }
void copy_and_bump(const float* in, float* out, float* bump, int n) {
  copy_and_bump_kernel<<<(n + 255) / 256, 256>>>(in, out, bump, n);
}
void copy_and_bump_on(cudaStream_t stream, const float* in, float* out, float* bump, int n) {
  copy_and_bump_kernel<<<(n + 255) / 256, 256, 0, stream>>>(in, out, bump, n);
}
void dynamic_smem_overrun(float* out) {
  dynamic_smem_overrun_kernel<<<1, 1, 64 * sizeof(float)>>>(out, 64);
}
cudaError_t big_smem(float* out, size_t bytes, bool opt_in) {
  if (opt_in) {
    const cudaError_t e = cudaFuncSetAttribute(
        big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
  }
  big_smem_kernel<<<1, 32, bytes>>>(out);
  return cudaGetLastError();
}

}  // namespace octet::emu_test
