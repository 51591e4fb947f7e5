// CUDA graphs in training (TrainerOptions::cuda_graphs, cuda::Graph): fit() with the step
// captured once and replayed gives the losses, gradient norms, evaluations, weights, optimizer
// state and FP8 state of the eager run bit for bit, per recipe and for a bf16 model, across
// evaluations and checkpoints between replays and a resume; what cannot be replayed is refused
// naming the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "data/token_data.h"
#include "runtime/cuda.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"
#include "train/checkpoint.h"
#include "train/fp8_health.h"
#include "train/trainer.h"

namespace octet::train {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBatch = 4, kSeq = 16;

// One train shard and one validation shard of ids below 16 (the small GPT's vocabulary).
std::string write_shards(test::ScratchDir& dir) {
  Generator gen(11);
  for (const char* name : {"train_0.bin", "val_0.bin"}) {
    std::vector<uint16_t> tokens(4000);
    for (uint16_t& v : tokens) v = static_cast<uint16_t>(gen.next_u32() % 16);
    data::write_token_shard(dir.file(name), tokens);
  }
  return dir.file("");
}

std::unique_ptr<data::Dataset> shards(const std::string& dir) {
  data::DataOptions o;
  o.kind = data::DataKind::kShards;
  o.path = dir + "train_*.bin";
  o.val_path = dir + "val_*.bin";
  return data::open_dataset(o);
}

TrainerOptions options(const std::optional<Recipe>& recipe, bool graphs, int64_t accum = 2,
                       int64_t high_precision_from = -1) {
  TrainerOptions o;
  o.recipe = recipe;
  o.grad_accum = accum;
  o.high_precision_forward_from = high_precision_from;
  o.grad_clip = 0.5;
  o.schedule = {3e-3f, 3, 12, 0.1f};  // the rate changes every step: a replay must read it
  o.cuda_graphs = graphs;
  return o;
}

FitOptions fit_options(int64_t steps, const std::string& checkpoint) {
  FitOptions o;
  o.steps = steps;
  o.batch_size = kBatch;
  o.seq_len = kSeq;
  o.log_interval = 3;
  o.eval_interval = 4;  // evaluations between replays
  o.checkpoint_interval = 5;
  o.checkpoint_path = checkpoint;
  o.eval.batches = 2;
  return o;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// Every tensor of the two checkpoints (model, optimizer, FP8 metas) bit for bit.
void expect_same_checkpoints(const std::string& a, const std::string& b) {
  const Checkpoint x = read_checkpoint(a), y = read_checkpoint(b);
  ASSERT_EQ(x.tensors.size(), y.tensors.size());
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    EXPECT_EQ(x.tensors[i].first, y.tensors[i].first);
    EXPECT_TRUE(test::same_bits(y.tensors[i].second, x.tensors[i].second)) << x.tensors[i].first;
  }
}

struct FitRun {
  FitResult result;
  std::vector<double> evals;
  int64_t graph_nodes = 0;
  std::vector<int64_t> cast_counts;  // per FP8 slot: saturated, flushed, total since the last log
};

struct EvalRecorder : FitObserver {
  std::vector<double> evals;
  void on_eval(int64_t, const EvalResult& e) override { evals.push_back(e.loss); }
};

FitRun fit_run(const modules::GPTConfig& c, const std::optional<Recipe>& recipe, bool graphs,
               const std::string& data_dir, const std::string& checkpoint, int64_t steps,
               int64_t accum = 2, int64_t high_precision_from = -1) {
  modules::GPT gpt(c);
  gpt.to(test::gpu());
  Trainer trainer(gpt, options(recipe, graphs, accum, high_precision_from));
  auto data = shards(data_dir);
  EvalRecorder seen;
  FitRun r;
  r.result = trainer.fit(*data, fit_options(steps, checkpoint), &seen);
  r.evals = seen.evals;
  r.graph_nodes = trainer.graph_nodes();
  for (const SlotHealth& h : fp8_slot_health(gpt)) {
    r.cast_counts.insert(r.cast_counts.end(),
                         {h.counts.saturated, h.counts.flushed, h.counts.total});
  }
  return r;
}

void expect_same_runs(const FitRun& eager, const FitRun& graphed) {
  ASSERT_EQ(graphed.result.losses.size(), eager.result.losses.size());
  for (size_t i = 0; i < eager.result.losses.size(); ++i) {
    EXPECT_TRUE(same_bits(graphed.result.losses[i].second, eager.result.losses[i].second))
        << "step " << eager.result.losses[i].first << ": " << graphed.result.losses[i].second
        << " vs " << eager.result.losses[i].second;
  }
  ASSERT_EQ(graphed.evals.size(), eager.evals.size());
  for (size_t i = 0; i < eager.evals.size(); ++i) {
    EXPECT_TRUE(same_bits(graphed.evals[i], eager.evals[i])) << "evaluation " << i;
  }
  // The FP8 health counts (host totals added per replay, device counts kept across reads).
  EXPECT_EQ(graphed.cast_counts, eager.cast_counts);
}

TEST(CudaGraphs, FitIsBitIdenticalToEagerPerRecipe) {
  OCTET_REQUIRE_CUDA();
  test::ScratchDir dir;
  const std::string data_dir = write_shards(dir);
  struct Case {
    std::string name;
    std::optional<Recipe> recipe;
    DType dtype = DType::kF32;
    int64_t accum = 2;
    int64_t high_precision_from = -1;
    bool llama = false;
    modules::FP8PrimaryWeights primary = modules::FP8PrimaryWeights::kNo;
  };
  const std::vector<Case> cases = {
      {"f32", std::nullopt},
      {"bf16", std::nullopt, DType::kBF16},
      {"delayed bf16", Recipe::delayed(), DType::kBF16},
      {"current", Recipe::current()},
      {"blockwise", Recipe::blockwise()},
      {"mxfp8 bf16", Recipe::mxfp8(), DType::kBF16},
      {"rowwise", Recipe::rowwise()},
      {"delayed, one micro-batch", Recipe::delayed(), DType::kF32, 1},
      // The forward switches to high precision after step 5: a new capture.
      {"current, high-precision forward from step 5", Recipe::current(), DType::kF32, 2, 5},
      {"Llama delayed bf16", Recipe::delayed(), DType::kBF16, 2, -1, true},
      {"delayed, FP8 primary weights", Recipe::delayed(), DType::kF32, 2, -1, false,
       modules::FP8PrimaryWeights::kYes},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    modules::GPTConfig c =
        k.llama ? test::small_llama(k.recipe, k.primary) : test::small_gpt(k.recipe, k.primary);
    c.dtype = k.dtype;
    c.d_model = 64;  // block recipes' widths
    c.n_head = 2;
    const std::string a = dir.file(k.name + "-eager.safetensors");
    const std::string b = dir.file(k.name + "-graphs.safetensors");
    // 2 eager warm-up steps, the third captured, the rest replayed.
    const FitRun eager =
        fit_run(c, k.recipe, false, data_dir, a, 7, k.accum, k.high_precision_from);
    const FitRun graphed =
        fit_run(c, k.recipe, true, data_dir, b, 7, k.accum, k.high_precision_from);
    EXPECT_EQ(eager.graph_nodes, 0);
    EXPECT_GT(graphed.graph_nodes, 0);
    expect_same_runs(eager, graphed);
    expect_same_checkpoints(a, b);
  }
}

TEST(CudaGraphs, AResumedRunCapturesAgainAndStaysBitIdentical) {
  OCTET_REQUIRE_CUDA();
  test::ScratchDir dir;
  const std::string data_dir = write_shards(dir);
  const std::optional<Recipe> recipe = Recipe::delayed();
  const modules::GPTConfig c = test::small_gpt(recipe);
  const std::string a = dir.file("straight.safetensors");
  const FitRun straight = fit_run(c, recipe, true, data_dir, a, 10);
  // Stopped at the checkpoint of step 5, resumed with graphs to 10.
  const std::string b = dir.file("resumed.safetensors");
  fit_run(c, recipe, true, data_dir, b, 5);
  modules::GPT gpt(c);
  gpt.to(test::gpu());
  Trainer trainer(gpt, options(recipe, true));
  auto data = shards(data_dir);
  trainer.resume(b, *data);
  const FitResult rest = trainer.fit(*data, fit_options(10, b));
  ASSERT_EQ(rest.losses.size(), 5u);
  for (size_t i = 0; i < rest.losses.size(); ++i) {
    EXPECT_TRUE(same_bits(rest.losses[i].second, straight.result.losses[i + 5].second))
        << "step " << rest.losses[i].first;
  }
  EXPECT_GT(trainer.graph_nodes(), 0);
  expect_same_checkpoints(a, b);
}

TEST(CudaGraphs, WhatCannotBeReplayedIsRefusedNamingTheKey) {
  OCTET_REQUIRE_CUDA();
  const modules::GPTConfig c = test::small_gpt(Recipe::nvfp4());
  modules::GPT on_cpu(c);
  EXPECT_THAT(test::error_of([&] { Trainer t(on_cpu, options(std::nullopt, true)); }),
              HasSubstr("training.cuda_graphs: CUDA graphs need a model on a CUDA device"));
  modules::GPT gpt(c);
  gpt.to(test::gpu());
  EXPECT_THAT(test::error_of([&] { Trainer t(gpt, options(Recipe::nvfp4(), true)); }),
              HasSubstr("training.cuda_graphs: the recipe"));
  TrainerOptions every = options(std::nullopt, true);
  every.reads = StepReads::kEveryStep;
  EXPECT_THAT(test::error_of([&] { Trainer t(gpt, every); }),
              HasSubstr("training.cuda_graphs: CUDA graphs need deferred step reads"));
}

}  // namespace
}  // namespace octet::train
