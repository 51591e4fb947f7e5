// The trainer on tiny configs: an interrupted run resumed from its checkpoint gives bit-identical
// losses, non-finite steps are skipped and too many stop the run keeping the last good
// checkpoint, and the run directory holds what it promises.
#include "tools/run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "runtime/parallel.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"
#include "tools/checkpoint.h"
#include "tools/metrics.h"

namespace octet::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A run of a few seconds: 1-layer GPT, sort 4 digits (sequence 7), 2 micro-batches of 8 per step
// so the FP8 weight cache (first micro-batch kYes, then kNo) is on the path being resumed.
config::RunConfig tiny(const std::string& dir, std::vector<std::string> sets = {}) {
  std::vector<std::string> all = {"model.n_layer=1",
                                  "model.d_model=32",
                                  "model.n_head=2",
                                  "data.task_digits=4",
                                  "training.steps=12",
                                  "training.batch_size=8",
                                  "training.grad_accum=2",
                                  "training.checkpoint_interval=4",
                                  "training.eval_interval=6",
                                  "training.eval_examples=24",
                                  "training.log_interval=1",
                                  "schedule.warmup_steps=3",
                                  "training.log_fp8_slots=true",
                                  "output.dir=" + dir};
  all.insert(all.end(), sets.begin(), sets.end());
  return config::load_config("", all);
}

std::vector<nlohmann::ordered_json> train_lines(const std::string& dir) {
  std::vector<nlohmann::ordered_json> out;
  for (auto& line : read_metrics(dir + "/metrics.jsonl")) {
    if (line.contains("loss")) out.push_back(std::move(line));
  }
  return out;
}

TEST(Trainer, InterruptedRunResumesWithBitIdenticalLosses) {
  test::ScratchDir scratch;
  std::ostringstream out;
  const config::RunConfig straight = tiny(scratch.file("straight"));
  const TrainResult a = train(straight, Resume::kNo, out, ProgressStyle::kQuiet);
  ASSERT_EQ(a.losses.size(), 12u);

  // Killed after step 6: the last checkpoint is step 4's, so steps 5 and 6 are run again.
  const config::RunConfig broken = tiny(scratch.file("broken"));
  TrainHooks kill;
  kill.interrupt_after_step = 6;
  const TrainResult b1 = train(broken, Resume::kNo, out, ProgressStyle::kQuiet, kill);
  EXPECT_EQ(b1.end_step, 6);
  EXPECT_FALSE(b1.final_eval.has_value());
  EXPECT_EQ(read_checkpoint(scratch.file("broken/checkpoint.safetensors")).state.step, 4);
  const TrainResult b2 = train(broken, Resume::kYes, out, ProgressStyle::kQuiet);
  EXPECT_EQ(b2.start_step, 4);
  ASSERT_EQ(b2.losses.size(), 8u);
  for (size_t i = 0; i < b2.losses.size(); ++i) {
    const auto [step, loss] = b2.losses[i];
    EXPECT_EQ(step, a.losses[i + 4].first);
    // Bit for bit: the same data, weights, FP8 scales and amax histories, optimizer moments.
    EXPECT_EQ(loss, a.losses[i + 4].second) << "step " << step;
  }
  ASSERT_TRUE(a.final_eval && b2.final_eval);
  EXPECT_EQ(a.final_eval->value, b2.final_eval->value);

  // metrics.jsonl lists each step once (the redone steps 5 and 6 replace the first attempt's).
  const auto la = train_lines(scratch.file("straight")), lb = train_lines(scratch.file("broken"));
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]["step"], lb[i]["step"]);
    EXPECT_EQ(la[i]["loss"], lb[i]["loss"]);
    EXPECT_EQ(la[i]["fp8_slots"], lb[i]["fp8_slots"]);
  }
  // And the final checkpoints hold the same bytes.
  const Checkpoint ca = read_checkpoint(scratch.file("straight/checkpoint.safetensors"));
  const Checkpoint cb = read_checkpoint(scratch.file("broken/checkpoint.safetensors"));
  ASSERT_EQ(ca.tensors.size(), cb.tensors.size());
  for (size_t i = 0; i < ca.tensors.size(); ++i) {
    const Tensor& x = ca.tensors[i].second;
    const Tensor& y = cb.tensors[i].second;
    ASSERT_EQ(x.nbytes(), y.nbytes()) << ca.tensors[i].first;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << ca.tensors[i].first;
  }
  EXPECT_EQ(ca.state.data, cb.state.data);
}

// 1 or 2 threads give the same bits (reductions in fixed chunks, GEMM tiles fixed by the shape),
// and a run checkpointed on 1 thread resumes on 2 bit-exactly: on a model whose GEMMs and
// elementwise loops are large enough to be split across threads.
TEST(Trainer, OneAndTwoThreadsGiveTheSameBitsAndAResumeMayChangeTheCount) {
  test::ScratchDir scratch;
  std::ostringstream out;
  const std::vector<std::string> wide = {"model.d_model=192",        "model.n_head=4",
                                         "training.batch_size=64",   "training.grad_accum=1",
                                         "training.eval_interval=0", "training.steps=8"};
  auto with = [&](const std::string& dir, const std::string& threads) {
    std::vector<std::string> sets = wide;
    sets.push_back("training.threads=" + threads);
    return tiny(scratch.file(dir), sets);
  };
  const TrainResult one = train(with("one", "1"), Resume::kNo, out, ProgressStyle::kQuiet);
  const TrainResult two = train(with("two", "2"), Resume::kNo, out, ProgressStyle::kQuiet);
  ASSERT_EQ(one.losses.size(), 8u);
  ASSERT_EQ(two.losses.size(), 8u);
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_EQ(one.losses[i].second, two.losses[i].second) << "step " << one.losses[i].first;
  }
  TrainHooks kill;
  kill.interrupt_after_step = 5;  // the last checkpoint is step 4's, written on 1 thread
  train(with("mixed", "1"), Resume::kNo, out, ProgressStyle::kQuiet, kill);
  const TrainResult resumed = train(with("mixed", "2"), Resume::kYes, out, ProgressStyle::kQuiet);
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    EXPECT_EQ(resumed.losses[i].second, one.losses[i + 4].second)
        << "step " << resumed.losses[i].first;
  }
  set_num_threads(available_cpus());
}

TEST(Trainer, ResumeWithFp8PrimaryWeightsIsBitIdentical) {
  test::ScratchDir scratch;
  std::ostringstream out;
  const std::vector<std::string> primary = {"model.fp8_primary_weights=true",
                                            "training.grad_accum=1", "training.eval_interval=0"};
  const TrainResult a =
      train(tiny(scratch.file("a"), primary), Resume::kNo, out, ProgressStyle::kQuiet);
  TrainHooks kill;
  kill.interrupt_after_step = 5;
  train(tiny(scratch.file("b"), primary), Resume::kNo, out, ProgressStyle::kQuiet, kill);
  const TrainResult b =
      train(tiny(scratch.file("b"), primary), Resume::kYes, out, ProgressStyle::kQuiet);
  ASSERT_EQ(b.losses.size(), 8u);
  for (size_t i = 0; i < b.losses.size(); ++i) {
    EXPECT_EQ(b.losses[i].second, a.losses[i + 4].second) << "step " << b.losses[i].first;
  }
  // The FP8 primary weights are stored as FP8 with their scale_inv.
  const Checkpoint c = read_checkpoint(scratch.file("a/checkpoint.safetensors"));
  int fp8 = 0;
  for (const auto& [name, t] : c.model) fp8 += is_fp8(t.dtype()) ? 1 : 0;
  EXPECT_GT(fp8, 0);
}

TEST(Trainer, ResumeRejectsAnIncompatibleConfig) {
  test::ScratchDir scratch;
  std::ostringstream out;
  train(tiny(scratch.file("r"), {"training.steps=4"}), Resume::kNo, out, ProgressStyle::kQuiet);
  const std::string e = test::error_of([&] {
    train(tiny(scratch.file("r"), {"model.d_model=64"}), Resume::kYes, out, ProgressStyle::kQuiet);
  });
  EXPECT_THAT(e, AllOf(HasSubstr("cannot resume"), HasSubstr("model.d_model=32"),
                       HasSubstr("model.d_model=64")));
  EXPECT_THAT(test::error_of([&] {
                train(tiny(scratch.file("none")), Resume::kYes, out, ProgressStyle::kQuiet);
              }),
              HasSubstr("no checkpoint at"));
}

TEST(Trainer, NonFiniteStepsAreSkippedAndTheRunGoesOn) {
  test::ScratchDir scratch;
  std::ostringstream out;
  TrainHooks hooks;
  hooks.poison_loss = [](int64_t step) { return step == 3 || step == 4; };
  const TrainResult r =
      train(tiny(scratch.file("n")), Resume::kNo, out, ProgressStyle::kQuiet, hooks);
  EXPECT_EQ(r.end_step, 12);
  EXPECT_EQ(r.skipped_steps, 2);
  EXPECT_TRUE(std::isnan(r.losses[2].second));
  EXPECT_TRUE(std::isfinite(r.losses[4].second));
  EXPECT_THAT(r.summary, HasSubstr("2 steps skipped"));
  const auto lines = train_lines(scratch.file("n"));
  EXPECT_EQ(lines[2]["loss"], "nan");  // still a JSON line, saying what happened
  EXPECT_EQ(lines.back()["skipped_steps"], 2);
}

TEST(Trainer, TooManyNonFiniteStepsStopKeepingTheLastGoodCheckpoint) {
  test::ScratchDir scratch;
  std::ostringstream out;
  TrainHooks hooks;
  hooks.poison_loss = [](int64_t step) { return step >= 6; };
  const config::RunConfig c = tiny(scratch.file("s"), {"training.max_nonfinite_steps=3"});
  const std::string e =
      test::error_of([&] { train(c, Resume::kNo, out, ProgressStyle::kQuiet, hooks); });
  EXPECT_THAT(e, AllOf(HasSubstr("stopped at step 8"), HasSubstr("3 steps in a row"),
                       HasSubstr("(step 4)")));
  EXPECT_EQ(read_checkpoint(scratch.file("s/checkpoint.safetensors")).state.step, 4);
}

TEST(Trainer, MetricsLinesAreCompactByDefault) {
  test::ScratchDir scratch;
  std::ostringstream out;
  const config::RunConfig c = tiny(scratch.file("d"), {"training.log_fp8_slots=false"});
  train(c, Resume::kNo, out, ProgressStyle::kQuiet);
  std::ifstream in(scratch.file("d/metrics.jsonl"));
  std::string first;
  std::getline(in, first);
  const auto line = nlohmann::ordered_json::parse(first);
  EXPECT_FALSE(line.contains("fp8_slots"));
  ASSERT_TRUE(line.contains("fp8")) << first;
  const auto& fp8 = line["fp8"];
  EXPECT_EQ(fp8["slots"], 20);  // 4 GEMMs x (3 forward + 2 backward) slots
  EXPECT_LE(fp8["scale_min"].get<double>(), fp8["scale_max"].get<double>());
  EXPECT_GE(fp8["saturated_fraction"].get<double>(), 0.0);
  EXPECT_TRUE(fp8["most_flushed"].is_string());
  EXPECT_TRUE(line["fp8_weights"]["most_saturated"].is_string());
  EXPECT_LT(first.size(), 700u) << first;
}

TEST(Trainer, LossCurveIsRewrittenAtEveryEvaluationInOneUnit) {
  test::ScratchDir scratch;
  std::ostringstream out;
  const config::RunConfig c = tiny(scratch.file("d"));
  TrainHooks stop;
  stop.interrupt_after_step = 7;  // after the evaluation at step 6, before the end
  train(c, Resume::kNo, out, ProgressStyle::kQuiet, stop);
  const std::string svg = test::read_file_bytes(scratch.file("d/loss.svg"));
  EXPECT_THAT(svg, AllOf(HasSubstr("training loss (nats per token)"),
                         HasSubstr("held-out loss (nats per token)"), HasSubstr("(log scale)"),
                         HasSubstr("held-out accuracy (%)")));
  const auto lines = read_metrics(scratch.file("d/metrics.jsonl"));
  bool eval_has_loss = false;
  for (const auto& l : lines) eval_has_loss |= l.contains("eval") && l["eval"]["loss"].is_number();
  EXPECT_TRUE(eval_has_loss);
}

TEST(Metrics, LogTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(log_ticks(0.03, 0.4), (std::vector<double>{0.02, 0.05, 0.1, 0.2, 0.5}));
  EXPECT_EQ(log_ticks(0.2, 0.2), (std::vector<double>{0.2, 2}));
  const std::vector<double> wide = log_ticks(1.5e-5, 2.3);  // over five decades: powers of ten
  EXPECT_EQ(wide.front(), 1e-5);
  EXPECT_EQ(wide.back(), 10);
  EXPECT_EQ(wide.size(), 7u);
}

TEST(Trainer, RunDirectoryHoldsConfigMetricsCurveAndFp8Health) {
  test::ScratchDir scratch;
  std::ostringstream out;
  const config::RunConfig c = tiny(scratch.file("d"));
  const TrainResult r = train(c, Resume::kNo, out, ProgressStyle::kLines);
  EXPECT_THAT(out.str(), AllOf(HasSubstr("step 12/12"), HasSubstr("held-out accuracy"),
                               HasSubstr("peak memory: total"), HasSubstr("optimizer"),
                               HasSubstr("done: 12 steps")));
  EXPECT_THAT(r.summary, HasSubstr("accuracy "));
  EXPECT_EQ(config::load_config(scratch.file("d/config.json")), c);
  const std::string svg = test::read_file_bytes(scratch.file("d/loss.svg"));
  EXPECT_THAT(svg, AllOf(HasSubstr("<svg"), HasSubstr("<polyline"), HasSubstr("</svg>")));
  const auto lines = train_lines(scratch.file("d"));
  ASSERT_EQ(lines.size(), 12u);
  const auto& last = lines.back();
  for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s"}) {
    EXPECT_TRUE(last[key].is_number()) << key;
  }
  // Five slots per GEMM (3 forward, 2 backward) for qkv, proj, fc1 and fc2 of the one layer.
  ASSERT_TRUE(last.contains("fp8_slots"));
  EXPECT_EQ(last["fp8_slots"].size(), 20u);
  const auto& weight_slot = last["fp8_slots"]["layers.0.mlp.forward.1"];
  EXPECT_GT(weight_slot["amax"].get<double>(), 0.0);
  EXPECT_GT(weight_slot["scale"].get<double>(), 1.0);
  // Every slot of every logged step has its cast counts as fractions in [0, 1], or null when
  // nothing was cast through it (the output and grad_input slots have no cast of their own).
  for (const auto& line : lines) {
    for (const auto& [name, slot] : line["fp8_slots"].items()) {
      for (const char* key : {"saturated_fraction", "flushed_fraction"}) {
        ASSERT_TRUE(slot.contains(key)) << name << " " << key;
        const auto& f = slot[key];
        ASSERT_TRUE(f.is_null() || f.is_number()) << name << " " << key << ": " << f;
        if (f.is_number()) {
          EXPECT_GE(f.get<double>(), 0.0) << name << " " << key;
          EXPECT_LE(f.get<double>(), 1.0) << name << " " << key;
        }
      }
    }
  }
  // Activations (fc1 input through the fused norm + cast, fc2 input through the plain cast),
  // weights and gradients are all measured, forward and backward.
  for (const char* slot :
       {"layers.0.mlp.forward.0", "layers.0.mlp.forward.1", "layers.0.mlp.forward.3",
        "layers.0.mlp.backward.0", "layers.0.mlp.backward.2"}) {
    ASSERT_TRUE(last["fp8_slots"].contains(slot)) << slot;
    EXPECT_TRUE(last["fp8_slots"][slot]["saturated_fraction"].is_number()) << slot;
    EXPECT_TRUE(last["fp8_slots"][slot]["flushed_fraction"].is_number()) << slot;
  }
  EXPECT_TRUE(last["fp8_slots"]["layers.0.mlp.forward.2"]["saturated_fraction"].is_null());
  ASSERT_TRUE(last.contains("fp8_weights"));
  EXPECT_EQ(last["fp8_weights"].size(), 4u);
  for (const auto& [name, w] : last["fp8_weights"].items()) {
    EXPECT_GE(w["saturated"].get<double>(), 0.0) << name;
    EXPECT_LE(w["saturated"].get<double>(), 1.0) << name;
    EXPECT_GE(w["flushed_to_zero"].get<double>(), 0.0) << name;
  }
}

// The built-in default run with bf16 parameters and activations (model.dtype; f32 master weights
// and moments in the optimizer) reaches 99% on the CPU with FP8 and without; the checkpoint holds
// bf16 weights and records the key. (Suite GPTTraining: the long runs the sanitizer phase skips.)
TEST(GPTTraining, Bf16DefaultRunReaches99PercentWithAndWithoutFp8) {
  for (const bool fp8 : {true, false}) {
    SCOPED_TRACE(fp8 ? "FP8 delayed" : "bf16 GEMMs");
    test::ScratchDir scratch;
    std::ostringstream out;
    const config::RunConfig c = config::load_config(
        "", {"model.dtype=bf16", std::string("fp8.enabled=") + (fp8 ? "true" : "false"),
             "training.eval_interval=0", "output.dir=" + scratch.file("d")});
    const TrainResult r = train(c, Resume::kNo, out, ProgressStyle::kQuiet);
    ASSERT_TRUE(r.final_eval.has_value());
    EXPECT_GE(r.final_eval->value, 0.99) << r.summary;
    const Checkpoint ckpt = read_checkpoint(scratch.file("d/checkpoint.safetensors"));
    EXPECT_EQ(ckpt.state.config.model.dtype, "bf16");
    bool saw_bf16 = false;
    for (const auto& [name, t] : ckpt.model) {
      if (name == "wte.weight") saw_bf16 = t.dtype() == DType::kBF16;
    }
    EXPECT_TRUE(saw_bf16) << "the token embedding is not stored in bf16";
  }
}

}  // namespace
}  // namespace octet::cli
