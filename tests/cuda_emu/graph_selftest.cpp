// The emulator's stream capture and graphs (graph.cpp): a capture records launches, copies and
// memsets without running them, a graph replays them with the arguments of the capture, and the
// calls CUDA refuses during a capture invalidate it with CUDA's errors.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/cuda_emu/selftest.h"

namespace octet::emu_test {
namespace {

constexpr int kN = 300;  // two blocks of copy_and_bump

struct Buffers {
  float* in = nullptr;
  float* out = nullptr;
  float* bump = nullptr;
  Buffers() {
    for (float** p : {&in, &out, &bump}) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(p), kN * sizeof(float)), cudaSuccess);
    }
    std::vector<float> v(kN);
    for (int i = 0; i < kN; ++i) v[i] = static_cast<float>(i);
    EXPECT_EQ(cudaMemcpy(in, v.data(), kN * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemset(bump, 0, kN * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemset(out, 0, kN * sizeof(float)), cudaSuccess);
  }
  ~Buffers() {
    for (float* p : {in, out, bump}) cudaFree(p);
  }
  std::vector<float> read(const float* p) const {
    std::vector<float> v(kN);
    EXPECT_EQ(cudaMemcpy(v.data(), p, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
  return s;
}

TEST(CudaEmulatorGraph, CaptureRecordsAndEachLaunchReplays) {
  Buffers b;
  cudaStream_t s = new_stream();
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  copy_and_bump_on(s, b.in, b.out, b.bump, kN);
  // A device-to-device copy and a memset on the capturing stream are nodes too.
  ASSERT_EQ(cudaMemcpyAsync(b.in, b.bump, kN * sizeof(float), cudaMemcpyDeviceToDevice, s),
            cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(b.out + kN - 1, 0, sizeof(float), s), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_NE(graph, nullptr);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 3u);
  // Nothing ran during the capture.
  EXPECT_EQ(b.read(b.bump), std::vector<float>(kN, 0.f));
  EXPECT_EQ(b.read(b.out), std::vector<float>(kN, 0.f));

  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);  // the instance keeps its own nodes
  for (int replay = 1; replay <= 3; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    // Each replay: out = in, bump += 1, then in = bump, out[last] = 0.
    const std::vector<float> bump = b.read(b.bump), out = b.read(b.out), in = b.read(b.in);
    EXPECT_EQ(bump[0], static_cast<float>(replay));
    EXPECT_EQ(in[kN - 2], static_cast<float>(replay));
    EXPECT_EQ(out[5], replay == 1 ? 5.f : static_cast<float>(replay - 1));
    EXPECT_EQ(out[kN - 1], 0.f);
  }
  ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaEmulatorGraph, AHostCopyNodeReadsTheHostMemoryAtEachReplay) {
  Buffers b;
  cudaStream_t s = new_stream();
  std::vector<float> host(kN, 1.f);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b.out, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, s),
            cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(b.read(b.out)[0], 0.f);
  host[0] = 7.f;
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(b.read(b.out)[0], 7.f);
  EXPECT_EQ(b.read(b.out)[1], 1.f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// Ends the capture of `s`, expecting it invalidated with no graph.
void expect_invalidated(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(0x1);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  (void)cudaGetLastError();
}

TEST(CudaEmulatorGraph, RefusedCallsInvalidateTheCapture) {
  Buffers b;
  cudaStream_t s = new_stream();

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s);

  // The legacy stream while the blocking stream captures.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaMemset(b.out, 0, sizeof(float)), cudaErrorStreamCaptureImplicit);
  expect_invalidated(s);

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s);

  // Nothing of the invalidated captures ran or stayed queued; the stream works again.
  EXPECT_EQ(b.read(b.in)[3], 3.f);
  copy_and_bump_on(s, b.in, b.out, b.bump, kN);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(b.read(b.bump)[7], 1.f);

  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);  // not capturing
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeRelaxed),
            cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(CudaEmulatorGraph, AReplayIntoFreedMemoryIsReported) {
  cudaStream_t s = new_stream();
  auto* b = new Buffers;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  copy_and_bump_on(s, b->in, b->out, b->bump, kN);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  delete b;  // the graph's arguments now point into freed memory
  EXPECT_DEATH(cudaGraphLaunch(exec, s), "freed");
}

}  // namespace
}  // namespace octet::emu_test
