// The `octet` program end to end through run_octet (what main() calls): train -> checkpoint ->
// resume -> eval -> generate -> inspect on a tiny run, and bad input as one clear line.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/safetensors.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"
#include "tests/tools/cli_test_util.h"
#include "tools/commands.h"

namespace octet::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using namespace test_cli;  // NOLINT: octet, Outcome, tiny_train, expect_one_clear_line

TEST(Cli, NoArgumentsOrHelpPrintsUsage) {
  for (const Args& args : {Args{}, Args{"--help"}, Args{"help", "train"}, Args{"eval", "--help"},
                           Args{"generate", "-h"}, Args{"inspect", "--help"}}) {
    const Outcome r = octet(args);
    EXPECT_EQ(r.code, 0);
    EXPECT_THAT(r.out, HasSubstr("usage: octet"));
    EXPECT_EQ(r.err, "");
  }
  EXPECT_THAT(octet({}).out, AllOf(HasSubstr("train"), HasSubstr("eval"), HasSubstr("generate"),
                                   HasSubstr("bench"), HasSubstr("inspect")));
}

TEST(Cli, BadInputIsOneClearLine) {
  const Outcome unknown = octet({"fly"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown command \"fly\""));
  expect_one_clear_line(octet({"train", "--bogus"}), "train", "unknown option --bogus");
  expect_one_clear_line(octet({"train", "--config"}), "train", "--config needs a value");
  expect_one_clear_line(octet({"train", "--set", "model.n_layers=3"}), "train", "model.n_layers");
  expect_one_clear_line(octet({"train", "--set", "optimizer.lr=-1"}), "train", "optimizer.lr");
  expect_one_clear_line(octet({"train", "--config", "/nonexistent/run.json"}), "train",
                        "/nonexistent/run.json");
  expect_one_clear_line(octet({"eval"}), "eval", "--checkpoint is required");
  expect_one_clear_line(octet({"generate", "--checkpoint", "x"}), "generate",
                        "--prompt is required");
  expect_one_clear_line(octet({"inspect"}), "inspect", "expected one checkpoint path");
  expect_one_clear_line(octet({"inspect", "/nonexistent.safetensors"}), "inspect",
                        "/nonexistent.safetensors");
  expect_one_clear_line(octet({"train", "--set", "data.kind=text", "--set", "model.seq_len=8"}),
                        "train", "data.path");
  if (cuda_device_count() == 0) {
    expect_one_clear_line(octet({"train", "--set", "training.device=cuda"}), "train",
                          "no CUDA device");
  }
}

TEST(Cli, TrainResumeEvalGenerateInspect) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("run");
  const std::string ckpt = dir + "/checkpoint.safetensors";

  const Outcome train = octet(tiny_train(dir));
  ASSERT_EQ(train.code, 0) << train.err;
  EXPECT_THAT(train.out, AllOf(HasSubstr("done: 6 steps"), HasSubstr("accuracy ")));
  for (const char* f : {"config.json", "metrics.jsonl", "loss.svg", "checkpoint.safetensors"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  }

  // Resume with the saved config, extended by --set.
  const Outcome more =
      octet({"train", "--quiet", "--resume", "--out", dir, "--set", "training.steps=9"});
  ASSERT_EQ(more.code, 0) << more.err;
  EXPECT_THAT(more.out, HasSubstr("done: 9 steps"));

  const Outcome eval = octet({"eval", "--checkpoint", ckpt, "--examples", "40"});
  ASSERT_EQ(eval.code, 0) << eval.err;
  EXPECT_THAT(eval.out, AllOf(HasSubstr("accuracy "), HasSubstr("on 40 held-out examples"),
                              HasSubstr("step 9")));
  const Outcome eval_json = octet({"eval", "--checkpoint", ckpt, "--json"});
  ASSERT_EQ(eval_json.code, 0) << eval_json.err;
  const auto j = nlohmann::json::parse(eval_json.out);
  EXPECT_EQ(j["metric"], "accuracy");
  EXPECT_EQ(j["examples"], 16);
  EXPECT_GE(j["value"].get<double>(), 0.0);

  const Outcome gen = octet({"generate", "--checkpoint", ckpt, "--prompt", "3141>"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  const std::string first_line = gen.out.substr(0, gen.out.find('\n'));
  EXPECT_THAT(first_line, StartsWith("3141>"));
  EXPECT_EQ(first_line.size(), 9u);  // the prompt and the 4-digit answer
  EXPECT_EQ(gen.out, first_line + "\n") << "stdout holds only the generated text";
  // Inference mode: nothing for backward, no optimizer, no column-wise copies (on stderr).
  EXPECT_THAT(gen.err, AllOf(HasSubstr("0 B FP8 column-wise"), HasSubstr("0 B saved for backward"),
                             HasSubstr("0 B optimizer state")));
  const Outcome sampled = octet({"generate", "--checkpoint", ckpt, "--prompt", "3141>",
                                 "--temperature", "1.5", "--seed", "7", "--max-new-tokens", "3"});
  ASSERT_EQ(sampled.code, 0) << sampled.err;
  EXPECT_EQ(sampled.out.find('\n'), 8u);
  expect_one_clear_line(octet({"generate", "--checkpoint", ckpt, "--prompt", "31x1>"}), "generate",
                        "x");

  const Outcome inspect = octet({"inspect", ckpt});
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_THAT(inspect.out, AllOf(HasSubstr("trainer: step 9"), HasSubstr("FP8 metas (20 slots)"),
                                 HasSubstr("bytes by usage"), HasSubstr("optimizer state"),
                                 HasSubstr("\"n_layer\": 1")));
  const Outcome inspect_json = octet({"inspect", ckpt, "--json"});
  ASSERT_EQ(inspect_json.code, 0) << inspect_json.err;
  const auto i = nlohmann::json::parse(inspect_json.out);
  EXPECT_EQ(i["trainer"]["step"], 9);
  EXPECT_EQ(i["fp8_metas"].size(), 20u);
  EXPECT_GT(i["bytes_by_usage"]["optimizer"].get<int64_t>(), 0);
  EXPECT_GT(i["bytes_by_usage"]["master"].get<int64_t>(), 0);
  EXPECT_EQ(i["bytes_by_usage"]["fp8_columnwise"], 0);
  int64_t sum = 0;
  for (const auto& t : i["tensors"]) sum += t["bytes"].get<int64_t>();
  const auto& u = i["bytes_by_usage"];
  EXPECT_EQ(sum, u["fp8_rowwise"].get<int64_t>() + u["master"].get<int64_t>() +
                     u["optimizer"].get<int64_t>() + u["fp8_meta"].get<int64_t>());
}

TEST(Cli, Fp8PrimaryWeightsLoadRowwiseOnlyForInference) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("p");
  ASSERT_EQ(octet(tiny_train(dir, {"--set", "model.fp8_primary_weights=true"})).code, 0);
  const std::string ckpt = dir + "/checkpoint.safetensors";
  const Outcome gen = octet({"generate", "--checkpoint", ckpt, "--prompt", "9120>"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  // 4 GEMM weights of the one layer: qkv (96x32), proj (32x32), fc1 (128x32), fc2 (32x128), one
  // byte each, row-wise only.
  EXPECT_THAT(gen.err, HasSubstr("weights 12.0 KiB FP8 row-wise, 0 B FP8 column-wise"));
  const auto i = nlohmann::json::parse(octet({"inspect", ckpt, "--json"}).out);
  EXPECT_EQ(i["bytes_by_usage"]["fp8_rowwise"], (96 + 32 + 128 + 128) * 32 + 4 * 4);
}

// fp8.high_precision_after: a run that ended past its switch is evaluated as it trained (the
// forward in high precision), by `octet eval` as by the run's own final evaluation.
TEST(Cli, EvalOfARunPastItsHighPrecisionSwitchEvaluatesAsTheRunDid) {
  test::ScratchDir scratch;
  const std::string text = scratch.file("t.txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "the quick brown fox " << i << " jumps over the lazy dog\n";
  }
  const std::string dir = scratch.file("hp");
  const Outcome train =
      octet(tiny_train(dir, {"--set", "data.kind=text", "--set", "data.path=" + text, "--set",
                             "model.seq_len=32", "--set", "fp8.high_precision_after=0.5", "--set",
                             "fp8.recipe={\"recipe\":\"current\"}"}));
  ASSERT_EQ(train.code, 0) << train.err;
  double final_eval = -1;
  std::ifstream metrics(dir + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval")) final_eval = j["eval"]["value"].get<double>();
  }
  const Outcome eval = octet({"eval", "--checkpoint", dir + "/checkpoint.safetensors", "--json"});
  ASSERT_EQ(eval.code, 0) << eval.err;
  EXPECT_EQ(nlohmann::json::parse(eval.out)["value"].get<double>(), final_eval);
}

// fp8.high_precision_backward: the run trains (its losses neither the FP8 run's nor f32's) and
// refuses fp8.high_precision_after beside it, naming both keys.
TEST(Cli, HighPrecisionBackwardTrainsAndRefusesTheForwardSwitchBesideIt) {
  test::ScratchDir scratch;
  const auto last_loss = [](const std::string& dir) {
    double loss = -1;
    std::ifstream metrics(dir + "/metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) loss = j["loss"].get<double>();
    }
    return loss;
  };
  std::vector<double> losses;
  for (const char* mode : {"fp8", "backward", "f32"}) {
    const std::string dir = scratch.file(mode);
    std::vector<std::string> sets = {"--set", "fp8.recipe={\"recipe\":\"current\"}"};
    if (std::string(mode) == "backward") {
      sets.insert(sets.end(), {"--set", "fp8.high_precision_backward=true"});
    }
    if (std::string(mode) == "f32") sets.insert(sets.end(), {"--set", "fp8.enabled=false"});
    const Outcome train = octet(tiny_train(dir, sets));
    ASSERT_EQ(train.code, 0) << train.err;
    losses.push_back(last_loss(dir));
    ASSERT_GT(losses.back(), 0) << mode;
  }
  EXPECT_NE(losses[1], losses[0]);
  EXPECT_NE(losses[1], losses[2]);
  const Outcome both =
      octet(tiny_train(scratch.file("both"), {"--set", "fp8.high_precision_backward=true", "--set",
                                              "fp8.high_precision_after=0.5"}));
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.err.find("fp8.high_precision_backward"), std::string::npos) << both.err;
  EXPECT_NE(both.err.find("fp8.high_precision_after"), std::string::npos) << both.err;
}

// The block formats' checkpoints say how their bytes are laid out, and inspect shows it.
TEST(Cli, BlockFormatCheckpointsRecordTheirBlocksAndPacking) {
  test::ScratchDir scratch;
  for (const auto& [recipe, blocks] :
       {std::pair{"blockwise", "128x128"}, std::pair{"nvfp4", "16x16"}}) {
    const std::string dir = scratch.file(recipe);
    const Outcome train =
        octet(tiny_train(dir, {"--set", fmt::format("fp8.recipe={{\"recipe\":\"{}\"}}", recipe),
                               "--set", "model.fp8_primary_weights=true"}));
    ASSERT_EQ(train.code, 0) << train.err;
    const std::string ckpt = dir + "/checkpoint.safetensors";
    const Outcome text = octet({"inspect", ckpt});
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_THAT(text.out, AllOf(HasSubstr(fmt::format("  {}: ", recipe)),
                                HasSubstr(fmt::format("blocks: {}", blocks))))
        << text.out;
    const auto i = nlohmann::json::parse(octet({"inspect", ckpt, "--json"}).out);
    ASSERT_EQ(i["quantized_weights"].size(), 4u) << i.dump();
    for (const auto& w : i["quantized_weights"]) {
      EXPECT_EQ(w["format"], recipe);
      EXPECT_EQ(w["attributes"]["blocks"], blocks) << w.dump();
    }
    if (std::string(recipe) == "nvfp4") {
      // Two e2m1 values a byte, stored as U8: fc1's (128, 32) weight is 128 x 16 bytes.
      const auto& w = i["quantized_weights"][2];
      EXPECT_NE(w["attributes"]["packing"].get<std::string>().find("low nibble"),
                std::string::npos);
      bool found = false;
      for (const auto& t : i["tensors"]) {
        if (t["name"] != w["name"]) continue;
        found = true;
        EXPECT_EQ(t["dtype"], "U8");
        EXPECT_EQ(t["bytes"], 128 * 16) << t.dump();
      }
      EXPECT_TRUE(found) << w["name"];
    }
  }
}

TEST(Cli, CorruptTruncatedOrForeignCheckpointsAreClearErrors) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("c");
  ASSERT_EQ(octet(tiny_train(dir)).code, 0);
  const std::string good = test::read_file_bytes(dir + "/checkpoint.safetensors");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(scratch.file(name), std::ios::binary) << bytes;
    return scratch.file(name);
  };
  const std::string truncated = write("truncated.safetensors", good.substr(0, good.size() / 2));
  expect_one_clear_line(octet({"inspect", truncated}), "inspect", truncated);
  expect_one_clear_line(octet({"eval", "--checkpoint", truncated}), "eval", truncated);
  std::string garbled = good;
  garbled[10] = '#';  // inside the JSON header
  const std::string bad_header = write("garbled.safetensors", garbled);
  expect_one_clear_line(octet({"inspect", bad_header}), "inspect", bad_header);
  const std::string foreign = scratch.file("foreign.safetensors");
  save_safetensors(foreign, {{"w", Tensor::zeros({2, 2}, DType::kF32)}});
  expect_one_clear_line(octet({"inspect", foreign}), "inspect", "not an octet checkpoint");
  // Resuming a run with a shape-changing key is refused before anything is touched.
  expect_one_clear_line(octet(tiny_train(dir, {"--resume", "--set", "model.d_model=64"})), "train",
                        "model.d_model");
  EXPECT_EQ(test::read_file_bytes(dir + "/checkpoint.safetensors"), good);
}

TEST(Cli, GenerateSamplesStopsAndReportsItsCache) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("run"), ckpt = dir + "/checkpoint.safetensors";
  ASSERT_EQ(octet(tiny_train(dir)).code, 0);
  const Args base = {"generate", "--checkpoint",     ckpt, "--prompt-ids",
                     "3,1,4,1",  "--max-new-tokens", "12"};
  auto with = [&](const Args& more) {
    Args a = base;
    a.insert(a.end(), more.begin(), more.end());
    return octet(a);
  };
  const Outcome cached = with({}), plain = with({"--no-cache"});
  ASSERT_EQ(cached.code, 0) << cached.err;
  EXPECT_EQ(cached.out, plain.out) << "greedy tokens over the cache and without one";
  EXPECT_THAT(cached.err, HasSubstr("key/value cache "));
  EXPECT_THAT(plain.err, HasSubstr("key/value cache 0 B"));
  // --eos-id cuts the output at the first such token.
  const std::string first = cached.out.substr(0, cached.out.find_first_of(",\n"));
  const Outcome stopped = with({"--eos-id", first});
  EXPECT_EQ(stopped.out, "\n") << "the first token is the end: nothing is printed";
  // Sampling: reproducible by seed; top-k 1 is greedy.
  const Outcome a = with({"--temperature", "2", "--seed", "5", "--top-p", "0.9"});
  EXPECT_EQ(a.out, with({"--temperature", "2", "--seed", "5", "--top-p", "0.9"}).out);
  EXPECT_EQ(with({"--temperature", "2", "--top-k", "1"}).out, cached.out);
  test_cli::expect_one_clear_line(with({"--top-p", "0"}), "generate", "--top-p");
  test_cli::expect_one_clear_line(with({"--eos-id", "99"}), "generate", "--eos-id: 99");
}

}  // namespace
}  // namespace octet::cli
