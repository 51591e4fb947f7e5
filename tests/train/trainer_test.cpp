// The library's training loop and checkpoints on a small GPT, as an application embedding octet
// uses them: a checkpoint round trip (model, optimizer, every FP8 meta) with two calls resumes
// bit-exactly; a recipe other than the checkpoint's is refused naming both; NaN steps are
// skipped and too many throw; evaluation changes no FP8 scale and restores the mode.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/ops/arithmetic.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"
#include "train/checkpoint.h"
#include "train/fp8_health.h"

namespace octet::train {
namespace {

using test::small_gpt;

TrainerOptions options_for(std::optional<Recipe> recipe, int64_t accum = 2) {
  TrainerOptions o;
  o.recipe = std::move(recipe);
  o.grad_accum = accum;
  o.schedule = {3e-3f, 2, 20, 0.1f};
  return o;
}

// Micro-batch `micro` of step `step`: (4, 16) token ids, next-token targets, a pure function of
// both so that a resumed run sees the same data.
struct Batch {
  Tensor ids, targets;
};
Batch batch_of(int64_t step, int64_t micro, int64_t rows = 4) {
  Batch b{Tensor::empty({rows, 16}, DType::kI32), Tensor::empty({rows, 16}, DType::kI32)};
  auto* ids = b.ids.data_as<int32_t>();
  auto* t = b.targets.data_as<int32_t>();
  for (int64_t i = 0; i < rows * 16; ++i) {
    ids[i] = static_cast<int32_t>((i * 7 + step * 3 + micro * 5) % 16);
    t[i] = static_cast<int32_t>((ids[i] + 1) % 16);
  }
  return b;
}

std::vector<double> run_steps(Trainer& trainer, modules::GPT& model, int64_t from, int64_t to,
                              int64_t rows = 4) {
  std::vector<double> losses;
  for (int64_t s = from; s < to; ++s) {
    const StepResult r = trainer.step([&](int64_t micro, modules::FirstMicrobatch first) {
      const Batch b = batch_of(s, micro, rows);
      return model.loss(b.ids, b.targets, first);
    });
    EXPECT_EQ(r.step, s + 1);
    losses.push_back(r.loss);
  }
  return losses;
}

class TrainerResume : public ::testing::TestWithParam<int> {};

TEST_P(TrainerResume, CheckpointRoundTripResumesBitExactly) {
  const std::vector<std::pair<std::optional<Recipe>, modules::FP8PrimaryWeights>> cases = {
      {std::nullopt, modules::FP8PrimaryWeights::kNo},
      {Recipe::delayed(), modules::FP8PrimaryWeights::kNo},
      {Recipe::delayed(), modules::FP8PrimaryWeights::kYes},
      {Recipe::mxfp8(), modules::FP8PrimaryWeights::kYes},
      {Recipe::blockwise(), modules::FP8PrimaryWeights::kYes},
      {Recipe::rowwise(), modules::FP8PrimaryWeights::kYes},
      // The stochastic-rounding streams are in the checkpoint: the resumed gradients draw the
      // numbers the uninterrupted run drew.
      {Recipe::nvfp4(), modules::FP8PrimaryWeights::kNo},
      {Recipe::nvfp4(), modules::FP8PrimaryWeights::kYes}};
  const auto& [recipe, primary] = cases[static_cast<size_t>(GetParam())];
  test::ScratchDir dir;
  modules::GPT straight_model(small_gpt(recipe, primary));
  Trainer straight(straight_model, options_for(recipe));
  const std::vector<double> want = run_steps(straight, straight_model, 0, 8);

  modules::GPT first_model(small_gpt(recipe, primary));
  Trainer first(first_model, options_for(recipe));
  run_steps(first, first_model, 0, 4);
  first.save(dir.file("ckpt.safetensors"), {{"mine", "kept"}});

  modules::GPT resumed_model(small_gpt(recipe, primary));
  Trainer resumed(resumed_model, options_for(recipe));
  const SafetensorsMetadata meta = resumed.load(dir.file("ckpt.safetensors"));
  EXPECT_EQ(meta.at("mine"), "kept");
  EXPECT_EQ(resumed.steps_done(), 4);
  const std::vector<double> got = run_steps(resumed, resumed_model, 4, 8);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i + 4]) << "step " << i + 5;
  // Every FP8 scale and history as in the uninterrupted run.
  const auto a = straight_model.state_dict(), b = resumed_model.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].second.nbytes(), b[i].second.nbytes()) << a[i].first;
    EXPECT_EQ(std::memcmp(a[i].second.data(), b[i].second.data(), a[i].second.nbytes()), 0)
        << a[i].first;
  }
}
INSTANTIATE_TEST_SUITE_P(Recipes, TrainerResume, ::testing::Range(0, 8));

// NVFP4's quartet2 method draws its transform signs and scale roundings from the gradient
// slots' streams, which the checkpoint holds: the resumed run draws what the uninterrupted one
// did. A GPT of width 128 on 8 sequences of 16 tokens (every GEMM dimension a multiple of 128).
TEST(TrainerResume, Quartet2ResumesBitExactly) {
  for (const auto primary : {modules::FP8PrimaryWeights::kNo, modules::FP8PrimaryWeights::kYes}) {
    auto config = [&] {
      modules::GPTConfig g = small_gpt(Recipe::nvfp4_quartet2(), primary);
      g.d_model = 128;
      return g;
    };
    test::ScratchDir dir;
    modules::GPT straight_model(config());
    Trainer straight(straight_model, options_for(Recipe::nvfp4_quartet2()));
    const std::vector<double> want = run_steps(straight, straight_model, 0, 6, 8);
    modules::GPT first_model(config());
    Trainer first(first_model, options_for(Recipe::nvfp4_quartet2()));
    run_steps(first, first_model, 0, 3, 8);
    first.save(dir.file("ckpt.safetensors"), {});
    modules::GPT resumed_model(config());
    Trainer resumed(resumed_model, options_for(Recipe::nvfp4_quartet2()));
    resumed.load(dir.file("ckpt.safetensors"));
    const std::vector<double> got = run_steps(resumed, resumed_model, 3, 6, 8);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i + 3]) << "step " << i + 4;
    EXPECT_LT(want.back(), want.front()) << "the loss falls";
  }
}

// fp8.high_precision_after: from its step on the forward runs in high precision (the backward
// under the recipe). Before it the run is the plain FP8 run; from step 0 the first loss is the
// high-precision model's; a resume across the switch is exact.
TEST(TrainerHighPrecisionForward, SwitchesAtItsStepAndResumesExactly) {
  auto options = [](int64_t from) {
    TrainerOptions o = options_for(Recipe::current());
    o.high_precision_forward_from = from;
    return o;
  };
  modules::GPT hp_model(small_gpt(std::nullopt));
  Trainer hp(hp_model, options_for(std::nullopt));
  modules::GPT early_model(small_gpt(Recipe::current()));
  Trainer early(early_model, options(0));
  EXPECT_EQ(run_steps(early, early_model, 0, 1)[0], run_steps(hp, hp_model, 0, 1)[0]);

  modules::GPT plain_model(small_gpt(Recipe::current()));
  Trainer plain(plain_model, options_for(Recipe::current()));
  const std::vector<double> fp8 = run_steps(plain, plain_model, 0, 6);
  modules::GPT straight_model(small_gpt(Recipe::current()));
  Trainer straight(straight_model, options(3));
  const std::vector<double> want = run_steps(straight, straight_model, 0, 6);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(want[i], fp8[i]) << "step " << i + 1;
  EXPECT_NE(want[3], fp8[3]) << "the switch";
  test::ScratchDir dir;
  modules::GPT first_model(small_gpt(Recipe::current()));
  Trainer first(first_model, options(3));
  run_steps(first, first_model, 0, 2);
  first.save(dir.file("ckpt.safetensors"), {});
  modules::GPT resumed_model(small_gpt(Recipe::current()));
  Trainer resumed(resumed_model, options(3));
  resumed.load(dir.file("ckpt.safetensors"));
  const std::vector<double> got = run_steps(resumed, resumed_model, 2, 6);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i + 2]) << "step " << i + 3;
}

TEST(TrainerCheckpoint, ModuleAndOptimizerWithTwoCalls) {
  test::ScratchDir dir;
  modules::GPT a(small_gpt(Recipe::delayed())), b(small_gpt(Recipe::delayed()));
  Trainer ta(a, options_for(Recipe::delayed()));
  run_steps(ta, a, 0, 3);
  save_checkpoint(dir.file("c.safetensors"), a, &ta.optimizer());
  modules::Optimizer opt_b(b.parameters(), modules::OptimizerOptions{});
  load_checkpoint(dir.file("c.safetensors"), b, &opt_b);
  EXPECT_EQ(opt_b.steps(), 3);
  const Checkpoint c = read_checkpoint(dir.file("c.safetensors"));
  EXPECT_NE(c.metadata.at("fp8_recipes").find("delayed"), std::string::npos);
}

TEST(TrainerCheckpoint, AnotherRecipeIsRefusedNamingBoth) {
  test::ScratchDir dir;
  modules::GPT delayed_model(small_gpt(Recipe::delayed()));
  save_checkpoint(dir.file("c.safetensors"), delayed_model, nullptr);
  modules::GPT current_model(small_gpt(Recipe::current()));
  const std::string message =
      test::error_of([&] { load_checkpoint(dir.file("c.safetensors"), current_model, nullptr); });
  EXPECT_NE(message.find("\"recipe\":\"delayed\""), std::string::npos) << message;
  EXPECT_NE(message.find("\"recipe\":\"current\""), std::string::npos) << message;
  // The block recipes too, with FP8 primary weights whose bytes would not even fit.
  modules::GPT blockwise_model(small_gpt(Recipe::blockwise(), modules::FP8PrimaryWeights::kYes));
  save_checkpoint(dir.file("b.safetensors"), blockwise_model, nullptr);
  modules::GPT nvfp4_model(small_gpt(Recipe::nvfp4(), modules::FP8PrimaryWeights::kYes));
  const std::string block_message =
      test::error_of([&] { load_checkpoint(dir.file("b.safetensors"), nvfp4_model, nullptr); });
  EXPECT_NE(block_message.find("\"recipe\":\"blockwise\""), std::string::npos) << block_message;
  EXPECT_NE(block_message.find("\"recipe\":\"nvfp4\""), std::string::npos) << block_message;
}

TEST(Trainer, NonFiniteStepsAreSkippedAndTooManyThrow) {
  modules::GPT model(small_gpt(Recipe::delayed()));
  TrainerOptions o = options_for(Recipe::delayed());
  o.max_nonfinite_steps = 2;
  Trainer trainer(model, o);
  int calls = 0;
  auto poisoned = [&](int64_t micro, modules::FirstMicrobatch first) {
    ++calls;
    const Batch b = batch_of(0, micro);
    return autograd::scale(model.loss(b.ids, b.targets, first), NAN);
  };
  const StepResult r = trainer.step(poisoned);
  EXPECT_TRUE(r.skipped);
  EXPECT_TRUE(std::isnan(r.loss));
  EXPECT_EQ(calls, 1);  // the step ended at the first NaN micro-batch
  EXPECT_EQ(trainer.skipped_steps(), 1);
  EXPECT_EQ(trainer.optimizer().steps(), 0);
  const std::string message = test::error_of([&] { trainer.step(poisoned); });
  EXPECT_NE(message.find("NaN or inf for 2 steps in a row"), std::string::npos) << message;
}

TEST(Trainer, EvaluationMovesNoScaleAndRestoresTheMode) {
  modules::GPT model(small_gpt(Recipe::delayed()));
  Trainer trainer(model, options_for(Recipe::delayed()));
  run_steps(trainer, model, 0, 2);
  const auto before = model.state_dict();
  std::vector<std::vector<uint8_t>> bytes;
  for (const auto& [name, t] : before) {
    const auto* p = static_cast<const uint8_t*>(t.data());
    bytes.emplace_back(p, p + t.nbytes());
  }
  const double loss = trainer.evaluate([&] {
    EXPECT_FALSE(model.training());
    modules::FP8Autocast fp8(*trainer.recipe());
    const Batch b = batch_of(0, 0);
    return static_cast<double>(model.loss(b.ids, b.targets).item());
  });
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_TRUE(model.training());
  const auto after = model.state_dict();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(std::memcmp(after[i].second.data(), bytes[i].data(), bytes[i].size()), 0)
        << after[i].first;
  }
}

// Deferred reads (the GPU's default), forced on the CPU: the same numbers as reading every
// step, bit for bit, and a NaN step skipped on the device.
TrainerOptions with_reads(TrainerOptions o, StepReads reads) {
  o.reads = reads;
  return o;
}

TEST(TrainerDeferred, GivesTheLossesNormsAndWeightsOfReadingEveryStep) {
  for (const auto& recipe : {std::optional<Recipe>(), std::optional<Recipe>(Recipe::delayed()),
                             std::optional<Recipe>(Recipe::nvfp4())}) {
    for (modules::OptimizerKind kind :
         {modules::OptimizerKind::kAdamW, modules::OptimizerKind::kSGD}) {
      SCOPED_TRACE((recipe ? describe(*recipe) : std::string("f32")) +
                   (kind == modules::OptimizerKind::kSGD ? ", SGD" : ", AdamW"));
      TrainerOptions o = options_for(recipe, 2);
      o.optimizer.kind = kind;
      o.optimizer.weight_decay = 0.01f;
      modules::GPT now_model(small_gpt(recipe)), later_model(small_gpt(recipe));
      Trainer now(now_model, with_reads(o, StepReads::kEveryStep));
      Trainer later(later_model, with_reads(o, StepReads::kDeferred));
      EXPECT_FALSE(now.deferred_reads());
      EXPECT_TRUE(later.deferred_reads());
      std::vector<StepResult> want, got;
      for (int64_t s = 0; s < 6; ++s) {
        auto loss_of = [s](modules::GPT& model) {
          return [s, &model](int64_t micro, modules::FirstMicrobatch first) {
            const Batch b = batch_of(s, micro);
            return model.loss(b.ids, b.targets, first);
          };
        };
        want.push_back(now.step(loss_of(now_model)));
        EXPECT_EQ(later.run_step(loss_of(later_model)), s + 1);
        if (s == 2) {  // read part-way: the steps so far, in order
          const std::vector<StepResult> part = later.results();
          ASSERT_EQ(part.size(), 3u);
          got.insert(got.end(), part.begin(), part.end());
        }
      }
      const std::vector<StepResult> rest = later.results();
      got.insert(got.end(), rest.begin(), rest.end());
      EXPECT_TRUE(later.results().empty());
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].step, want[i].step);
        EXPECT_EQ(got[i].loss, want[i].loss) << "step " << i + 1;
        EXPECT_EQ(got[i].grad_norm, want[i].grad_norm) << "step " << i + 1;
        EXPECT_EQ(got[i].lr, want[i].lr);
        EXPECT_FALSE(got[i].skipped);
      }
      EXPECT_EQ(later.optimizer().steps(), 6);
      const auto a = now_model.state_dict(), b = later_model.state_dict();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(test::same_bits(b[i].second, a[i].second)) << a[i].first;
      const auto oa = now.optimizer().state_dict(), ob = later.optimizer().state_dict();
      ASSERT_EQ(oa.size(), ob.size());
      for (size_t i = 0; i < oa.size(); ++i)
        EXPECT_TRUE(test::same_bits(ob[i].second, oa[i].second)) << oa[i].first;
    }
  }
}

TEST(TrainerDeferred, ANonFiniteStepIsSkippedOnTheDeviceAndCountedWhenRead) {
  // f32: the backward a NaN step still runs under deferred reads leaves no state behind, so the
  // two ways agree on every later step too.
  TrainerOptions o = options_for(std::nullopt, 2);
  o.max_nonfinite_steps = 3;
  modules::GPT now_model(small_gpt(std::nullopt)), later_model(small_gpt(std::nullopt));
  Trainer now(now_model, with_reads(o, StepReads::kEveryStep));
  Trainer later(later_model, with_reads(o, StepReads::kDeferred));
  auto loss_of = [](modules::GPT& model, int64_t s, bool poison) {
    return [&model, s, poison](int64_t micro, modules::FirstMicrobatch first) {
      const Batch b = batch_of(s, micro);
      const Tensor loss = model.loss(b.ids, b.targets, first);
      // The second micro-batch: the first one's backward has run already.
      return poison && micro == 1 ? autograd::scale(loss, NAN) : loss;
    };
  };
  std::vector<StepResult> want;
  std::vector<std::vector<std::pair<std::string, Tensor>>> weights_before(6);
  for (int64_t s = 0; s < 6; ++s) {
    const bool poison = s == 2 || s == 3;
    want.push_back(now.step(loss_of(now_model, s, poison)));
    for (const auto& [name, t] : later_model.state_dict())
      weights_before[s].emplace_back(name, t.clone());
    later.run_step(loss_of(later_model, s, poison));
    if (s == 2) {
      // Nothing read yet: the skip is the device's alone, and the weights did not move.
      EXPECT_EQ(later.skipped_steps(), 0);
      const auto after = later_model.state_dict();
      for (size_t i = 0; i < after.size(); ++i) {
        EXPECT_TRUE(test::same_bits(after[i].second, weights_before[s][i].second))
            << after[i].first;
      }
    }
  }
  const std::vector<StepResult> got = later.results();
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_EQ(got[i].skipped, want[i].skipped);
    EXPECT_EQ(got[i].nonfinite_run, want[i].nonfinite_run);
    EXPECT_EQ(std::isnan(got[i].loss), std::isnan(want[i].loss));
    if (!want[i].skipped) {
      EXPECT_EQ(got[i].loss, want[i].loss);
      EXPECT_EQ(got[i].grad_norm, want[i].grad_norm);
    }
  }
  EXPECT_TRUE(got[2].skipped && got[3].skipped && !got[4].skipped);
  EXPECT_EQ(later.skipped_steps(), 2);
  EXPECT_EQ(now.optimizer().steps(), 4);
  EXPECT_EQ(later.optimizer().steps(), 4);  // skipped steps do not count (AdamW's bias correction)
  const auto a = now_model.state_dict(), b = later_model.state_dict();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(test::same_bits(b[i].second, a[i].second)) << a[i].first;
  // Three in a row stop the run when they are read, at the step that reached the limit.
  for (int64_t s = 6; s < 9; ++s) later.run_step(loss_of(later_model, s, true));
  const std::string message = test::error_of([&] { later.results(); });
  EXPECT_NE(message.find("training stopped at step 9"), std::string::npos) << message;
}

TEST(TrainerDeferred, ACheckpointReadsTheWaitingStepsAndResumesBitExactly) {
  test::ScratchDir dir;
  const TrainerOptions o = with_reads(options_for(Recipe::delayed()), StepReads::kDeferred);
  auto run = [](Trainer& t, modules::GPT& model, int64_t from, int64_t to) {
    for (int64_t s = from; s < to; ++s) {
      t.run_step([&, s](int64_t micro, modules::FirstMicrobatch first) {
        const Batch b = batch_of(s, micro);
        return model.loss(b.ids, b.targets, first);
      });
    }
    std::vector<double> losses;
    for (const StepResult& r : t.results()) losses.push_back(r.loss);
    return losses;
  };
  modules::GPT straight_model(small_gpt(Recipe::delayed()));
  Trainer straight(straight_model, o);
  const std::vector<double> want = run(straight, straight_model, 0, 8);
  modules::GPT first_model(small_gpt(Recipe::delayed()));
  Trainer first(first_model, o);
  for (int64_t s = 0; s < 4; ++s) {
    first.run_step([&, s](int64_t micro, modules::FirstMicrobatch f) {
      const Batch b = batch_of(s, micro);
      return first_model.loss(b.ids, b.targets, f);
    });
  }
  first.save(dir.file("ckpt.safetensors"));  // reads the 4 waiting steps first
  EXPECT_EQ(first.results().size(), 4u);     // and keeps them for the caller
  modules::GPT resumed_model(small_gpt(Recipe::delayed()));
  Trainer resumed(resumed_model, o);
  resumed.load(dir.file("ckpt.safetensors"));
  EXPECT_EQ(resumed.optimizer().steps(), 4);
  const std::vector<double> got = run(resumed, resumed_model, 4, 8);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i + 4]) << "step " << i + 5;
}

}  // namespace
}  // namespace octet::train
