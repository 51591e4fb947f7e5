// Launchers of the emulator's self-test kernels (selftest_kernels.cu); pointers are device
// memory unless the test is about the opposite.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace octet::emu_test {

void warp_intrinsics(int* out, int warps);  // out (warps * 8,)
void block_sum(const float* in, float* out, int blocks);
void atomics(float* sum, unsigned* max, int n);
void read_unwritten_shared(float* out, float* dyn_out);  // (32,) each
void missing_barrier(float* out);                        // (64,)
void early_exit_then_barrier(float* out);                // (64,)
void divergent_barriers(float* out);                     // (64,)
void shuffle_with_exited_lane(float* out);               // (32,)
void full_mask_in_partial_warp(float* out);              // (48,)
void deadlock(float* out);                               // (64,)
void write_with(float* out, int threads, int blocks);
void copy_and_bump(const float* in, float* out, float* bump, int n);  // (n,) each
void copy_and_bump_on(cudaStream_t stream, const float* in, float* out, float* bump, int n);
void dynamic_smem_overrun(float* out);
cudaError_t big_smem(float* out, size_t bytes, bool opt_in);  // out (32,)

}  // namespace octet::emu_test
