// `octet bench`: timings of high precision against each FP8 recipe at four sizes of work: single
// GEMMs, a LayerNormMLP forward+backward, a TransformerLayer training step and a GPT training step
// (tools/bench_model.cpp). On the CPU (f32) all four; on CUDA (bf16) the GEMMs, the layer step and
// the model.
#include "tools/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/layernorm_mlp.h"
#include "modules/optimizer.h"
#include "runtime/cuda.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/fp8_meta.h"
#include "runtime/memory.h"
#include "runtime/named.h"
#include "runtime/parallel.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"
#include "tools/bench_common.h"
#include "tools/number_args.h"

#if OCTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace octet::bench {

namespace detail {
namespace {

// Waits for the work queued on a CUDA device, so that a host clock read after it covers that
// work; nothing to wait for on the CPU.
void wait_for(Device device) {
  if (device.is_cuda()) cuda::synchronize(device);
}

}  // namespace

// Warm-up runs (first-touch allocations, GEMM workspaces, delayed scales settling), then the
// timed runs, each a wall-clock time that ends once the device has finished the run. The peak is
// the highest total of live bytes on the bench's device during the timed runs, so it includes
// what the bench holds throughout (weights, optimizer state, operands).
void measure(Result& r, const Options& o, const std::function<void()>& run) {
  for (int i = 0; i < o.warmup; ++i) run();
  if (o.traffic) {
    // One step after the warm-up (FP8 state, caches and workspaces settled), recorded.
    wait_for(o.device);
    TrafficRecording recording;
    run();
    wait_for(o.device);
    r.traffic = recording.stop();
    r.median_ms = predicted_ms(*r.traffic, o.rates);
    return;
  }
  wait_for(o.device);
  reset_peak_memory(o.device);
  std::vector<double> times;
  for (int i = 0; i < o.reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    wait_for(o.device);
    const auto t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  r.median_ms = median(times);
  r.peak_bytes = memory_stats(o.device).total_peak;
}

}  // namespace detail

namespace {

using namespace detail;  // NOLINT: the bench's shared types (tools/bench_common.h)

constexpr const char* kUsage =
    "usage: octet bench [gemm|layer|block|model|generate ...] [--json] [--reps N] [--warmup N]\n"
    "                   [--quick]\n"
    "                   [--threads N] [--device cpu|cuda|cuda:N] [--precision NAME[,NAME...]]\n"
    "                   [--d-model N] [--heads N] [--seq N] [--batch N] [--layers N]\n"
    "                   [--vocab N] [--data SHARD] [--peak-tflops X]\n"
    "  gemm    FP8 GEMMs (fprop, dgrad, wgrad) on quantized operands and the f32 GEMM\n"
    "  block   LayerNormMLP forward + backward (d 768, ffn 3072, 1024 tokens)\n"
    "  layer   TransformerLayer training step: forward, backward, AdamW (d 768, 12 heads,\n"
    "          seq 256, batch 4)\n"
    "  model   GPT-2 training step: forward, loss, backward, AdamW (2 layers, d 128, 4 heads,\n"
    "          vocab 256, seq 128, batch 8; on cuda 12 layers, d 768, 12 heads, vocab 50304,\n"
    "          seq 1024, batch 8), on random tokens or --data's\n"
    "  generate  ms per generated token of a GPT-2 124M-shaped model (12 layers, d 768, vocab\n"
    "          50304, context 1024) at positions 128 and 1024 with the key/value cache, and at\n"
    "          128 re-running the window per token (at most 3 runs each)\n"
    "  no group: the first four. Each runs in f32 and under the delayed, current, mxfp8,\n"
    "  blockwise, nvfp4 and rowwise recipes and nvfp4's quartet2 method.\n"
    "  --json     one JSON array on stdout instead of the table\n"
    "  --reps N   timed runs per result (median reported; default 9, cuda 20, --quick 1)\n"
    "  --warmup N untimed runs first (default 2, cuda 5, --quick 1)\n"
    "  --quick    small shapes, for smoke tests: numbers are not comparable with full runs\n"
    "  --threads N  worker threads (default: the runtime's)\n"
    "  --device D   where to run (default cpu). On cuda, groups gemm and layer (the default)\n"
    "               and model:\n"
    "               gemm: e4m3 x e4m3 (fast and split accumulation) against bf16, TN, bf16 out,\n"
    "               at 8192x8192x8192 and GPT-2 layer shapes over 8192 tokens, CUDA-event timed;\n"
    "               layer: d 4096, 32 heads, seq 2048, batch 2, bf16 parameters and activations,\n"
    "               in bf16 and under each recipe; peak is device memory; model: bf16\n"
    "               parameters and activations as layer\n"
    "  --precision  run only these of f32 (bf16 on cuda), delayed, current, mxfp8, blockwise,\n"
    "               nvfp4, quartet2, rowwise\n"
    "               (not for cuda gemm, which always runs bf16 and fp8)\n"
    "  --d-model N, --heads N, --seq N, --batch N  the layer and model benches' shape;\n"
    "  --layers N, --vocab N  the model's too\n"
    "  --data SHARD  model: tokens from this llm.c shard (the first 4 batches' worth, each\n"
    "               batch's targets shifted by one; ids below --vocab), else random ones\n"
    "  --peak-tflops X  the peak MFU is taken against (default on cuda 989, the dense bf16 peak\n"
    "               of Hopper SXM parts; on the CPU no MFU unless given). Model FLOPs a token:\n"
    "               6 x the parameters but the position embedding + 12 x layers x d x seq\n"
    "  --no-cuda-graphs  model on cuda: launch every kernel of every step (by default the step\n"
    "               is captured once as a CUDA graph and replayed, as octet train does, except\n"
    "               for recipes with host random streams: NVFP4's stochastic rounding, quartet2)\n"
    "  --traffic    (cuda, layer; the CUDA emulation build) instead of timing, record one step's\n"
    "               device traffic: launches, bytes by kernel (4 KiB pages), GEMM FLOPs, and the\n"
    "               time predicted from them with --bf16-tflops X --fp8-tflops X (defaults 730,\n"
    "               1350), --bandwidth-gbs X (4800) and --launch-us X (4) (docs/cuda.md); use a\n"
    "               small shape (--quick, or the shape flags)\n";

// The groups a bare `octet bench` runs; `generate` runs only when named.
constexpr Group kAllGroups[] = {Group::kGemm, Group::kBlock, Group::kLayer, Group::kModel};
// Every group, by the name the command line gives it.
constexpr Named<Group> kGroups[] = {{Group::kGemm, "gemm"},
                                    {Group::kBlock, "block"},
                                    {Group::kLayer, "layer"},
                                    {Group::kModel, "model"},
                                    {Group::kGenerate, "generate"}};
const char* group_name(Group g) { return name_in(kGroups, g).data(); }

// The number after the option args[i] (i then points at it).
const std::string& option_value(const std::vector<std::string>& args, size_t& i) {
  OCTET_CHECK(i + 1 < args.size(), "bench: ", args[i], " needs a number");
  return args[++i];
}
int parse_count(const std::vector<std::string>& args, size_t& i, int min) {
  const std::string& text = option_value(args, i);
  const int64_t v = cli::parse_int(text, "bench: " + args[i - 1], min);
  OCTET_CHECK(v <= std::numeric_limits<int>::max(), "bench: ", args[i - 1], " ", v,
              " is too large");
  return static_cast<int>(v);
}
// A positive number after a traffic-model flag.
double parse_rate(const std::vector<std::string>& args, size_t& i) {
  const std::string& text = option_value(args, i);
  return cli::parse_double(text, "bench: " + args[i - 1], /*positive=*/true);
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    if (end > begin) names.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return names;
}

std::vector<std::string> precision_names(Device device);

// Which counts the command line set, so that the device's and --quick's defaults leave them be.
struct CountsSet {
  bool reps = false;
  bool warmup = false;
};

// Adds the group `a` names to o.groups (once); false when `a` names no group.
bool take_group(Options& o, const std::string& a) {
  const Group* g = find_named(kGroups, a);
  if (g != nullptr && std::find(o.groups.begin(), o.groups.end(), *g) == o.groups.end()) {
    o.groups.push_back(*g);
  }
  return g != nullptr;
}

// Reads the option args[i], and its value when it takes one (i then points at the value); false
// when it is --help.
bool take_option(Options& o, const std::vector<std::string>& args, size_t& i, CountsSet& set) {
  const std::string& a = args[i];
  if (a == "--json") {
    o.json = true;
  } else if (a == "--quick") {
    o.quick = true;
  } else if (a == "--reps") {
    o.reps = parse_count(args, i, 1);
    set.reps = true;
  } else if (a == "--warmup") {
    o.warmup = parse_count(args, i, 0);
    set.warmup = true;
  } else if (a == "--threads") {
    set_num_threads(parse_count(args, i, 1));
  } else if (a == "--device") {
    OCTET_CHECK(i + 1 < args.size(), "bench: --device needs a device (cpu, cuda or cuda:N)");
    o.device = parse_device(args[++i]);
  } else if (a == "--precision") {
    OCTET_CHECK(i + 1 < args.size(), "bench: --precision needs a name");
    o.precisions = split_names(args[++i]);
    OCTET_CHECK(!o.precisions.empty(), "bench: --precision needs a name");
  } else if (a == "--d-model") {
    o.layer.d_model = parse_count(args, i, 1);
  } else if (a == "--heads") {
    o.layer.heads = parse_count(args, i, 1);
  } else if (a == "--seq") {
    o.layer.seq = parse_count(args, i, 1);
  } else if (a == "--batch") {
    o.layer.batch = parse_count(args, i, 1);
  } else if (a == "--layers") {
    o.layer.layers = parse_count(args, i, 1);
  } else if (a == "--vocab") {
    o.layer.vocab = parse_count(args, i, 1);
  } else if (a == "--data") {
    OCTET_CHECK(i + 1 < args.size(), "bench: --data needs an llm.c token shard's path");
    o.data = args[++i];
  } else if (a == "--peak-tflops") {
    o.peak_tflops = parse_rate(args, i);
  } else if (a == "--no-cuda-graphs") {
    o.cuda_graphs = false;
  } else if (a == "--traffic") {
    o.traffic = true;
  } else if (a == "--bf16-tflops") {
    o.rates.bf16_tflops = parse_rate(args, i);
  } else if (a == "--fp8-tflops") {
    o.rates.fp8_tflops = parse_rate(args, i);
  } else if (a == "--bandwidth-gbs") {
    o.rates.bandwidth_gbs = parse_rate(args, i);
  } else if (a == "--launch-us") {
    o.rates.launch_us = parse_rate(args, i);
  } else if (a == "--help" || a == "-h") {
    return false;
  } else {
    OCTET_FAIL("bench: unknown argument '", a,
               "' (expected gemm, block, layer, model, --json, --reps N, --warmup N, --quick, "
               "--threads N, --device D, --precision NAMES, --d-model N, --heads N, --seq N, "
               "--batch N, --layers N, --vocab N, --data SHARD, --peak-tflops X, --no-cuda-graphs, "
               "--traffic, "
               "--bf16-tflops X, --fp8-tflops X, --bandwidth-gbs X, --launch-us X)");
  }
  return true;
}

// The CUDA benches are the GEMMs, the layer step and the model step (when named); block and
// generate run on the CPU only.
void apply_cuda_defaults(Options& o, const CountsSet& set) {
  for (Group g : o.groups) {
    OCTET_CHECK(g == Group::kGemm || g == Group::kLayer || g == Group::kModel,
                "bench: ", group_name(g), " runs on the CPU only (on ", o.device,
                ": gemm, layer and model)");
  }
  if (o.traffic) {
    for (Group g : o.groups) {
      OCTET_CHECK(g == Group::kLayer, "bench: --traffic records the layer step only, not ",
                  group_name(g));
    }
    o.groups = {Group::kLayer};
  }
  if (o.groups.empty()) o.groups = {Group::kGemm, Group::kLayer};
  // GEMMs of a millisecond or less: more runs for a steady median, and clocks that settle.
  if (!set.reps) o.reps = 20;
  if (!set.warmup) o.warmup = 5;
}

void check_precisions(const Options& o) {
  const std::vector<std::string> known = precision_names(o.device);
  for (const std::string& name : o.precisions) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      OCTET_FAIL("bench: unknown precision '", name, "' (on ", o.device, ": ", list, ")");
    }
  }
}

// Returns nullopt when --help was asked for.
std::optional<Options> parse_options(const std::vector<std::string>& args) {
  Options o;
  CountsSet set;
  for (size_t i = 0; i < args.size(); ++i) {
    if (take_group(o, args[i])) continue;
    if (!take_option(o, args, i, set)) return std::nullopt;
  }
  // Before anything else is judged: without a usable device nothing else matters.
  require_device(o.device);
  OCTET_CHECK(!o.traffic || o.device.is_cuda(),
              "bench: --traffic records device traffic: it needs --device cuda");
  OCTET_CHECK(!o.traffic || device_traffic_available(),
              "bench: --traffic needs the CUDA emulation build (build-emu), which records each "
              "launch's device traffic; this build cannot");
  if (o.device.is_cuda()) apply_cuda_defaults(o, set);
  check_precisions(o);
  if (o.groups.empty()) o.groups.assign(std::begin(kAllGroups), std::end(kAllGroups));
  if (o.quick && !set.reps) o.reps = 1;
  if (o.quick && !set.warmup) o.warmup = 1;
  return o;
}

// High precision (f32 on the CPU, bf16 on CUDA), then one entry per FP8 recipe; hybrid (e5m2
// gradients) is TE's default for per-tensor scaling.
struct Precision {
  std::string name;
  std::optional<Recipe> recipe;
};
std::vector<Precision> all_precisions(Device device) {
  std::vector<Precision> out = {{device.is_cuda() ? "bf16" : "f32", std::nullopt},
                                {"delayed", Recipe::delayed(FP8Format::kHybrid)},
                                {"current", Recipe::current(FP8Format::kHybrid)},
                                {"mxfp8", Recipe::mxfp8()},
                                {"blockwise", Recipe::blockwise()},
                                {"nvfp4", Recipe::nvfp4()},
                                {"quartet2", Recipe::nvfp4_quartet2()},
                                {"rowwise", Recipe::rowwise()}};
  return out;
}
std::vector<std::string> precision_names(Device device) {
  std::vector<std::string> names;
  for (const Precision& p : all_precisions(device)) names.push_back(p.name);
  return names;
}
// The precisions to run, in the table's order: all, or those --precision names.
std::vector<Precision> precisions(const Options& o) {
  std::vector<Precision> chosen;
  for (Precision& p : all_precisions(o.device)) {
    if (o.precisions.empty() ||
        std::find(o.precisions.begin(), o.precisions.end(), p.name) != o.precisions.end()) {
      chosen.push_back(std::move(p));
    }
  }
  return chosen;
}

// ---- gemm: Y (M, N) = X (M, K) · W (N, K)ᵀ and its two backward GEMMs ----

using ops::GemmLayout;
using ops::Transpose;

struct Mnk {
  int64_t m, n, k;
};

// The operands of one shape's GEMMs, drawn from the generator in this order.
struct GemmOperands {
  Tensor x;   // (M, K)
  Tensor w;   // (N, K)
  Tensor dy;  // (M, N)
};

std::string gemm_result_name(GemmLayout layout, const Mnk& s) {
  return std::string("gemm.") + std::string(ops::gemm_layout_name(layout)) + "." +
         std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

// fprop: Y = X·Wᵀ (M, N); dgrad: dX = dY·W (M, K); wgrad: dW = dYᵀ·X (N, K).
Shape gemm_out_shape(GemmLayout layout, const Mnk& s) {
  return layout == GemmLayout::kFprop   ? Shape{s.m, s.n}
         : layout == GemmLayout::kDgrad ? Shape{s.m, s.k}
                                        : Shape{s.n, s.k};
}

void time_f32_gemm(Result& r, const Options& o, GemmLayout layout, const GemmOperands& t,
                   Tensor& out) {
  const Tensor& a = layout == GemmLayout::kFprop ? t.x : t.dy;
  const Tensor& b = layout == GemmLayout::kWgrad ? t.x : t.w;
  const Transpose ta = layout == GemmLayout::kWgrad ? Transpose::kYes : Transpose::kNo;
  const Transpose tb = layout == GemmLayout::kFprop ? Transpose::kYes : Transpose::kNo;
  measure(r, o, [&] { ops::gemm(a, ta, b, tb, out); });
}

// The operands in the usages this layout reads (DESIGN.md "GEMM operands"), quantized once
// outside the timing: this times the GEMM, the blocks below time the casts too.
void time_fp8_gemm(Result& r, const Options& o, const Recipe& recipe, GemmLayout layout,
                   const GemmOperands& t, Tensor& out) {
  // Only delayed scaling keeps per-slot state; the other recipes take no meta.
  std::unique_ptr<FP8Meta> meta;
  if (recipe.uses_fp8_meta()) meta = std::make_unique<FP8Meta>(recipe, 1);
  auto quantize = [&](const Tensor& operand, SlotId slot, Usage usage) {
    return make_quantizer(recipe, meta.get(), slot)
        ->quantize(operand, usage, Ownership::kOwned, AmaxRecording::kSkip);
  };
  const SlotId x_slot = forward_slot(0, ForwardTensor::kInput);
  const SlotId w_slot = forward_slot(0, ForwardTensor::kWeight);
  const SlotId dy_slot = backward_slot(0, BackwardTensor::kGradOutput);
  std::shared_ptr<QuantizedTensor> a, b;
  const auto dy_quantizer = make_quantizer(recipe, meta.get(), dy_slot);
  if (layout != GemmLayout::kFprop && dy_quantizer->backward_recasts_rowwise()) {
    // The backward re-casts the forward's row-wise operands with dY (Quartet II).
    const bool dgrad = layout == GemmLayout::kDgrad;
    const auto forward =
        dgrad ? quantize(t.w, w_slot, Usage::kRowwise) : quantize(t.x, x_slot, Usage::kRowwise);
    const Quantizer::BackwardOperands ops = dy_quantizer->backward_operands(
        t.dy, dgrad ? nullptr : forward.get(), dgrad ? forward.get() : nullptr);
    a = ops.dy;
    b = dgrad ? ops.w : ops.x;
  } else if (layout == GemmLayout::kFprop) {
    a = quantize(t.x, x_slot, Usage::kRowwise);
    b = quantize(t.w, w_slot, Usage::kRowwise);
  } else if (layout == GemmLayout::kDgrad) {
    a = quantize(t.dy, dy_slot, Usage::kRowwise);
    b = quantize(t.w, w_slot, Usage::kColumnwise);
  } else {
    a = quantize(t.dy, dy_slot, Usage::kColumnwise);
    b = quantize(t.x, x_slot, Usage::kColumnwise);
  }
  measure(r, o, [&] { ops::fp8_gemm(*a, *b, layout, out); });
}

void bench_gemm_cpu(const Options& o, const Emit& emit) {
  const std::vector<Mnk> shapes =
      o.quick ? std::vector<Mnk>{{128, 128, 128}}
              : std::vector<Mnk>{{768, 768, 768}, {1024, 3072, 768}, {1024, 768, 3072}};
  Generator gen(11);
  for (const Mnk& s : shapes) {
    const GemmOperands t{random_tensor({s.m, s.k}, gen), random_tensor({s.n, s.k}, gen),
                         random_tensor({s.m, s.n}, gen)};
    const double flops = 2.0 * s.m * s.n * s.k;
    for (GemmLayout layout : {GemmLayout::kFprop, GemmLayout::kDgrad, GemmLayout::kWgrad}) {
      const std::string name = gemm_result_name(layout, s);
      Tensor out = Tensor::empty(gemm_out_shape(layout, s), DType::kF32);
      for (const Precision& p : precisions(o)) {
        Result r{name, Group::kGemm, p.name, 0, flops, 0, 0, {}};
        if (!p.recipe) {
          time_f32_gemm(r, o, layout, t, out);
        } else {
          time_fp8_gemm(r, o, *p.recipe, layout, t, out);
        }
        emit(r);
      }
    }
  }
  ops::release_workspace();
}

void bench_gemm(const Options& o, const Emit& emit) {
  if (o.device.is_cuda()) {
    bench_gemm_cuda(o, emit);
  } else {
    bench_gemm_cpu(o, emit);
  }
}

// ---- block: LayerNormMLP forward + backward ----

void bench_block(const Options& o, const Emit& emit) {
  const int64_t batch = o.quick ? 2 : 4, seq = o.quick ? 64 : 256;
  const int64_t hidden = o.quick ? 128 : 768, ffn = 4 * hidden;
  const int64_t tokens = batch * seq;
  // Two GEMMs of 2·tokens·hidden·ffn each, and backward does twice the forward's GEMM work.
  const double flops = 3.0 * 2 * (2.0 * tokens * hidden * ffn);
  Generator gen(12);
  const Tensor x_data = random_tensor({batch, seq, hidden}, gen);  // (B, T, C)
  const Tensor grad = random_tensor({batch, seq, hidden}, gen);    // (B, T, C)
  for (const Precision& p : precisions(o)) {
    modules::LayerNormMLPOptions options;
    options.linear.recipe = p.recipe;
    options.linear.seed = 1;
    modules::LayerNormMLP mlp(hidden, ffn, options);
    // The input takes a gradient as inside a network, so dgrad runs too.
    Tensor x = x_data.clone();
    autograd::set_requires_grad(x);
    Result r{"block.layernorm_mlp", Group::kBlock, p.name, 0, flops, tokens, 0, {}};
    measure(r, o, [&] {
      Tensor y;
      {
        std::optional<modules::FP8Autocast> scope;
        if (p.recipe) scope.emplace(*p.recipe);
        y = mlp.forward(x);
      }
      autograd::backward(y, grad);
      for (const modules::Parameter& param : mlp.parameters()) autograd::zero_grad(*param.tensor);
      autograd::zero_grad(x);
    });
    emit(r);
  }
  ops::release_workspace();
}

// ---- layer: one TransformerLayer training step ----

// Forward FLOPs of one pre-norm layer: QKV, projection and the two MLP GEMMs, plus the attention
// scores and weighted sum counted dense (T·T, as is usual, though the causal mask halves them).
double layer_forward_flops(int64_t batch, int64_t seq, int64_t d, int64_t ffn) {
  const double tokens = static_cast<double>(batch * seq);
  const double gemms = 2 * tokens * (3 * d * d + d * d + 2 * d * ffn);
  const double attention = 2.0 * 2 * batch * seq * seq * d;
  return gemms + attention;
}

// The layer bench's model shape: flags first, then the defaults of the device (GPT-2 small's
// width on the CPU, a 7B-class layer on CUDA) or of --quick.
struct LayerSetup {
  modules::GPTConfig config;
  int64_t batch = 0, seq = 0;
};
LayerSetup layer_setup(const Options& o) {
  auto pick = [&](int64_t flag, int64_t quick, int64_t cpu, int64_t gpu) {
    return shape_value(o, flag, {quick, cpu, gpu});
  };
  LayerSetup s;
  modules::GPTConfig& config = s.config;
  config.d_model = pick(o.layer.d_model, 128, 768, 4096);
  config.n_head = pick(o.layer.heads, 4, 12, 32);
  OCTET_CHECK(config.d_model % config.n_head == 0, "bench: --d-model ", config.d_model,
              " must be a multiple of --heads ", config.n_head);
  config.ffn = 4 * config.d_model;
  config.max_seq_len = pick(o.layer.seq, 64, 256, 2048);
  // On CUDA parameters and activations are bf16 for every precision, as TE trains: the FP8
  // recipes then replace bf16 GEMMs, which is the comparison that matters there.
  config.dtype = o.device.is_cuda() ? DType::kBF16 : DType::kF32;
  config.seed = 3;
  s.batch = pick(o.layer.batch, 2, 4, 2);
  s.seq = config.max_seq_len;
  return s;
}

void bench_layer(const Options& o, const Emit& emit) {
  LayerSetup setup = layer_setup(o);
  modules::GPTConfig& config = setup.config;
  const int64_t batch = setup.batch, seq = setup.seq;
  const double flops = 3 * layer_forward_flops(batch, seq, config.d_model, config.ffn);
  Generator gen(13);
  Tensor x_data = random_tensor({batch, seq, config.d_model}, gen);  // (B, T, C)
  Tensor grad = random_tensor({batch, seq, config.d_model}, gen);    // (B, T, C)
  if (o.device.is_cuda()) {
    x_data = ops::cast(x_data, config.dtype).to(o.device);
    grad = ops::cast(grad, config.dtype).to(o.device);
  }
  for (const Precision& p : precisions(o)) {
    config.recipe = p.recipe;
    modules::TransformerLayer layer(config, config.seed);
    layer.to(o.device);  // built on the CPU as there, then moved (a no-op on the CPU)
    // After the move: the optimizer's masters and moments live beside the parameters.
    modules::Optimizer optimizer(layer.parameters(), modules::OptimizerOptions{});
    Tensor x = x_data.clone();
    autograd::set_requires_grad(x);
    Result r{"layer.transformer_train_step", Group::kLayer, p.name, 0, flops, batch * seq, 0, {}};
    if (o.traffic) {
      r.floor_bytes =
          layer_step_floor_bytes({batch * seq, config.d_model, config.ffn, config.n_head,
                                  static_cast<int64_t>(dtype_size(config.dtype))},
                                 operand_format_on_hopper(p.name));
    }
    measure(r, o, [&] {
      Tensor y;
      {
        std::optional<modules::FP8Autocast> scope;
        if (p.recipe) scope.emplace(*p.recipe);
        y = layer.forward(x, modules::FirstMicrobatch::kUnset);
      }
      autograd::backward(y, grad);
      optimizer.step(1e-4f);
      optimizer.zero_grad();
      autograd::zero_grad(x);
    });
    emit(r);
  }
  ops::release_workspace();
}

// The same as (name, recipe) pairs, for the benches in their own files.
std::vector<std::pair<std::string, std::optional<Recipe>>> chosen_precisions(const Options& o) {
  std::vector<std::pair<std::string, std::optional<Recipe>>> chosen;
  for (const Precision& p : precisions(o)) chosen.emplace_back(p.name, p.recipe);
  return chosen;
}

// ---- output ----

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// GFLOP/s on the CPU, TFLOP/s on CUDA: the column header says which.
double rate(const Result& r, const Options& o) {
  return o.device.is_cuda() ? r.gflops() / 1e3 : r.gflops();
}

// Model FLOPs utilisation: the FLOPs rate over the peak; nullopt without a peak.
std::optional<double> mfu(const Result& r, const Options& o) {
  const double peak = peak_tflops(o);
  if (peak <= 0 || r.median_ms <= 0) return std::nullopt;
  return r.gflops() / (peak * 1e3);
}

// One row per result; an FP8 GEMM on CUDA adds a row with its speed-up over bf16
// ("<bench> fp8/bf16 1.73x"), which tools/gpu-check reads. A model row ends with its MFU when
// there is a peak.
void print_row(std::ostream& out, const Result& r, const Options& o) {
  char line[256];
  char tokens[32] = "-";
  if (r.tokens > 0) std::snprintf(tokens, sizeof tokens, "%.0f", r.tokens_per_s());
  std::snprintf(line, sizeof line, "%-30s %-9s %11.3f %10.1f %12s %12s", r.bench.c_str(),
                r.precision.c_str(), r.median_ms, rate(r, o), tokens, mib(r.peak_bytes).c_str());
  out << line;
  if (r.group == Group::kModel && mfu(r, o)) {
    std::snprintf(line, sizeof line, "  MFU %.1f%%", 100 * *mfu(r, o));
    out << line;
  }
  out << "\n";
  if (r.speedup_vs_bf16) {
    const std::string label = r.precision + "/bf16";
    std::snprintf(line, sizeof line, "%-30s %-9s %10.2fx\n", r.bench.c_str(), label.c_str(),
                  *r.speedup_vs_bf16);
    out << line;
  }
  if (r.traffic) print_traffic(out, *r.traffic, o.rates, r.floor_bytes);
  out << std::flush;
}

// "octet bench on the CPU: 16 threads, ..." or "octet bench on cuda:0 (<GPU name>, sm_90), ...".
std::string where(const Options& o) {
  if (!o.device.is_cuda()) return "on the CPU: " + std::to_string(num_threads()) + " threads";
  std::string text = "on " + o.device.str();
#if OCTET_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, o.device.index) == cudaSuccess) {
    text += std::string(" (") + prop.name + ", sm_" + std::to_string(prop.major) +
            std::to_string(prop.minor) + ")";
  }
#endif
  return text;
}

nlohmann::json to_json(const Result& r, const Options& o) {
  nlohmann::json j;
  j["bench"] = r.bench;
  j["group"] = group_name(r.group);
  j["precision"] = r.precision;
  j["device"] = o.device.str();
  j["median_ms"] = r.median_ms;
  j["gflops"] = r.gflops();
  j["flops"] = r.flops;
  j["tokens_per_s"] = r.tokens > 0 ? nlohmann::json(r.tokens_per_s()) : nlohmann::json();
  j["peak_bytes"] = r.peak_bytes;
  if (r.speedup_vs_bf16) j["speedup_vs_bf16"] = *r.speedup_vs_bf16;
  if (r.traffic) j["traffic"] = traffic_json(*r.traffic, o.rates, r.floor_bytes);
  if (r.tokens > 0 && mfu(r, o)) {
    j["mfu"] = *mfu(r, o);
    j["peak_tflops"] = peak_tflops(o);
  }
  if (r.group == Group::kModel) {
    const ModelSetup s = model_setup(o);
    j["shape"] = {{"layers", s.config.n_layer},
                  {"d_model", s.config.d_model},
                  {"heads", s.config.n_head},
                  {"vocab", s.config.vocab_size},
                  {"seq", s.seq},
                  {"batch", s.batch},
                  {"dtype", std::string(dtype_name(s.config.dtype))},
                  {"params", r.params},
                  {"flops_per_token", model_flops_per_token(s.config, r.params)}};
    j["data"] = o.data.empty() ? nlohmann::json("random") : nlohmann::json(o.data);
  }
  if (r.group == Group::kLayer) {
    const LayerSetup s = layer_setup(o);
    j["shape"] = {{"d_model", s.config.d_model},
                  {"heads", s.config.n_head},
                  {"ffn", s.config.ffn},
                  {"seq", s.seq},
                  {"batch", s.batch},
                  {"dtype", std::string(dtype_name(s.config.dtype))}};
  }
  j["reps"] = o.reps;
  j["warmup"] = o.warmup;
  j["threads"] = num_threads();
  j["quick"] = o.quick;
  return j;
}

}  // namespace

int run_bench(const std::vector<std::string>& args, std::ostream& out) {
  const std::optional<Options> parsed = parse_options(args);
  if (!parsed) {
    out << kUsage;
    return 0;
  }
  const Options& o = *parsed;
  nlohmann::json results = nlohmann::json::array();
  const Emit emit = [&](const Result& r) {
    if (o.json) {
      results.push_back(to_json(r, o));
    } else {
      print_row(out, r, o);
    }
  };
  if (!o.json) {
    out << "octet bench " << where(o) << ", median of " << o.reps << " runs after " << o.warmup
        << " warm-up" << (o.quick ? ", quick shapes" : "") << "\n";
    const bool cuda = o.device.is_cuda();
    if (cuda && std::find(o.groups.begin(), o.groups.end(), Group::kLayer) != o.groups.end()) {
      const LayerSetup s = layer_setup(o);
      out << "layer: d " << s.config.d_model << ", " << s.config.n_head << " heads, ffn "
          << s.config.ffn << ", seq " << s.seq << ", batch " << s.batch << ", "
          << dtype_name(s.config.dtype) << " parameters and activations\n";
    }
    if (std::find(o.groups.begin(), o.groups.end(), Group::kModel) != o.groups.end()) {
      const ModelSetup s = model_setup(o);
      out << "model: " << s.config.n_layer << " layers, d " << s.config.d_model << ", "
          << s.config.n_head << " heads, vocab " << s.config.vocab_size << ", seq " << s.seq
          << ", batch " << s.batch << ", " << dtype_name(s.config.dtype)
          << " parameters and activations, tokens "
          << (o.data.empty() ? std::string("random") : "from " + o.data);
      if (peak_tflops(o) > 0) out << ", MFU against " << peak_tflops(o) << " TFLOP/s";
      out << "\n";
    }
    char header[256];
    std::snprintf(header, sizeof header, "%-30s %-9s %11s %10s %12s %12s\n", "bench", "precision",
                  "median ms", cuda ? "TFLOP/s" : "GFLOP/s", "tokens/s", "peak");
    out << header;
  }
  for (Group g : o.groups) {
    switch (g) {
      case Group::kGemm:
        bench_gemm(o, emit);
        break;
      case Group::kBlock:
        bench_block(o, emit);
        break;
      case Group::kLayer:
        bench_layer(o, emit);
        break;
      case Group::kModel:
        bench_model(o, emit, chosen_precisions(o));
        break;
      case Group::kGenerate:
        bench_generate(o, emit, chosen_precisions(o));
        break;
    }
  }
  if (o.json) out << results.dump(2) << "\n";
  return 0;
}

int run_bench(const std::vector<std::string>& args) { return run_bench(args, std::cout); }

}  // namespace octet::bench
