// The CUDA emulator's own tests: the intrinsics compute what CUDA defines, and each class of GPU
// bug it exists to catch is reported (a death test per class, matching the report's words).
#include "tests/cuda_emu/selftest.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

namespace octet::emu_test {
namespace {

template <typename T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(CudaEmulator, ReportsOneDevice) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaEmulator, WarpIntrinsicsFollowCuda) {
  int* d = device_alloc<int>(16);
  warp_intrinsics(d, 2);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> h = to_host(d, 16);
  for (int w = 0; w < 2; ++w) {
    const int* o = &h[w * 8];
    EXPECT_EQ(o[0], 20);  // lane 3 ^ 1 = 2
    EXPECT_EQ(o[1], 50);  // lane 3 + 2
    EXPECT_EQ(o[2], 30);  // lane 3 - 4 < 0: own value
    EXPECT_EQ(o[3], 70);
    EXPECT_EQ(o[4], 10);  // lane 1 of lanes 0..7
    EXPECT_EQ(static_cast<unsigned>(o[5]), 0x55555555u);
    EXPECT_EQ(o[6], 1);
    EXPECT_EQ(o[7], 0);
  }
  cudaFree(d);
}

TEST(CudaEmulator, BlockSumAndAtomics) {
  constexpr int kBlocks = 3;
  std::vector<float> in(kBlocks * 256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7);
  float* din = device_alloc<float>(in.size());
  float* dout = device_alloc<float>(kBlocks);
  ASSERT_EQ(cudaMemcpy(din, in.data(), in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  block_sum(din, dout, kBlocks);
  const std::vector<float> out = to_host(dout, kBlocks);
  for (int b = 0; b < kBlocks; ++b) {
    float want = 0;
    for (int i = 0; i < 256; ++i) want += in[b * 256 + i];
    EXPECT_EQ(out[b], want);
  }
  float* sum = device_alloc<float>(1);
  unsigned* max = device_alloc<unsigned>(1);
  ASSERT_EQ(cudaMemset(sum, 0, 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(max, 0, 4), cudaSuccess);
  atomics(sum, max, 1000);
  EXPECT_EQ(to_host(sum, 1)[0], 1000.f);
  EXPECT_EQ(to_host(max, 1)[0], 999u);
}

TEST(CudaEmulator, UnwrittenSharedMemoryReadsAsPoison) {
  float* a = device_alloc<float>(32);
  float* b = device_alloc<float>(32);
  read_unwritten_shared(a, b);
  for (float v : to_host(a, 32)) EXPECT_TRUE(std::isnan(v) || std::fabs(v) > 1e30f) << v;
  for (float v : to_host(b, 32)) EXPECT_TRUE(std::isnan(v) || std::fabs(v) > 1e30f) << v;
}

TEST(CudaEmulator, MissingBarrierShowsUpAsPoison) {
  float* d = device_alloc<float>(64);
  missing_barrier(d);
  int poisoned = 0;
  for (float v : to_host(d, 64)) poisoned += std::isnan(v) || std::fabs(v) > 1e30f;
  EXPECT_GT(poisoned, 0) << "a read before the writer ran must see the poison";
}

TEST(CudaEmulator, BadConfigurationsSetTheRuntimeError) {
  float* d = device_alloc<float>(4096);
  write_with(d, 2048, 1);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  write_with(d, 32, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // Dynamic shared memory above 48 KiB needs the kernel's opt-in.
  EXPECT_EQ(big_smem(d, 64 << 10, false), cudaErrorInvalidValue);
  EXPECT_EQ(big_smem(d, 64 << 10, true), cudaSuccess);
  EXPECT_EQ(to_host(d, 1)[0], 2.f);
  EXPECT_EQ(big_smem(d, 300 << 10, true), cudaErrorInvalidValue);
}

TEST(CudaEmulator, CopiesCheckDirectionAndBounds) {
  float* d = device_alloc<float>(4);
  std::vector<float> h(8, 1.f), h2(8);
  EXPECT_EQ(cudaMemcpy(h2.data(), h.data(), 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 32, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 16, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(cudaMemset(h.data(), 0, 16), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

using CudaEmulatorDeathTest = ::testing::Test;

TEST(CudaEmulatorDeathTest, BarrierAfterEarlyExit) {
  float* d = device_alloc<float>(64);
  EXPECT_DEATH(early_exit_then_barrier(d), "exited");
}

TEST(CudaEmulatorDeathTest, DivergentBarriers) {
  float* d = device_alloc<float>(64);
  EXPECT_DEATH(divergent_barriers(d), "divergent barriers");
}

TEST(CudaEmulatorDeathTest, ShuffleWaitingForAnExitedLane) {
  float* d = device_alloc<float>(32);
  EXPECT_DEATH(shuffle_with_exited_lane(d), "exited");
}

TEST(CudaEmulatorDeathTest, FullMaskInAPartialWarp) {
  float* d = device_alloc<float>(48);
  EXPECT_DEATH(full_mask_in_partial_warp(d), "do not exist");
}

TEST(CudaEmulatorDeathTest, Deadlock) {
  float* d = device_alloc<float>(64);
  EXPECT_DEATH(deadlock(d), "deadlock");
}

TEST(CudaEmulatorDeathTest, HostPointerAsKernelArgument) {
  std::vector<float> h(64);
  EXPECT_DEATH(write_with(h.data(), 64, 1), "host pointer");
}

TEST(CudaEmulatorDeathTest, HostDereferencesDeviceMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "device memory is host memory under AddressSanitizer (OCTET_EMU_MALLOC)";
#endif
  if (const char* p = std::getenv("OCTET_EMU_PROTECT"); p != nullptr && p[0] == '0') {
    GTEST_SKIP() << "OCTET_EMU_PROTECT=0";
  }
  float* d = device_alloc<float>(4);
  EXPECT_DEATH(d[1] = 1.f, "host code accessed device memory");
}

TEST(CudaEmulatorDeathTest, DynamicSharedMemoryOverrun) {
  float* d = device_alloc<float>(4);
  EXPECT_DEATH(dynamic_smem_overrun(d),
               "past the end of the launch.s 256 bytes of dynamic shared memory");
}

}  // namespace
}  // namespace octet::emu_test
