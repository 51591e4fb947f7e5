// Data-parallel training across real ranks with the library's Trainer, which `octet train` under
// mpirun and an embedding application both use. After every step, every parameter, every FP8
// scale, scale_inv and amax history and the optimizer state are the same bits on every rank, and
// the loss is within 1e-5 (relative) of one process that trains on the whole global batch
// (gradient accumulation and clipping included). ZeRO-1 gives plain data parallelism's
// parameters, norms and optimizer state bit for bit (FP8 primary weights gathered as FP8 bytes,
// MXFP8 ones through their f32 masters). A checkpoint resumes bit-exactly with the same ranks,
// from ZeRO-1 into plain data parallelism, and in one process. reduce_amax=false keeps each
// rank's amaxes. A bad launch fails before step 1, naming what differs; a NaN loss on one rank
// skips the step on all; gradient buckets start reducing during the backward. Deferred reads
// (nothing read on the host inside a step) give reading every step's numbers bit for bit, and a
// deferred ZeRO-1 run's checkpoint resumes exactly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "autograd/ops/arithmetic.h"
#include "runtime/comm_nccl.h"
#include "runtime/device.h"
#include "tests/dist/dist_util.h"
#include "tests/support/scratch_dir.h"

namespace octet::test::dist {
namespace {

using modules::FP8PrimaryWeights;
using modules::GPT;
using ::testing::HasSubstr;
using train::Trainer;
using train::ZeroStage;

struct Case {
  std::string name;
  std::optional<Recipe> recipe;
  FP8PrimaryWeights primary = FP8PrimaryWeights::kNo;
  DType dtype = DType::kF32;
  int64_t accum = 1;
  // How close the loss is to one process's on the global batch (relative). 1e-5 where every
  // FP8 value is the one process's: delayed scaling (reduced amaxes are the global batch's) and
  // MXFP8 (blocks never straddle two ranks' rows). FP8 primary weights are cast from master
  // weights that differ from one process's in their last f32 bits (the gradients are summed in
  // another order), and an element that sits that close to an E4M3 rounding boundary takes the
  // neighbouring value, 2^-4 to 2^-3 of itself away (an estimate: a few elements in 10^6 a step;
  // 2.5e-5 has been seen at the sixth step): 1e-4. Current scaling takes each rank's own
  // tensor's amax, and bf16 gradients are rounded once per rank before the sum: both differ from
  // one process by design, within what those roundings allow.
  double loss_tolerance = 1e-5;
  friend void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }
};

std::vector<Case> cases() {
  return {
      {"f32", std::nullopt},
      {"delayed_accum2", Recipe::delayed(), FP8PrimaryWeights::kNo, DType::kF32, 2},
      {"delayed_primary", Recipe::delayed(), FP8PrimaryWeights::kYes, DType::kF32, 1, 1e-4},
      {"current", Recipe::current(), FP8PrimaryWeights::kNo, DType::kF32, 1, 2e-3},
      {"mxfp8_primary_accum2", Recipe::mxfp8(), FP8PrimaryWeights::kYes, DType::kF32, 2, 1e-4},
      {"bf16_delayed", Recipe::delayed(), FP8PrimaryWeights::kNo, DType::kBF16, 1, 2e-3},
      // The block recipes' column-wise blocks run along the token rows, which the ranks split,
      // and NVFP4's tensor scale is each rank's own amax: close to one process, not equal.
      {"blockwise_primary", Recipe::blockwise(), FP8PrimaryWeights::kYes, DType::kF32, 1, 2e-3},
      {"nvfp4_primary", Recipe::nvfp4(), FP8PrimaryWeights::kYes, DType::kF32, 1, 2e-2},
  };
}

constexpr int64_t kSteps = 5;

GPT make_model(const Case& c, uint64_t seed = 9) {
  return GPT(small_gpt(c.recipe, c.primary, c.dtype, seed));
}

class DataParallel : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallel, EveryRankHoldsTheSameStateAndOneProcessSeesTheSameLoss) {
  const Case& c = GetParam();
  GPT model = make_model(c);
  Trainer trainer(model, dp_options(c.recipe, c.accum, world()));
  GPT alone_model = make_model(c);  // one process on the whole global batch
  Trainer alone(alone_model, dp_options(c.recipe, c.accum, nullptr));
  for (int64_t s = 0; s < kSteps; ++s) {
    const train::StepResult r = step_on(trainer, model, s, my_first_row(), kRowsPerRank);
    const train::StepResult one = step_on(alone, alone_model, s, 0, global_rows());
    ASSERT_FALSE(r.skipped || one.skipped) << "step " << s;
    EXPECT_NEAR(r.loss, one.loss, c.loss_tolerance * std::fabs(one.loss)) << "step " << s;
    EXPECT_NEAR(r.grad_norm, one.grad_norm, 10 * c.loss_tolerance * one.grad_norm) << "step " << s;
    EXPECT_THAT(differing_across_ranks(model.state_dict()), ::testing::IsEmpty()) << "step " << s;
    EXPECT_THAT(differing_across_ranks(trainer.optimizer_state()), ::testing::IsEmpty())
        << "step " << s;
    const Tensor reported =
        Tensor::from_floats({static_cast<float>(r.loss), static_cast<float>(r.grad_norm)}, {2});
    EXPECT_TRUE(same_on_all_ranks(reported)) << "step " << s;
    EXPECT_GT(r.comm.grads, 0);
  }
}

TEST_P(DataParallel, ZeroOneGivesPlainDataParallelismBitForBit) {
  const Case& c = GetParam();
  GPT plain_model = make_model(c);
  Trainer plain(plain_model, dp_options(c.recipe, c.accum, world()));
  GPT zero_model = make_model(c);
  Trainer zero(zero_model, dp_options(c.recipe, c.accum, world(), ZeroStage::kOptimizerState));
  for (int64_t s = 0; s < kSteps; ++s) {
    const train::StepResult p = step_on(plain, plain_model, s, my_first_row(), kRowsPerRank);
    const train::StepResult z = step_on(zero, zero_model, s, my_first_row(), kRowsPerRank);
    EXPECT_EQ(p.loss, z.loss) << "step " << s;
    EXPECT_EQ(p.grad_norm, z.grad_norm) << "step " << s;
    EXPECT_THAT(differing(plain_model.state_dict(), zero_model.state_dict()), ::testing::IsEmpty())
        << "step " << s;
    EXPECT_GT(z.comm.params, 0);
    if (c.primary == FP8PrimaryWeights::kYes && c.recipe->kind == RecipeKind::kDelayed) {
      // The FP8 GEMM weights travel as FP8 bytes: the gather moves less than the f32 values.
      EXPECT_LT(z.comm.params, z.comm.grads) << "step " << s;
    }
  }
  EXPECT_THAT(differing(plain.optimizer_state(), zero.optimizer_state()), ::testing::IsEmpty());
}

// Deferred reads (the GPU's default; forced here on the CPU): every rank's losses are gathered
// and the norm's parts reduced as tensors, nothing is read on the host until results(), and the
// numbers are reading every step's, bit for bit, for plain data parallelism and ZeRO-1 alike.
TEST_P(DataParallel, DeferredReadsGiveEveryStepReadsBitForBitWithAndWithoutZeroOne) {
  const Case& c = GetParam();
  auto options = [&](ZeroStage zero, train::StepReads reads) {
    train::TrainerOptions o = dp_options(c.recipe, c.accum, world(), zero);
    o.reads = reads;
    return o;
  };
  GPT now_model = make_model(c);
  Trainer now(now_model, options(ZeroStage::kNone, train::StepReads::kEveryStep));
  GPT plain_model = make_model(c), zero_model = make_model(c);
  Trainer plain(plain_model, options(ZeroStage::kNone, train::StepReads::kDeferred));
  Trainer zero(zero_model, options(ZeroStage::kOptimizerState, train::StepReads::kDeferred));
  ASSERT_TRUE(plain.deferred_reads() && zero.deferred_reads());
  auto loss_of = [](GPT& model, int64_t s) {
    return [&model, s](int64_t micro, modules::FirstMicrobatch first) {
      const Rows b = rows_of(s, micro, my_first_row(), kRowsPerRank);
      return model.loss(b.ids, b.targets, first);
    };
  };
  std::vector<train::StepResult> want, got_plain, got_zero;
  for (int64_t s = 0; s < kSteps; ++s) {
    want.push_back(now.step(loss_of(now_model, s)));
    EXPECT_EQ(plain.run_step(loss_of(plain_model, s)), s + 1);
    EXPECT_EQ(zero.run_step(loss_of(zero_model, s)), s + 1);
    if (s == 1) {  // read part-way: the steps so far, in order
      for (const train::StepResult& r : plain.results()) got_plain.push_back(r);
      for (const train::StepResult& r : zero.results()) got_zero.push_back(r);
      ASSERT_EQ(got_plain.size(), 2u);
    }
  }
  for (const train::StepResult& r : plain.results()) got_plain.push_back(r);
  for (const train::StepResult& r : zero.results()) got_zero.push_back(r);
  ASSERT_EQ(got_plain.size(), want.size());
  ASSERT_EQ(got_zero.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    ASSERT_FALSE(want[i].skipped);
    for (const train::StepResult* r : {&got_plain[i], &got_zero[i]}) {
      EXPECT_EQ(r->step, want[i].step);
      EXPECT_FALSE(r->skipped);
      EXPECT_EQ(r->loss, want[i].loss);
      EXPECT_EQ(r->grad_norm, want[i].grad_norm);
      EXPECT_GT(r->comm.grads, 0);
    }
  }
  EXPECT_EQ(got_plain.back().comm.grads, want.back().comm.grads);
  EXPECT_THAT(differing(now_model.state_dict(), plain_model.state_dict()), ::testing::IsEmpty());
  EXPECT_THAT(differing(now_model.state_dict(), zero_model.state_dict()), ::testing::IsEmpty());
  EXPECT_THAT(differing_across_ranks(plain_model.state_dict()), ::testing::IsEmpty());
  EXPECT_THAT(differing(now.optimizer_state(), plain.optimizer_state()), ::testing::IsEmpty());
  EXPECT_THAT(differing(now.optimizer_state(), zero.optimizer_state()), ::testing::IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Cases, DataParallel, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Rank 0's scratch directory, known to every rank.
class SharedDir {
 public:
  SharedDir() {
    if (world()->rank() == 0) dir_ = std::make_unique<ScratchDir>();
    path_ = dir_ != nullptr ? dir_->path().string() : "";
    broadcast_string(*world(), path_, 0);
  }
  ~SharedDir() { world()->barrier(); }  // nobody still reads when rank 0 removes it
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::unique_ptr<ScratchDir> dir_;
  std::string path_;
};

class DataParallelResume : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelResume, IsExactWithTheSameRanksFromZeroOneAndWorksInOneProcess) {
  const Case& c = GetParam();
  const SharedDir dir;
  const std::string path = dir.file("checkpoint.safetensors");
  GPT whole_model = make_model(c);
  Trainer whole(whole_model, dp_options(c.recipe, c.accum, world()));
  std::vector<double> want;
  for (int64_t s = 0; s < 6; ++s) {
    want.push_back(step_on(whole, whole_model, s, my_first_row(), kRowsPerRank).loss);
  }
  // Three steps under ZeRO-1 with deferred reads (the step count on the device), a checkpoint,
  // three more: as ZeRO-1 (deferred), as plain data parallelism (reading every step), and in
  // one process.
  auto deferred_if = [](train::TrainerOptions o, bool deferred) {
    if (deferred) o.reads = train::StepReads::kDeferred;
    return o;
  };
  {
    GPT model = make_model(c);
    Trainer trainer(
        model,
        deferred_if(dp_options(c.recipe, c.accum, world(), ZeroStage::kOptimizerState), true));
    for (int64_t s = 0; s < 3; ++s) step_on(trainer, model, s, my_first_row(), kRowsPerRank);
    trainer.save(path);
  }
  EXPECT_TRUE(std::filesystem::exists(path));
  for (const ZeroStage zero : {ZeroStage::kOptimizerState, ZeroStage::kNone}) {
    GPT model = make_model(c, /*seed=*/77);  // another initialisation: the load must replace it
    Trainer trainer(model, deferred_if(dp_options(c.recipe, c.accum, world(), zero),
                                       zero == ZeroStage::kOptimizerState));
    trainer.load(path);
    for (int64_t s = 3; s < 6; ++s) {
      EXPECT_EQ(step_on(trainer, model, s, my_first_row(), kRowsPerRank).loss,
                want[static_cast<size_t>(s)])
          << "step " << s << ", ZeRO stage " << static_cast<int>(zero);
    }
    EXPECT_THAT(differing(model.state_dict(), whole_model.state_dict()), ::testing::IsEmpty());
  }
  GPT alone_model = make_model(c, 77);
  Trainer alone(alone_model, dp_options(c.recipe, c.accum, nullptr));
  const train::Checkpoint ckpt = train::read_checkpoint(path);
  EXPECT_EQ(train::checkpoint_world_size(ckpt), world()->size());
  alone.load(ckpt);
  EXPECT_EQ(alone.steps_done(), 3);
  for (int64_t s = 3; s < 6; ++s) {
    const double loss = step_on(alone, alone_model, s, 0, global_rows()).loss;
    EXPECT_NEAR(loss, want[static_cast<size_t>(s)], c.loss_tolerance * std::fabs(loss))
        << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DataParallelResume,
                         ::testing::Values(cases()[1], cases()[2], cases()[4]),
                         [](const auto& info) { return info.param.name; });

TEST(DataParallelAmax, ReduceAmaxFalseKeepsEachRanksOwnAmaxes) {
  for (const bool reduce : {true, false}) {
    Recipe recipe = Recipe::delayed();
    recipe.reduce_amax = reduce;
    GPT model(small_gpt(recipe, FP8PrimaryWeights::kNo));
    Trainer trainer(model, dp_options(recipe, 1, world()));
    step_on(trainer, model, 0, my_first_row(), kRowsPerRank);
    std::vector<std::string> amaxes;
    for (const std::string& name : differing_across_ranks(model.state_dict())) {
      if (name.find("amax_history") != std::string::npos) amaxes.push_back(name);
    }
    // Each rank casts other data: without the reduction, the activations' and gradients'
    // amaxes differ across ranks.
    if (reduce) {
      EXPECT_THAT(amaxes, ::testing::IsEmpty());
    } else {
      EXPECT_THAT(amaxes, ::testing::Contains(HasSubstr("fp8_meta.forward.0.amax_history")));
      EXPECT_THAT(amaxes, ::testing::Contains(HasSubstr("fp8_meta.backward.0.amax_history")));
    }
  }
}

TEST(DataParallelLaunch, DifferentOptionsOrWeightsFailOnEveryRankBeforeTheFirstStep) {
  const int last = world()->size() - 1;
  const bool odd_one = world()->rank() == last;
  GPT model(small_gpt(Recipe::delayed(), FP8PrimaryWeights::kNo));
  EXPECT_THAT(
      error_of([&] { Trainer t(model, dp_options(Recipe::delayed(), odd_one ? 3 : 2, world())); }),
      HasSubstr("Trainer options differ across ranks: rank " + std::to_string(last) +
                " has grad_accum=3 but rank 0 has grad_accum=2"));
  GPT seeded(small_gpt(Recipe::delayed(), FP8PrimaryWeights::kNo, DType::kF32, odd_one ? 10 : 9));
  EXPECT_THAT(error_of([&] { Trainer t(seeded, dp_options(Recipe::delayed(), 1, world())); }),
              HasSubstr("the model's state (build it from the same seed on every rank) differ "
                        "across ranks: rank " +
                        std::to_string(last) + "'s \"wte.weight\" is not rank 0's"));
}

TEST(DataParallelSteps, ANonFiniteLossOnOneRankSkipsTheStepOnEveryRank) {
  GPT model(small_gpt(Recipe::delayed(), FP8PrimaryWeights::kNo));
  Trainer trainer(model, dp_options(Recipe::delayed(), 1, world()));
  const bool odd_one = world()->rank() == world()->size() - 1;
  for (int64_t s = 0; s < 3; ++s) {
    const train::StepResult r = trainer.step([&](int64_t micro, modules::FirstMicrobatch first) {
      const Rows b = rows_of(s, micro, my_first_row(), kRowsPerRank);
      const Tensor loss = model.loss(b.ids, b.targets, first);
      return s == 1 && odd_one ? autograd::scale(loss, NAN) : loss;
    });
    EXPECT_EQ(r.skipped, s == 1) << "step " << s;
    EXPECT_THAT(differing_across_ranks(model.state_dict()), ::testing::IsEmpty()) << "step " << s;
  }
  EXPECT_EQ(trainer.skipped_steps(), 1);
}

TEST(DataParallelSteps, ANonFiniteLossOnOneRankSkipsTheStepOnEveryRankUnderDeferredReads) {
  // f32, 2 micro-batches, the last rank's second one poisoned: the gathered losses shut every
  // rank's gate alike, and reading every step agrees on every step, before and after the skip.
  for (ZeroStage zero : {ZeroStage::kNone, ZeroStage::kOptimizerState}) {
    SCOPED_TRACE(zero == ZeroStage::kNone ? "plain" : "ZeRO-1");
    train::TrainerOptions o = dp_options(std::nullopt, 2, world(), zero);
    o.reads = train::StepReads::kEveryStep;
    GPT now_model(small_gpt(std::nullopt, FP8PrimaryWeights::kNo));
    Trainer now(now_model, o);
    o.reads = train::StepReads::kDeferred;
    GPT later_model(small_gpt(std::nullopt, FP8PrimaryWeights::kNo));
    Trainer later(later_model, o);
    const bool odd_one = world()->rank() == world()->size() - 1;
    auto loss_of = [&](GPT& model, int64_t s) {
      return [&model, s, odd_one](int64_t micro, modules::FirstMicrobatch first) {
        const Rows b = rows_of(s, micro, my_first_row(), kRowsPerRank);
        const Tensor loss = model.loss(b.ids, b.targets, first);
        return s == 1 && micro == 1 && odd_one ? autograd::scale(loss, NAN) : loss;
      };
    };
    std::vector<train::StepResult> want;
    for (int64_t s = 0; s < 4; ++s) {
      want.push_back(now.step(loss_of(now_model, s)));
      later.run_step(loss_of(later_model, s));
    }
    EXPECT_EQ(later.skipped_steps(), 0);  // nothing read yet
    const std::vector<train::StepResult> got = later.results();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i + 1));
      EXPECT_EQ(got[i].skipped, i == 1);
      EXPECT_EQ(want[i].skipped, i == 1);
      if (i != 1) {
        EXPECT_EQ(got[i].loss, want[i].loss);
        EXPECT_EQ(got[i].grad_norm, want[i].grad_norm);
      }
    }
    EXPECT_EQ(later.skipped_steps(), 1);
    EXPECT_THAT(differing(now_model.state_dict(), later_model.state_dict()), ::testing::IsEmpty());
    EXPECT_THAT(differing_across_ranks(later_model.state_dict()), ::testing::IsEmpty());
  }
}

TEST(DataParallelLaunch, MixedReadModesFailOnEveryRankBeforeTheFirstStep) {
  const int last = world()->size() - 1;
  train::TrainerOptions o = dp_options(std::nullopt, 1, world());
  o.reads = world()->rank() == last ? train::StepReads::kDeferred : train::StepReads::kEveryStep;
  GPT model(small_gpt(std::nullopt, FP8PrimaryWeights::kNo));
  EXPECT_THAT(error_of([&] { Trainer t(model, o); }),
              HasSubstr("Trainer options differ across ranks: rank " + std::to_string(last) +
                        " has reads=deferred but rank 0 has reads=every step"));
}

TEST(DataParallelSteps, GradientBucketsStartReducingDuringTheBackward) {
  GPT model(small_gpt(Recipe::delayed(), FP8PrimaryWeights::kNo));
  Trainer trainer(model, dp_options(Recipe::delayed(), 1, world()));
  step_on(trainer, model, 0, my_first_row(), kRowsPerRank);
  const train::DataParallel* dp = trainer.data_parallel();
  ASSERT_NE(dp, nullptr);
  EXPECT_GE(dp->num_buckets(), 3u);
  // Every bucket started from a gradient hook, inside the backward: all but the last (the
  // token embedding's, whose gradient the pass ends with) while later nodes still ran.
  EXPECT_EQ(dp->started_in_backward(), dp->num_buckets());
}

// Over NCCL, one GPU per rank: run by tools/gpu-check on a machine with several GPUs (ctest runs
// the CPU tests only).
TEST(DataParallelCuda, EveryRankHoldsTheSameStateOnItsGpuAndZeroOneMatchesPlain) {
  if (cuda_device_count() < world()->size()) {
    GTEST_SKIP() << "skipped: " << world()->size() << " ranks need as many GPUs, "
                 << cuda_device_count() << " found (" << cuda_status() << ")";
  }
  const Device device = Device::cuda(world()->rank());
  const std::shared_ptr<Communicator> nccl = make_nccl_communicator(world(), device);
  const Case c{"delayed_primary", Recipe::delayed(), FP8PrimaryWeights::kYes};
  GPT plain_model = make_model(c);
  plain_model.to(device);
  Trainer plain(plain_model, dp_options(c.recipe, 1, nccl));
  GPT zero_model = make_model(c);
  zero_model.to(device);
  Trainer zero(zero_model, dp_options(c.recipe, 1, nccl, ZeroStage::kOptimizerState));
  auto step = [&](Trainer& t, GPT& m, int64_t s) {
    return t.step([&](int64_t micro, modules::FirstMicrobatch first) {
      const Rows b = rows_of(s, micro, my_first_row(), kRowsPerRank);
      return m.loss(b.ids.to(device), b.targets.to(device), first);
    });
  };
  for (int64_t s = 0; s < kSteps; ++s) {
    const train::StepResult p = step(plain, plain_model, s);
    const train::StepResult z = step(zero, zero_model, s);
    EXPECT_FALSE(p.skipped) << "step " << s;
    EXPECT_EQ(p.loss, z.loss) << "step " << s;
    EXPECT_THAT(differing_across_ranks(plain_model.state_dict()), ::testing::IsEmpty())
        << "step " << s;
    EXPECT_THAT(differing(plain_model.state_dict(), zero_model.state_dict()), ::testing::IsEmpty())
        << "step " << s;
  }
}

}  // namespace
}  // namespace octet::test::dist
