// Trainer::fit on llm.c token shards, as a library user runs it: a run stopped after a step and
// resumed from its last checkpoint (fresh model, trainer and dataset) gives the uninterrupted
// run's losses bit for bit; fit's steps are Trainer::step's steps; deferred reads report the same
// losses at log points only; the observer hears every step in order, each evaluation and
// checkpoint; too many non-finite steps name the last good checkpoint; bad options and a data
// position that does not fit are clear errors that change nothing.
#include "train/fit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/ops/arithmetic.h"
#include "data/token_data.h"
#include "modules/linear.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace octet::train {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 4, kSeq = 16;

::testing::AssertionResult same_bits(double got, double want) {
  if (std::memcmp(&got, &want, sizeof(double)) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << ", want " << want;
}

// Two train shards and one validation shard of ids below 16 (the small GPT's vocabulary).
std::string write_shards(test::ScratchDir& dir) {
  Generator gen(5);
  for (const char* name : {"train_0.bin", "train_1.bin", "val_0.bin"}) {
    std::vector<uint16_t> tokens(3000);
    uint16_t t = 0;
    for (uint16_t& v : tokens) {
      t = static_cast<uint16_t>(gen.next_u32() % 4 == 0 ? gen.next_u32() % 16 : (t + 1) % 16);
      v = t;
    }
    data::write_token_shard(dir.file(name), tokens);
  }
  return dir.file("");
}

std::unique_ptr<data::Dataset> shards(const std::string& dir) {
  return data::open_dataset({.kind = data::DataKind::kShards,
                             .path = dir + "train_*.bin",
                             .val_path = dir + "val_*.bin"});
}

TrainerOptions options_for(std::optional<Recipe> recipe, StepReads reads = StepReads::kAuto) {
  TrainerOptions o;
  o.recipe = std::move(recipe);
  o.grad_accum = 2;
  o.schedule = {3e-3f, 2, 20, 0.1f};
  o.reads = reads;
  return o;
}

FitOptions fit_options(int64_t steps, const std::string& checkpoint = "") {
  FitOptions o;
  o.steps = steps;
  o.batch_size = kBatch;
  o.seq_len = kSeq;
  o.log_interval = 3;
  o.eval_interval = 4;
  o.checkpoint_interval = checkpoint.empty() ? 0 : 4;
  o.checkpoint_path = checkpoint;
  o.eval.batches = 2;
  return o;
}

// Records what fit() reports; stops after `stop_after` when it is > 0.
struct Recorder final : FitObserver {
  int64_t stop_after = 0;
  std::vector<int64_t> steps, logs, evals, checkpoints;
  void on_step(const StepResult& r, const FitProgress& p) override {
    steps.push_back(r.step);
    EXPECT_GT(p.total_steps, 0);
  }
  void on_log(const StepResult& r, double tokens_per_s) override {
    logs.push_back(r.step);
    EXPECT_GT(tokens_per_s, 0.0);
  }
  void on_eval(int64_t step, const EvalResult& e) override {
    evals.push_back(step);
    EXPECT_TRUE(std::isfinite(e.loss));
    EXPECT_EQ(e.metric, data::Metric::kLoss);
  }
  void on_checkpoint(int64_t step, const std::string&) override { checkpoints.push_back(step); }
  SafetensorsMetadata checkpoint_metadata() override { return {{"caller", "kept"}}; }
  bool interrupt_after(int64_t step) override { return step == stop_after; }
};

std::vector<double> losses_of(const FitResult& r) {
  std::vector<double> out;
  for (const auto& [step, loss] : r.losses) out.push_back(loss);
  return out;
}

// The small GPT in GPT-2 form, or in Llama form (tests/support/small_gpt.h).
modules::GPTConfig model_config(const std::optional<Recipe>& recipe, modules::Arch arch) {
  return arch == modules::Arch::kLlama ? test::small_llama(recipe) : test::small_gpt(recipe);
}

class FitResume : public ::testing::TestWithParam<int> {};

TEST_P(FitResume, AStoppedRunResumedFromItsCheckpointMatchesTheStraightRun) {
  const std::vector<std::optional<Recipe>> recipes = {std::nullopt,        Recipe::delayed(),
                                                      Recipe::current(),   Recipe::mxfp8(),
                                                      Recipe::blockwise(), Recipe::nvfp4()};
  // 0-5: GPT-2, 6-11: Llama, in f32; 12-14: GPT-2 in bf16 (model.dtype) under f32 GEMMs,
  // delayed and MXFP8.
  const int p = GetParam();
  const bool bf16 = p >= 12;
  const std::optional<Recipe> recipe =
      bf16 ? std::vector<std::optional<Recipe>>{std::nullopt, Recipe::delayed(),
                                                Recipe::mxfp8()}[static_cast<size_t>(p - 12)]
           : recipes[static_cast<size_t>(p) % recipes.size()];
  const modules::Arch arch = p >= 6 && p < 12 ? modules::Arch::kLlama : modules::Arch::kGPT2;
  const auto model_config = [&](const std::optional<Recipe>& r, modules::Arch a) {
    modules::GPTConfig c = train::model_config(r, a);
    if (bf16) c.dtype = DType::kBF16;
    return c;
  };
  test::ScratchDir dir;
  const std::string data_dir = write_shards(dir);

  auto data = shards(data_dir);
  modules::GPT model(model_config(recipe, arch));
  Trainer trainer(model, options_for(recipe));
  Recorder seen;
  const FitResult straight = trainer.fit(*data, fit_options(10, dir.file("a.safetensors")), &seen);
  EXPECT_EQ(straight.start_step, 0);
  EXPECT_EQ(straight.end_step, 10);
  EXPECT_FALSE(straight.interrupted);
  ASSERT_TRUE(straight.final_eval.has_value());
  EXPECT_EQ(seen.steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(seen.logs, (std::vector<int64_t>{3, 6, 9, 10}));
  EXPECT_EQ(seen.evals, (std::vector<int64_t>{4, 8, 10}));
  EXPECT_EQ(seen.checkpoints, (std::vector<int64_t>{4, 8, 10}));
  const double first = straight.losses.front().second, last = straight.losses.back().second;
  EXPECT_LT(last, first);

  // Stopped after step 6: the last checkpoint is step 4's, with the caller's metadata and the
  // data position.
  auto data_b = shards(data_dir);
  modules::GPT model_b(model_config(recipe, arch));
  Trainer stopped(model_b, options_for(recipe));
  Recorder stop;
  stop.stop_after = 6;
  const FitResult cut = stopped.fit(*data_b, fit_options(10, dir.file("b.safetensors")), &stop);
  EXPECT_TRUE(cut.interrupted);
  EXPECT_FALSE(cut.final_eval.has_value());
  EXPECT_EQ(stop.checkpoints, (std::vector<int64_t>{4}));
  const Checkpoint saved = read_checkpoint(dir.file("b.safetensors"));
  EXPECT_EQ(saved.metadata.at("caller"), "kept");
  EXPECT_EQ(saved.metadata.count(kDataStateKey), 1u);

  auto data_c = shards(data_dir);
  modules::GPT model_c(model_config(recipe, arch));
  Trainer resumed(model_c, options_for(recipe));
  resumed.resume(dir.file("b.safetensors"), *data_c);
  EXPECT_EQ(resumed.steps_done(), 4);
  const FitResult rest = resumed.fit(*data_c, fit_options(10, dir.file("c.safetensors")));
  EXPECT_EQ(rest.start_step, 4);
  ASSERT_EQ(rest.losses.size(), 6u);
  for (const auto& [step, loss] : rest.losses) {
    EXPECT_TRUE(same_bits(loss, straight.losses[static_cast<size_t>(step - 1)].second))
        << "step " << step;
  }
  EXPECT_TRUE(same_bits(rest.final_eval->loss, straight.final_eval->loss));
}

INSTANTIATE_TEST_SUITE_P(RecipesArchsAndDtypes, FitResume, ::testing::Range(0, 15));

TEST(Fit, RunsTheStepsThatStepWouldRun) {
  // fit() is step() on this rank's rows of the dataset's batches: the same losses as a loop
  // of step() calls drawing the batches itself.
  test::ScratchDir dir;
  const std::string data_dir = write_shards(dir);
  auto a = shards(data_dir), b = shards(data_dir);
  modules::GPT fit_model(test::small_gpt(Recipe::delayed())),
      step_model(test::small_gpt(Recipe::delayed()));
  Trainer by_fit(fit_model, options_for(Recipe::delayed()));
  Trainer by_step(step_model, options_for(Recipe::delayed()));
  const FitResult r = by_fit.fit(*a, fit_options(6));
  for (int64_t s = 0; s < 6; ++s) {
    const StepResult want = by_step.step([&](int64_t, modules::FirstMicrobatch first) {
      const data::Batch batch = b->next_batch(data::Split::kTrain, kBatch, kSeq);
      return step_model.loss(batch.inputs, batch.targets, first);
    });
    EXPECT_TRUE(same_bits(r.losses[static_cast<size_t>(s)].second, want.loss)) << s;
  }
}

TEST(Fit, AHighPrecisionForwardEvaluatesInHighPrecisionToo) {
  // From the switch on, fit's evaluations run the forward in high precision as its steps do:
  // the final evaluation is the high-precision model's on the same weights.
  test::ScratchDir dir;
  const std::string data_dir = write_shards(dir);
  auto data = shards(data_dir);
  modules::GPT model(test::small_gpt(Recipe::current()));
  TrainerOptions options = options_for(Recipe::current());
  options.high_precision_forward_from = 2;
  Trainer trainer(model, options);
  const FitResult r = trainer.fit(*data, fit_options(4));
  ASSERT_TRUE(r.final_eval.has_value());
  EvalOptions eval = fit_options(4).eval;
  eval.batch_size = kBatch;
  eval.seq_len = kSeq;
  const EvalResult high = evaluate(model, *data, eval, std::nullopt, nullptr);
  const EvalResult fp8 = evaluate(model, *data, eval, Recipe::current(), nullptr);
  EXPECT_TRUE(same_bits(r.final_eval->loss, high.loss));
  EXPECT_FALSE(same_bits(r.final_eval->loss, fp8.loss));
}

TEST(Fit, DeferredReadsReportTheSameStepsInOrder) {
  test::ScratchDir dir;
  const std::string data_dir = write_shards(dir);
  std::vector<std::vector<double>> losses;
  for (const StepReads reads : {StepReads::kEveryStep, StepReads::kDeferred}) {
    auto data = shards(data_dir);
    modules::GPT model(test::small_gpt(Recipe::delayed()));
    Trainer trainer(model, options_for(Recipe::delayed(), reads));
    Recorder seen;
    losses.push_back(losses_of(trainer.fit(*data, fit_options(8), &seen)));
    EXPECT_EQ(seen.steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(seen.logs, (std::vector<int64_t>{3, 6, 8}));
  }
  ASSERT_EQ(losses[0].size(), losses[1].size());
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_TRUE(same_bits(losses[0][i], losses[1][i])) << i;
}

TEST(Fit, TooManyNonFiniteStepsNameTheLastGoodCheckpoint) {
  test::ScratchDir dir;
  const std::string data_dir = write_shards(dir);
  auto data = shards(data_dir);
  modules::GPT model(test::small_gpt(Recipe::delayed()));
  TrainerOptions o = options_for(Recipe::delayed());
  o.max_nonfinite_steps = 3;
  Trainer trainer(model, o);
  FitOptions fit = fit_options(12, dir.file("ckpt.safetensors"));
  fit.loss = [&](const data::Batch& b, modules::FirstMicrobatch first) {
    const Tensor loss = model.loss(b.inputs, b.targets, first);
    return trainer.steps_done() + 1 >= 6 ? autograd::scale(loss, NAN) : loss;
  };
  const std::string e = test::error_of([&] { trainer.fit(*data, fit); });
  EXPECT_THAT(e, AllOf(HasSubstr("stopped at step 8"), HasSubstr("3 steps in a row"),
                       HasSubstr(dir.file("ckpt.safetensors") + " (step 4)")));
  EXPECT_EQ(metadata_int(read_checkpoint(dir.file("ckpt.safetensors")), "step"), 4);
}

TEST(Fit, BadOptionsAndAModelWithoutALossAreClearErrors) {
  test::ScratchDir dir;
  auto data = shards(write_shards(dir));
  modules::GPT model(test::small_gpt(std::nullopt));
  Trainer trainer(model, options_for(std::nullopt));
  FitOptions bad = fit_options(4);
  bad.seq_len = 0;
  EXPECT_THAT(test::error_of([&] { trainer.fit(*data, bad); }),
              HasSubstr("batch_size and seq_len must be > 0"));
  bad = fit_options(4);
  bad.log_interval = 0;
  EXPECT_THAT(test::error_of([&] { trainer.fit(*data, bad); }), HasSubstr("log_interval"));
  trainer.fit(*data, fit_options(4));
  EXPECT_THAT(test::error_of([&] { trainer.fit(*data, fit_options(3)); }),
              HasSubstr("steps 3 is below the 4 steps already done"));

  modules::Linear linear(16, 16);
  Trainer plain(linear, options_for(std::nullopt));
  EXPECT_THAT(test::error_of([&] { plain.fit(*data, fit_options(2)); }),
              HasSubstr("FitOptions::loss"));
}

TEST(Fit, ADataPositionThatDoesNotFitIsRefusedAndChangesNothing) {
  test::ScratchDir dir;
  const std::string data_dir = write_shards(dir);
  auto data = shards(data_dir);
  modules::GPT model(test::small_gpt(std::nullopt));
  Trainer trainer(model, options_for(std::nullopt));
  trainer.fit(*data, fit_options(2, dir.file("ckpt.safetensors")));

  Checkpoint far = read_checkpoint(dir.file("ckpt.safetensors"));
  far.metadata[kDataStateKey] = R"({"train": [9, 0], "validation": [0, 0]})";
  auto other = shards(data_dir);
  modules::GPT fresh(test::small_gpt(std::nullopt));
  Trainer resumed(fresh, options_for(std::nullopt));
  const data::DataState before = other->state();
  EXPECT_THAT(test::error_of([&] { resumed.resume(far, *other); }),
              AllOf(HasSubstr(dir.file("ckpt.safetensors")), HasSubstr(kDataStateKey)));
  EXPECT_EQ(other->state(), before);
  EXPECT_EQ(resumed.steps_done(), 0);

  far.metadata.erase(kDataStateKey);
  EXPECT_THAT(test::error_of([&] { resumed.resume(far, *other); }),
              HasSubstr("no __metadata__ \"data_state\""));
}

}  // namespace
}  // namespace octet::train
