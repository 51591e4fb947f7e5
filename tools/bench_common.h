// The types `octet bench` shares between its CPU benches (tools/bench.cpp) and its CUDA GEMM
// bench (tools/bench_cuda.cpp): options, one result row, and the small helpers both use.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modules/gpt.h"
#include "runtime/device.h"
#include "runtime/device_traffic.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace octet::bench::detail {

enum class Group : uint8_t { kGemm, kBlock, kLayer, kModel, kGenerate };

// The shape flags of the layer and model benches; 0 takes the bench's default for the device
// (and --quick). layers and vocab are the model's only.
struct LayerShape {
  int64_t d_model = 0, heads = 0, seq = 0, batch = 0;
  int64_t layers = 0, vocab = 0;
};

// A shape flag's value, else the bench's default for --quick, the CPU or CUDA.
struct ShapeDefaults {
  int64_t quick, cpu, gpu;
};
struct Options;
int64_t shape_value(const Options& o, int64_t flag, ShapeDefaults defaults);

struct Options {
  std::vector<Group> groups;
  bool json = false;
  bool quick = false;
  int reps = 9;
  int warmup = 2;
  Device device = Device::cpu();
  std::vector<std::string> precisions;  // --precision; empty: every precision
  LayerShape layer;
  bool traffic = false;     // --traffic: record one step's device traffic instead of timing
  bool cuda_graphs = true;  // model on cuda: the step captured once and replayed (--no-cuda-graphs)
  TrafficRates rates;       // the traffic model's constants
  std::string data;         // --data: the model bench's tokens from this llm.c shard (else random)
  double peak_tflops = 0;   // --peak-tflops: MFU's denominator; 0: the device's default, if any
};

struct Result {
  std::string bench;
  Group group;
  std::string precision;
  double median_ms = 0;
  double flops = 0;
  int64_t tokens = 0;  // 0: not a token-processing bench (a bare GEMM)
  int64_t peak_bytes = 0;
  std::optional<double> speedup_vs_bf16;  // CUDA FP8 GEMMs: bf16 time / this time
  std::optional<DeviceTraffic> traffic;   // --traffic: median_ms is then the predicted time
  int64_t params = 0;                     // model: the parameter count
  std::optional<double> floor_bytes;      // --traffic: the fused design's non-GEMM bytes
  double gflops() const { return flops / (median_ms * 1e6); }
  double tokens_per_s() const { return tokens / (median_ms * 1e-3); }
};

using Emit = std::function<void(const Result&)>;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// N(0, std) f32 values on the CPU.
inline Tensor random_tensor(const Shape& shape, Generator& gen, float std = 1.f) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  gen.fill_normal(t, 0.f, std);
  return t;
}

// Warm-up runs, then o.reps timed runs of `run` (their median into r.median_ms, the device's
// peak bytes into r.peak_bytes), or with --traffic one recorded run (tools/bench.cpp).
void measure(Result& r, const Options& o, const std::function<void()>& run);

// The model bench's GPT and batch: the shape flags, else the device's default (GPT-2 124M on
// CUDA) or --quick's.
struct ModelSetup {
  modules::GPTConfig config;
  int64_t batch = 0, seq = 0;
};
ModelSetup model_setup(const Options& o);

// Training FLOPs per token of a GPT-2-architecture model with `params` parameters in all: 6 per
// parameter a token multiplies (all but the position embedding, whose rows are only added; the
// tied token embedding counts once, as the LM head), plus the attention scores and weighted sum
// counted dense, 2 GEMMs of 2 T d a token and layer forward, backward twice that: 12 L d T.
// bench/torch_gpt2.py counts the same way.
double model_flops_per_token(const modules::GPTConfig& config, int64_t params);

// The peak MFU is taken against: --peak-tflops, else 989 on CUDA (Hopper's dense bf16 peak,
// SXM parts), else 0 (no MFU on the CPU unless given).
double peak_tflops(const Options& o);

// One GPT training step per precision: forward, loss, backward, AdamW (tools/bench_model.cpp).
void bench_model(const Options& o, const Emit& emit,
                 const std::vector<std::pair<std::string, std::optional<Recipe>>>& precisions);

// Milliseconds per generated token at two positions (tools/bench_generate.cpp), for each
// (precision name, recipe).
void bench_generate(const Options& o, const Emit& emit,
                    const std::vector<std::pair<std::string, std::optional<Recipe>>>& precisions);

// One step's traffic as rows of text, and as JSON (tools/bench_traffic.cpp), with the fused
// design's non-GEMM bytes where known (layer_step_floor_bytes).
void print_traffic(std::ostream& out, const DeviceTraffic& traffic, const TrafficRates& rates,
                   std::optional<double> floor_bytes);
nlohmann::json traffic_json(const DeviceTraffic& traffic, const TrafficRates& rates,
                            std::optional<double> floor_bytes);

// bf16 against e4m3 x e4m3 GEMMs on CUDA, CUDA-event timed (tools/bench_cuda.cpp).
void bench_gemm_cuda(const Options& o, const Emit& emit);

}  // namespace octet::bench::detail
