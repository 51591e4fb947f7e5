// `octet bench model`: one GPT training step (forward, loss, backward, AdamW), timed at a chosen
// shape on random tokens or an llm.c shard's, with tokens/s and MFU counted as
// bench/torch_gpt2.py counts them, so that the two compare at the same shape.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "data/token_data.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/optimizer.h"
#include "runtime/cuda.h"
#include "runtime/error.h"
#include "tools/bench_common.h"

namespace octet::bench::detail {
namespace {

// Batches the timed steps take in turn (as many as the tokens give, at most this many).
constexpr int64_t kMaxBatches = 4;

// One step's ids and targets (B, T) i32, targets the ids shifted by one (llm.c's windows).
struct TokenBatch {
  Tensor ids, targets;
};

// The tokens the batches are cut from: the shard's first ones, or random ids below the vocabulary.
std::vector<int32_t> bench_tokens(const Options& o, int64_t rows, int64_t vocab) {
  std::vector<int32_t> tokens;
  if (o.data.empty()) {
    Generator gen(14);
    tokens.resize(static_cast<size_t>(kMaxBatches * rows + 1));
    for (int32_t& t : tokens) t = static_cast<int32_t>(gen.next_u32() % vocab);
    return tokens;
  }
  const auto shard = data::TokenShard::open(o.data);
  OCTET_CHECK(shard->size() >= rows + 1, "bench: --data ", o.data, " has ", shard->size(),
              " tokens; a batch of ", rows, " tokens and its targets need ", rows + 1);
  const int64_t n = std::min(shard->size(), kMaxBatches * rows + 1);
  tokens.assign(shard->tokens(), shard->tokens() + n);
  for (int64_t i = 0; i < n; ++i) {
    OCTET_CHECK(tokens[i] < vocab, "bench: --data ", o.data, ": token ", i, " is ", tokens[i],
                ", not below the vocabulary ", vocab, " (--vocab)");
  }
  return tokens;
}

// Batch w is tokens [w B T, (w + 1) B T) and, as targets, the same shifted by one.
std::vector<TokenBatch> token_batches(const std::vector<int32_t>& tokens, int64_t batch,
                                      int64_t seq, Device device) {
  const int64_t rows = batch * seq;
  const int64_t count = (static_cast<int64_t>(tokens.size()) - 1) / rows;
  std::vector<TokenBatch> batches;
  for (int64_t w = 0; w < count; ++w) {
    TokenBatch b{Tensor::empty({batch, seq}, DType::kI32),
                 Tensor::empty({batch, seq}, DType::kI32)};
    std::copy_n(tokens.begin() + w * rows, rows, b.ids.data_as<int32_t>());
    std::copy_n(tokens.begin() + w * rows + 1, rows, b.targets.data_as<int32_t>());
    // On the device before the timing, as the PyTorch script's: the data pipeline is not timed.
    if (!device.is_cpu()) b = {b.ids.to(device), b.targets.to(device)};
    batches.push_back(std::move(b));
  }
  return batches;
}

int64_t parameter_count(modules::GPT& model) {
  int64_t n = 0;
  for (const modules::Parameter& p : model.parameters()) n += p.value_numel();
  return n;
}

}  // namespace

int64_t shape_value(const Options& o, int64_t flag, ShapeDefaults d) {
  if (flag > 0) return flag;
  return o.quick ? d.quick : o.device.is_cuda() ? d.gpu : d.cpu;
}

ModelSetup model_setup(const Options& o) {
  auto pick = [&](int64_t flag, int64_t quick, int64_t cpu, int64_t gpu) {
    return shape_value(o, flag, {quick, cpu, gpu});
  };
  ModelSetup s;
  modules::GPTConfig& c = s.config;
  c.n_layer = pick(o.layer.layers, 2, 2, 12);
  c.d_model = pick(o.layer.d_model, 128, 128, 768);
  c.n_head = pick(o.layer.heads, 4, 4, 12);
  OCTET_CHECK(c.d_model % c.n_head == 0, "bench: --d-model ", c.d_model,
              " must be a multiple of --heads ", c.n_head);
  c.vocab_size = pick(o.layer.vocab, 256, 256, 50304);
  c.ffn = 4 * c.d_model;
  c.max_seq_len = pick(o.layer.seq, 64, 128, 1024);
  // As the layer bench: bf16 parameters and activations on CUDA for every precision.
  c.dtype = o.device.is_cuda() ? DType::kBF16 : DType::kF32;
  c.seed = 4;
  s.batch = pick(o.layer.batch, 2, 8, 8);
  s.seq = c.max_seq_len;
  return s;
}

double model_flops_per_token(const modules::GPTConfig& c, int64_t params) {
  const int64_t position_table = c.arch == modules::Arch::kGPT2 ? c.max_seq_len * c.d_model : 0;
  const double attention = 12.0 * static_cast<double>(c.n_layer * c.d_model * c.max_seq_len);
  return 6.0 * static_cast<double>(params - position_table) + attention;
}

double peak_tflops(const Options& o) {
  if (o.peak_tflops > 0) return o.peak_tflops;
  return o.device.is_cuda() ? 989 : 0;
}

void bench_model(const Options& o, const Emit& emit,
                 const std::vector<std::pair<std::string, std::optional<Recipe>>>& precisions) {
  ModelSetup setup = model_setup(o);
  modules::GPTConfig& config = setup.config;
  const int64_t batch = setup.batch, seq = setup.seq;
  const std::vector<TokenBatch> batches =
      token_batches(bench_tokens(o, batch * seq, config.vocab_size), batch, seq, o.device);
  for (const auto& precision : precisions) {
    // Named, not bound: the step lambdas below capture them.
    const std::string& name = precision.first;
    const std::optional<Recipe>& recipe = precision.second;
    config.recipe = recipe;
    modules::GPT model(config);
    model.to(o.device);  // built on the CPU, then moved (a no-op on the CPU)
    // After the move: the optimizer's masters and moments live beside the parameters.
    modules::Optimizer optimizer(model.parameters(), modules::OptimizerOptions{});
    const int64_t params = parameter_count(model);
    const double flops = model_flops_per_token(config, params) * static_cast<double>(batch * seq);
    Result r{"model.gpt_train_step", Group::kModel, name, 0, flops, batch * seq, 0, {}, {}, params};
    // As `octet train` runs on CUDA: the step captured once and replayed, its batch copied into
    // the same device tensors before each run and its update decided on the device.
    const bool graphs =
        o.device.is_cuda() && o.cuda_graphs && !(recipe && recipe->uses_rng_streams());
    TokenBatch staged;
    Tensor gate, lr;
    if (graphs) {
      staged = {Tensor::empty({batch, seq}, DType::kI32, o.device),
                Tensor::empty({batch, seq}, DType::kI32, o.device)};
      gate = Tensor::full({1}, 1.f, DType::kF32, o.device);
      lr = Tensor::full({1}, 1e-4f, DType::kF32, o.device);
    }
    auto train_step = [&](const TokenBatch& b) {
      Tensor loss;
      {
        std::optional<modules::FP8Autocast> scope;
        if (recipe) scope.emplace(*recipe);
        loss = model.loss(b.ids, b.targets);
      }
      autograd::backward(loss);
      if (graphs) {
        optimizer.step(1e-4f, gate, &lr);
      } else {
        optimizer.step(1e-4f);
      }
      optimizer.zero_grad();
    };
    std::unique_ptr<cuda::Graph> graph;
    int eager_left = std::max(1, o.warmup - 1);  // the last warm-up run captures
    size_t step = 0;
    measure(r, o, [&] {
      const TokenBatch& b = batches[step++ % batches.size()];
      if (!graphs) {
        train_step(b);
        return;
      }
      staged.ids.copy_bytes_from(b.ids);
      staged.targets.copy_bytes_from(b.targets);
      if (graph != nullptr) {
        graph->replay();
      } else if (eager_left > 0) {
        --eager_left;
        train_step(staged);
      } else {
        graph = std::make_unique<cuda::Graph>(o.device);
        graph->begin_capture();
        train_step(staged);
        graph->end_capture();
        graph->replay();
      }
    });
    emit(r);
  }
  ops::release_workspace();
}

}  // namespace octet::bench::detail
