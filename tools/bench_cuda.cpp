// `octet bench gemm --device cuda`: bf16 against e4m3 x e4m3 GEMMs, as a Linear's forward runs
// them, timed by CUDA events on the octet stream.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/cuda.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "tools/bench_common.h"

#if OCTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace octet::bench::detail {
namespace {

#if OCTET_WITH_CUDA

void check_cuda(cudaError_t status, const char* call) {
  OCTET_CHECK(status == cudaSuccess, "bench: ", call, " failed: ", cudaGetErrorString(status));
}

struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using Event = std::unique_ptr<CUevent_st, EventDeleter>;

// Like measure(), but each run is timed on the device by the events around it on the octet
// stream: the GPU time of the run, launch gaps included, without the host's clock or a
// synchronize per run.
void measure_events(Result& r, const Options& o, const std::function<void()>& run) {
  cuda::DeviceGuard guard(o.device);  // events belong to the current device
  auto* stream = static_cast<cudaStream_t>(cuda::stream(o.device));
  // At least --warmup runs and, unless warm-up is off or shapes are quick, 0.2 s of them: an idle
  // GPU takes a while to reach its clocks, and a handful of millisecond GEMMs would time the
  // first precision (bf16) at lower clocks than the next.
  const double min_warmup_ms = o.warmup > 0 && !o.quick ? 200 : 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    const double elapsed =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i >= o.warmup && elapsed >= min_warmup_ms) break;
    run();
    cuda::synchronize(o.device);
  }
  reset_peak_memory(o.device);
  std::vector<Event> events;
  for (int i = 0; i <= o.reps; ++i) {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreate(&e), "cudaEventCreate");
    events.emplace_back(e);
  }
  for (int i = 0; i < o.reps; ++i) {
    check_cuda(cudaEventRecord(events[i].get(), stream), "cudaEventRecord");
    run();
  }
  check_cuda(cudaEventRecord(events[o.reps].get(), stream), "cudaEventRecord");
  cuda::synchronize(o.device);  // also raises a failed kernel's error here, named
  std::vector<double> times;
  for (int i = 0; i < o.reps; ++i) {
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, events[i].get(), events[i + 1].get()),
               "cudaEventElapsedTime");
    times.push_back(ms);
  }
  r.median_ms = median(times);
  r.peak_bytes = memory_stats(o.device).total_peak;
}

Tensor to_e4m3(const Tensor& x) {
  Tensor q = Tensor::empty(x.shape(), DType::kE4M3);
  // Scale 1 (scale_inv 1 in the GEMM): N(0, 1) values are well inside e4m3's range.
  ops::quantize_fp8(x, Tensor::from_floats({1.f}, {1}), &q, nullptr, nullptr);
  return q;
}

}  // namespace

void bench_gemm_cuda(const Options& o, const Emit& emit) {
  struct Case {
    std::string label;  // what the GEMM is in a GPT-2 layer, or empty
    int64_t m, n, k;
  };
  // The square one is the headline FP8/bf16 ratio; then the forward GEMMs of a GPT-2 layer
  // (d 768, ffn 3072) over 8192 tokens: QKV, attention projection, fc1, fc2.
  const std::vector<Case> cases = o.quick ? std::vector<Case>{{"", 256, 256, 256}}
                                          : std::vector<Case>{{"", 8192, 8192, 8192},
                                                              {"qkv", 8192, 2304, 768},
                                                              {"proj", 8192, 768, 768},
                                                              {"fc1", 8192, 3072, 768},
                                                              {"fc2", 8192, 768, 3072}};
  using ops::Transpose;
  const Device device = o.device;
  Generator gen(15);
  const Tensor one = Tensor::from_floats({1.f}, {1}).to(device);  // scale_inv of both operands
  for (const Case& c : cases) {
    const std::string name = "gemm." + (c.label.empty() ? "" : c.label + ".") +
                             std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                             std::to_string(c.k);
    const double flops = 2.0 * c.m * c.n * c.k;
    // Operands made on the CPU and copied over: one source for both precisions.
    Tensor a_bf16, b_bf16, a_fp8, b_fp8;
    {
      const Tensor a = random_tensor({c.m, c.k}, gen);  // (M, K)
      const Tensor b = random_tensor({c.n, c.k}, gen);  // (N, K)
      a_bf16 = ops::cast(a, DType::kBF16).to(device);
      b_bf16 = ops::cast(b, DType::kBF16).to(device);
      a_fp8 = to_e4m3(a).to(device);
      b_fp8 = to_e4m3(b).to(device);
    }
    // TN, as a Linear's forward: out (M, N) = a (M, K) · b (N, K)ᵀ, bf16 out.
    Tensor out = Tensor::empty({c.m, c.n}, DType::kBF16, device);
    Result bf16{name, Group::kGemm, "bf16", 0, flops, 0, 0, {}};
    measure_events(bf16, o,
                   [&] { ops::gemm(a_bf16, Transpose::kNo, b_bf16, Transpose::kYes, out); });
    emit(bf16);
    // Fast accumulation is what the forward GEMM uses (TE's default); split accumulation is what
    // dgrad and wgrad use, at the same shapes here for comparison.
    for (ops::FP8Accumulation acc : {ops::FP8Accumulation::kFast, ops::FP8Accumulation::kSplit}) {
      ops::GemmOptions options;
      options.a_scale_inv = &one;
      options.b_scale_inv = &one;
      options.fp8_accumulation = acc;
      const char* precision = acc == ops::FP8Accumulation::kFast ? "fp8" : "fp8.split";
      Result r{name, Group::kGemm, precision, 0, flops, 0, 0, {}};
      measure_events(
          r, o, [&] { ops::gemm(a_fp8, Transpose::kNo, b_fp8, Transpose::kYes, out, options); });
      r.speedup_vs_bf16 = bf16.median_ms / r.median_ms;
      emit(r);
    }
  }
  ops::release_workspace();
}

#else

}  // namespace

void bench_gemm_cuda(const Options& o, const Emit&) {
  OCTET_FAIL("bench: ", o.device, " requested but octet was built without CUDA");
}

#endif

}  // namespace octet::bench::detail
