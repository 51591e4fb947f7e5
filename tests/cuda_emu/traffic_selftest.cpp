// The emulator's traffic recorder (octet_cuda_emu/traffic.h): a launch counts the distinct 4 KiB
// pages it read and wrote, copies and memsets their exact bytes, and nothing is recorded while
// the recorder is off.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "octet_cuda_emu/traffic.h"
#include "tests/cuda_emu/selftest.h"

namespace octet::emu_test {
namespace {

constexpr int64_t kPage = 4096;

float* device_floats(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  return static_cast<float*>(p);
}

TEST(CudaEmulatorTraffic, LaunchCountsDistinctPagesReadAndWritten) {
  if (!emu::traffic_supported()) GTEST_SKIP() << "page tracking needs x86-64 and protected memory";
  // 3 pages and 20 bytes of floats: 4 pages each; cudaMalloc blocks start on a page.
  const int n = 3 * 1024 + 5;
  float* in = device_floats(n);
  float* out = device_floats(n);
  float* bump = device_floats(n);
  std::vector<float> ones(n, 1.f);
  ASSERT_EQ(cudaMemcpy(in, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(bump, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);

  emu::start_traffic();
  copy_and_bump(in, out, bump, n);
  copy_and_bump(in, out, bump, 1000);  // the first page of each only
  const emu::Traffic t = emu::stop_traffic();
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);

  ASSERT_EQ(t.kernels.size(), 1u);
  EXPECT_EQ(t.kernels[0].kernel, "copy_and_bump_kernel");
  EXPECT_EQ(t.kernels[0].launches, 2);
  EXPECT_EQ(t.launches, 2);
  // Launch 1: in and bump read (4 + 4 pages), out and bump written (4 + 4); launch 2: 1 + 1 each.
  EXPECT_EQ(t.kernels[0].bytes_read, (8 + 2) * kPage);
  EXPECT_EQ(t.kernels[0].bytes_written, (8 + 2) * kPage);
  EXPECT_EQ(t.gemm_calls, 0);
  EXPECT_EQ(t.copy_device_bytes + t.copy_host_bytes + t.memset_bytes, 0);

  // The kernel's results are the same as untracked: out = 1, bump = 1 + 2 below 1000, else 2.
  std::vector<float> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), bump, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got[0], 3.f);
  EXPECT_EQ(got[999], 3.f);
  EXPECT_EQ(got[1000], 2.f);
  EXPECT_EQ(got[n - 1], 2.f);
  ASSERT_EQ(cudaMemcpy(got.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got[n - 1], 1.f);
  for (float* p : {in, out, bump}) cudaFree(p);
}

TEST(CudaEmulatorTraffic, CopiesAndMemsetsCountTheirBytes) {
  float* a = device_floats(1000);
  float* b = device_floats(1000);
  std::vector<float> host(1000, 2.f);
  emu::start_traffic();
  ASSERT_EQ(cudaMemcpy(a, host.data(), 4000, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b, a, 1000, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(b, 0, 123), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), b, 40, cudaMemcpyDeviceToHost), cudaSuccess);
  const emu::Traffic t = emu::stop_traffic();
  EXPECT_EQ(t.copy_host_bytes, 4000 + 40);
  EXPECT_EQ(t.copy_device_bytes, 2 * 1000);  // read and written
  EXPECT_EQ(t.memset_bytes, 123);
  EXPECT_EQ(t.launches, 0);
  cudaFree(a);
  cudaFree(b);
}

TEST(CudaEmulatorTraffic, NothingIsRecordedWhileOff) {
  float* a = device_floats(64);
  float* b = device_floats(64);
  float* c = device_floats(64);
  emu::start_traffic();
  const emu::Traffic before = emu::stop_traffic();
  copy_and_bump(a, b, c, 64);
  ASSERT_EQ(cudaMemset(a, 0, 64), cudaSuccess);
  emu::start_traffic();
  const emu::Traffic t = emu::stop_traffic();
  EXPECT_EQ(before.launches + t.launches, 0);
  EXPECT_TRUE(t.kernels.empty());
  EXPECT_EQ(t.memset_bytes, 0);
  for (float* p : {a, b, c}) cudaFree(p);
}

}  // namespace
}  // namespace octet::emu_test
