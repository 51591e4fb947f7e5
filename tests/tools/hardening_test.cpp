// What a new user did that lost a run or ended in an unclear message, each with the test that
// would have caught it; and hostile input to every parser of the tools layer, which ends as one
// octet::Error naming the file and the key or offset.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/dataset.h"
#include "data/token_data.h"
#include "runtime/error.h"
#include "runtime/rng.h"
#include "runtime/safetensors.h"
#include "tests/support/only_octet_errors.h"
#include "tests/support/scratch_dir.h"
#include "tests/tools/cli_test_util.h"
#include "tools/checkpoint.h"
#include "tools/commands.h"
#include "tools/config.h"
#include "tools/metrics.h"

namespace octet::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using namespace test_cli;  // NOLINT: octet, Outcome, tiny_train, expect_one_clear_line

std::string read(const std::string& path) { return test::read_file_bytes(path); }

// ---- a new user's runs and messages ----

// Finding 1: a finished run was replaced by a new one without a word.
TEST(Hardening, ARunDirectoryIsRefusedWithoutResumeOrOverwrite) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("run");
  ASSERT_EQ(octet(tiny_train(dir)).code, 0);
  const std::string config = read(dir + "/config.json");
  const std::string metrics = read(dir + "/metrics.jsonl");
  const std::string ckpt = read(dir + "/checkpoint.safetensors");

  const Outcome again = octet(tiny_train(dir, {"--set", "training.seed=5"}));
  expect_one_clear_line(again, "train", "holds a run");
  EXPECT_THAT(again.err, AllOf(HasSubstr("--resume"), HasSubstr("--overwrite"), HasSubstr(dir)));
  EXPECT_EQ(read(dir + "/config.json"), config);
  EXPECT_EQ(read(dir + "/metrics.jsonl"), metrics);
  EXPECT_EQ(read(dir + "/checkpoint.safetensors"), ckpt);
  expect_one_clear_line(octet(tiny_train(dir, {"--resume", "--overwrite"})), "train",
                        "give one of them");

  const Outcome replaced = octet(tiny_train(dir, {"--overwrite", "--set", "training.seed=5"}));
  ASSERT_EQ(replaced.code, 0) << replaced.err;
  EXPECT_NE(read(dir + "/checkpoint.safetensors"), ckpt);
  EXPECT_THAT(octet({"train", "--help"}).out, HasSubstr("--overwrite"));
}

std::vector<uint16_t> tokens(uint64_t seed, int64_t n, uint32_t vocab) {
  Generator gen(seed);
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<uint16_t>(gen.next_u32() % vocab);
  return t;
}

// Finding 2: eval --data F on a shard run with data.val_path evaluated the saved val_path.
TEST(Hardening, EvalDataReplacesTheRunsValidationShards) {
  test::ScratchDir scratch;
  const std::string train = scratch.file("train.bin"), val = scratch.file("val.bin"),
                    other = scratch.file("other.bin");
  data::write_token_shard(train, tokens(1, 4096, 64));
  data::write_token_shard(val, tokens(2, 4096, 64));
  std::vector<uint16_t> ones(4096, 1);
  data::write_token_shard(other, ones);
  const std::string dir = scratch.file("run");
  const Outcome r = octet(tiny_train(
      dir, {"--set", "data.kind=shards", "--set", "data.path=" + train, "--set",
            "data.val_path=" + val, "--set", "model.seq_len=16", "--set", "model.vocab=64"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string ckpt = dir + "/checkpoint.safetensors";
  auto loss = [&](const Args& more) {
    Args a = {"eval", "--checkpoint", ckpt, "--json"};
    a.insert(a.end(), more.begin(), more.end());
    const Outcome e = octet(a);
    EXPECT_EQ(e.code, 0) << e.err;
    const auto j = nlohmann::json::parse(e.out);
    return std::pair{j["value"].get<double>(), j["data"].get<std::string>()};
  };
  const auto saved = loss({});
  const auto same = loss({"--data", val});
  const auto [value, described] = loss({"--data", other});
  EXPECT_EQ(same.first, saved.first);
  EXPECT_NE(value, saved.first) << "--data " << other << " was not what got evaluated";
  EXPECT_THAT(described, HasSubstr("other.bin"));
  EXPECT_THAT(described, Not(HasSubstr("val.bin")));
}

// Finding 3: a recipe given as a file path was stored as the path.
TEST(Hardening, ARunRecordsItsRecipeNotThePathItCameFrom) {
  test::ScratchDir scratch;
  const std::string recipe = scratch.file("recipe.json");
  test::write_file_bytes(recipe, R"({"recipe": "current"})");
  const std::string dir = scratch.file("run");
  ASSERT_EQ(octet(tiny_train(dir, {"--set", "fp8.recipe=" + recipe})).code, 0);
  const auto config = nlohmann::json::parse(read(dir + "/config.json"));
  ASSERT_TRUE(config["fp8"]["recipe"].is_object()) << config["fp8"].dump();
  EXPECT_EQ(config["fp8"]["recipe"]["recipe"], "current");
  const Checkpoint ckpt = read_checkpoint(dir + "/checkpoint.safetensors");
  EXPECT_TRUE(ckpt.state.config.fp8.recipe.is_object());

  // Edited to another recipe: resuming with the path is refused, naming the key.
  test::write_file_bytes(recipe, R"({"recipe": "mxfp8"})");
  expect_one_clear_line(octet(tiny_train(dir, {"--resume", "--set", "fp8.recipe=" + recipe, "--set",
                                               "training.steps=8"})),
                        "train", "fp8.recipe");
  // Moved away: eval and resume go on from what the run recorded.
  fs::remove(recipe);
  EXPECT_EQ(octet({"eval", "--checkpoint", dir + "/checkpoint.safetensors"}).code, 0);
  const Outcome more =
      octet({"train", "--quiet", "--resume", "--out", dir, "--set", "training.steps=8"});
  EXPECT_EQ(more.code, 0) << more.err;
}

// Finding 4: checkpoint.safetensors.tmp.<pid> files of killed runs stayed forever.
TEST(Hardening, TemporaryCheckpointsOfKilledRunsAreRemoved) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("run");
  ASSERT_EQ(octet(tiny_train(dir)).code, 0);
  // Not this process's pid: the in-process run writes its own temporary file under that name.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // a pid whose process is gone
  const std::string dead = fmt::format("{}/checkpoint.safetensors.tmp.{}", dir, child);
  const std::string live = fmt::format("{}/checkpoint.safetensors.tmp.{}", dir, ::getppid());
  const std::string other = dir + "/checkpoint.safetensors.tmp.notapid";
  for (const std::string& f : {dead, live, other}) test::write_file_bytes(f, "partial");
  const Outcome more =
      octet({"train", "--quiet", "--resume", "--out", dir, "--set", "training.steps=7"});
  ASSERT_EQ(more.code, 0) << more.err;
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live)) << "a live process may be writing it";
  EXPECT_TRUE(fs::exists(other)) << "not a name octet writes";
}

// Finding 5: a torn last line of metrics.jsonl (a kill mid-write) made --resume refuse.
TEST(Hardening, ResumeDropsATornLastMetricsLine) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("run");
  ASSERT_EQ(octet(tiny_train(dir, {"--set", "training.log_interval=1"})).code, 0);
  const std::string metrics = dir + "/metrics.jsonl";
  std::ofstream(metrics, std::ios::app) << R"({"step": 7, "loss": 2.5, "l)";
  const Outcome more =
      octet({"train", "--quiet", "--resume", "--out", dir, "--set", "training.steps=8"});
  ASSERT_EQ(more.code, 0) << more.err;
  std::vector<int64_t> steps;
  for (const auto& line : read_metrics(metrics)) {
    if (!line.contains("eval")) steps.push_back(line["step"].get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_FALSE(fs::exists(metrics + ".tmp"));
  // A malformed line that is not the last is still an error naming the file and line.
  test::write_file_bytes(metrics, "{\"step\": 1}\nnot json\n{\"step\": 2}\n");
  EXPECT_THROW(
      {
        try {
          MetricsLog(metrics, MetricsOpen::kResumeAt, 8);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr(metrics + ":2"));
          throw;
        }
      },
      Error);
  // So is a line whose values have types octet never writes (they escaped as JSON type errors).
  for (const char* bad :
       {R"({"step": "1"})", R"({"step": 1.5})", R"({"step": 1e300})", R"({"step": null})",
        R"({"step": 1, "eval": 3})", R"({"step": 1, "eval": [1]})"}) {
    test::write_file_bytes(metrics, "{\"step\": 1}\n" + std::string(bad) + "\n");
    for (const bool resume : {true, false}) {
      try {
        if (resume) {
          MetricsLog(metrics, MetricsOpen::kResumeAt, 8);
        } else {
          read_metrics(metrics);
        }
        ADD_FAILURE() << bad << " was read";
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr(metrics + ":2")) << bad;
      }
    }
  }
  // What octet writes for a non-finite loss reads back, and the cut keeps it.
  test::write_file_bytes(metrics,
                         "{\"step\": 1, \"loss\": \"nan\"}\n"
                         "{\"step\": 2, \"eval\": {\"loss\": null, \"value\": 50}}\n"
                         "{\"step\": 9, \"loss\": \"-inf\"}\n");
  MetricsLog(metrics, MetricsOpen::kResumeAt, 8);
  EXPECT_EQ(read_metrics(metrics).size(), 2u);
}

// Finding 6: bytes that are not UTF-8 and numbers past double range escaped as json.exception.
TEST(Hardening, NonUtf8AndOverflowingValuesNameTheirKeyAndFile) {
  test::ScratchDir scratch;
  expect_one_clear_line(octet({"train", "--set", "training.seed=12\xcd"}), "train",
                        "training.seed");
  expect_one_clear_line(octet({"train", "--set", "data.kind=text", "--set", "model.seq_len=8",
                               "--set", "data.path=" + scratch.file("caf\xe9.txt")}),
                        "train", "data.path");
  expect_one_clear_line(octet(tiny_train(scratch.file("caf\xe9"))), "train", "output.dir");
  expect_one_clear_line(octet({"train", "--set", "fp8.high_precision_modules=[\"a\xff\"]"}),
                        "train", "fp8.high_precision_modules");

  const std::string recipe = scratch.file("big.json");
  test::write_file_bytes(recipe, R"({"recipe": "delayed", "margin": 1e999})");
  const Outcome file = octet({"train", "--set", "fp8.recipe=" + recipe});
  expect_one_clear_line(file, "train", recipe);
  EXPECT_THAT(file.err, HasSubstr("fp8.recipe"));
  const Outcome inline_recipe =
      octet({"train", "--set", R"(fp8.recipe={"recipe": "delayed", "margin": 1e999})"});
  expect_one_clear_line(inline_recipe, "train", "fp8.recipe");
  EXPECT_THAT(inline_recipe.err,
              AllOf(HasSubstr("inline recipe"), Not(HasSubstr("cannot open recipe file"))));
  const std::string config = scratch.file("big_config.json");
  test::write_file_bytes(config, R"({"optimizer": {"lr": 1e999}})");
  expect_one_clear_line(octet({"train", "--config", config}), "train", config);
}

// Finding 7: a directory as --config or text data.path read as "basic_filebuf::underflow".
TEST(Hardening, ADirectoryWhereAFileBelongsIsNamed) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("adir");
  fs::create_directories(dir);
  const Outcome config = octet({"train", "--config", dir});
  expect_one_clear_line(config, "train", dir + " is a directory");
  const Outcome text =
      octet(tiny_train(scratch.file("run"), {"--set", "data.kind=text", "--set", "model.seq_len=8",
                                             "--set", "data.path=" + dir}));
  expect_one_clear_line(text, "train", dir + " is a directory");
  expect_one_clear_line(octet({"train", "--set", "fp8.recipe=" + dir}), "train",
                        dir + " is a directory");
}

// Finding 8: 2^53 + 1 passed the range check as the double 2^53.
TEST(Hardening, IntegerRangesAreExact) {
  config::RunConfig c;
  config::apply_override(c, "training.seed=9007199254740992");
  EXPECT_EQ(c.training.seed, int64_t{9007199254740992});
  for (const char* bad : {"training.seed=9007199254740993", "data.seed=9007199254740993",
                          "training.seed=18446744073709551615"}) {
    try {
      config::apply_override(c, bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("9007199254740992]")) << e.what();
    }
  }
}

// Finding 9: a checkpoint's values were not validated.
TEST(Hardening, CheckpointValuesAreValidatedOnLoad) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("run");
  ASSERT_EQ(octet(tiny_train(dir)).code, 0);
  const SafetensorsFile good = load_safetensors(dir + "/checkpoint.safetensors");
  std::string scale, scale_inv;
  for (const auto& [name, t] : good.tensors) {
    if (scale.empty() && name.find("fp8_meta.forward") != std::string::npos &&
        name.ends_with(".scale"))
      scale = name;
    if (scale_inv.empty() && name.ends_with(".scale_inv")) scale_inv = name;
  }
  ASSERT_FALSE(scale.empty());
  ASSERT_FALSE(scale_inv.empty());
  int n = 0;
  auto broken = [&](const std::string& tensor, auto set) {
    NamedTensors tensors;
    for (const auto& [name, t] : good.tensors) {
      Tensor copy = t.clone();
      if (name == tensor) set(copy);
      tensors.emplace_back(name, copy);
    }
    const std::string path = scratch.file(fmt::format("broken{}.safetensors", n++));
    save_safetensors(path, tensors, good.metadata);
    return path;
  };
  for (const float v : {std::nanf(""), 0.f, std::numeric_limits<float>::infinity(), -1.f}) {
    for (const std::string& tensor : {scale, scale_inv}) {
      const std::string path = broken(tensor, [&](Tensor& t) { t.data_as<float>()[0] = v; });
      const Outcome r = octet({"eval", "--checkpoint", path});
      expect_one_clear_line(r, "eval", path);
      // Named as the model's tensor (the file's name less "model."), by the owner of the scale.
      EXPECT_THAT(r.err, AllOf(HasSubstr('"' + tensor.substr(tensor.find('.') + 1) + '"'),
                               HasSubstr("FP8 scale")))
          << v;
    }
  }
  const std::string step =
      broken("optimizer.step", [](Tensor& t) { t.data_as<int64_t>()[0] = -3; });
  const Outcome r = octet({"inspect", step});
  expect_one_clear_line(r, "inspect", step);
  EXPECT_THAT(r.err, AllOf(HasSubstr("optimizer.step"), HasSubstr("-3")));
}

// Finding 10: a width that breaks the FP8 GEMM rule failed at the first step, naming an
// internal operand.
TEST(Hardening, Fp8WidthIsCheckedWhenTheConfigIsRead) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("run");
  const Outcome r = octet(tiny_train(dir, {"--set", "model.d_model=24"}));
  expect_one_clear_line(r, "train", "model.d_model");
  EXPECT_THAT(r.err, AllOf(HasSubstr("24"), Not(HasSubstr("operand"))));
  EXPECT_FALSE(fs::exists(dir + "/config.json")) << "refused before the run directory is written";
  const Outcome mx = octet(
      tiny_train(dir, {"--set", "model.d_model=48", "--set", R"(fp8.recipe={"recipe":"mxfp8"})"}));
  expect_one_clear_line(mx, "train", "model.d_model");
  // f32 and high-precision layers have no such rule: every layer kept out by first / last
  // layers, or by patterns (each FP8 module of the one layer, or the layer as a whole).
  EXPECT_EQ(
      octet(tiny_train(dir, {"--set", "model.d_model=24", "--set", "fp8.enabled=false"})).code, 0);
  for (const char* kept : {"fp8.high_precision_first_layers=1",
                           R"(fp8.high_precision_modules=["layers.0.attn.*","layers.0.mlp"])",
                           R"(fp8.high_precision_modules=["layers.*"])"}) {
    SCOPED_TRACE(kept);
    EXPECT_EQ(
        octet(tiny_train(dir, {"--overwrite", "--set", "model.d_model=24", "--set", kept})).code,
        0);
  }
  // A pattern that leaves one FP8 module in the layer is still refused, naming the width.
  const Outcome part = octet(
      tiny_train(dir, {"--overwrite", "--set", "model.d_model=24", "--set",
                       R"(fp8.high_precision_modules=["layers.0.attn.qkv","layers.0.mlp"])"}));
  expect_one_clear_line(part, "train", "model.d_model");
}

// ---- hostile input to the tools' parsers ----

// Calls `fn` and expects it to succeed or to throw a one-line octet::Error that holds `names`.
template <typename Fn>
void only_octet_errors(const std::string& input, const std::string& names, Fn fn) {
  test::only_octet_errors(input, names, fn, test::OneLine::kYes);
}

TEST(HostileInput, ConfigFilesAndSetLines) {
  test::ScratchDir scratch;
  const std::string path = scratch.file("c.json");
  const std::vector<std::string> files = {"",
                                          "\xef\xbb\xbf{}",
                                          "{",
                                          "[]",
                                          "null",
                                          std::string(100000, '['),
                                          "{\"model\": 1e999}",
                                          "{\"model\": {\"n_layer\": -1e400}}",
                                          "{\"model\": {\"n_layer\": 18446744073709551616}}",
                                          "{\"training\": {\"seed\": 1.5}}",
                                          "{\"data\": {\"path\": \"\\ud800\"}}",
                                          std::string("{\"a\0\": 1}", 9),
                                          "{\"fp8\": {\"recipe\": {\"recipe\": [1]}}}",
                                          "{\"fp8\": {\"recipe\": \"/nonexistent/r.json\"}}",
                                          "{\"model\": {\"activation\": \"\xff\"}}",
                                          "{\"optimizer\": {\"betas\": [0.9]}}",
                                          "{\"optimizer\": {\"betas\": \"x\"}}"};
  for (const std::string& text : files) {
    test::write_file_bytes(path, text);
    only_octet_errors(text.substr(0, 60), path, [&] { config::load_config(path); });
  }
  Generator gen(16);
  for (int i = 0; i < 200; ++i) {  // random bytes
    std::string text(gen.next_u32() % 64, '\0');
    for (char& ch : text) ch = static_cast<char>(gen.next_u32());
    test::write_file_bytes(path, text);
    only_octet_errors("random bytes", path, [&] { config::load_config(path); });
  }
  const std::vector<std::string> sets = {"=",
                                         "x",
                                         "model=",
                                         "model={",
                                         "model=[1]",
                                         "model.n_layer=\xff",
                                         "model.n_layer=1e999",
                                         "model.n_layer=nan",
                                         "model.n_layer=inf",
                                         "model.n_layer={\"a\":1}",
                                         "\xff=1",
                                         "training.seed=-0",
                                         "optimizer.betas=[1e999, 0]",
                                         "fp8.recipe=",
                                         "fp8.recipe={",
                                         "fp8.recipe= {\"recipe\": \"x\"",
                                         "fp8.recipe=[1]",
                                         "fp8={\"recipe\": 1}",
                                         "training.device=cuda:99999999999999999999",
                                         "data.val_fraction=1e-400"};
  for (const std::string& s : sets) {
    config::RunConfig c;
    only_octet_errors(s, "", [&] {
      config::apply_override(c, s);
      config::validate(c);
      (void)config::to_json(c).dump();
    });
  }
}

TEST(HostileInput, DataStateStrings) {
  for (const std::string& text : std::vector<std::string>{
           "", "{", "[]", "{\"train\": [0, 0]}", "{\"train\": [-1, 0], \"validation\": [0, 0]}",
           "{\"train\": [1e999, 0], \"validation\": [0, 0]}",
           "{\"train\": [0, 0, 0], \"validation\": [0, 0]}",
           "{\"train\": [18446744073709551616, 0], \"validation\": [0, 0]}", "\xff\xfe",
           "{\"train\": [0, 0], \"validation\": [0, 0], \"x\": 1}", std::string(50000, '{')}) {
    only_octet_errors(text.substr(0, 60), "data state", [&] { data::decode_state(text); });
  }
  EXPECT_EQ(data::decode_state(data::encode_state({{1, 2}, {3, 4}})),
            (data::DataState{{1, 2}, {3, 4}}));
}

TEST(HostileInput, TextDataAndTokenShards) {
  test::ScratchDir scratch;
  const std::string text = scratch.file("t.txt");
  for (const std::string& bytes : {std::string(), std::string("ab"),
                                   std::string("abc\xff"
                                               "def"),
                                   std::string("\xc3"), std::string(64, '\0')}) {
    test::write_file_bytes(text, bytes);
    data::DataOptions o;
    o.kind = data::DataKind::kText;
    o.path = text;
    only_octet_errors("text", text, [&] { data::open_dataset(o); });
  }
  data::DataOptions missing;
  missing.kind = data::DataKind::kText;
  missing.path = scratch.file("missing.txt");
  only_octet_errors("missing", missing.path, [&] { data::open_dataset(missing); });

  // Every header field and length of a shard, mutated at random.
  const std::string shard = scratch.file("s.bin");
  data::write_token_shard(shard, tokens(3, 512, 50));
  const std::string good = read(shard);
  Generator gen(17);
  for (int i = 0; i < 300; ++i) {
    std::string bytes = good;
    const uint32_t kind = gen.next_u32() % 3;
    if (kind == 0) {
      bytes[gen.next_u32() % 1024] = static_cast<char>(gen.next_u32());  // the header
    } else if (kind == 1) {
      bytes.resize(gen.next_u32() % bytes.size());
    } else {
      for (int k = 0; k < 4; ++k) bytes[8 + k] = static_cast<char>(gen.next_u32());  // count
    }
    test::write_file_bytes(shard, bytes);
    data::DataOptions o;
    o.kind = data::DataKind::kShards;
    o.path = shard;
    only_octet_errors(fmt::format("shard mutation {}", i), "s.bin", [&] {
      auto d = data::open_dataset(o);
      d->next_batch(data::Split::kTrain, 2, 8);
      d->next_batch(data::Split::kValidation, 2, 8);
    });
  }
}

TEST(HostileInput, CheckpointsAndTheirMetadata) {
  test::ScratchDir scratch;
  const std::string dir = scratch.file("run");
  ASSERT_EQ(octet(tiny_train(dir, {"--set", "training.steps=3"})).code, 0);
  const SafetensorsFile good = load_safetensors(dir + "/checkpoint.safetensors");
  const std::string path = scratch.file("m.safetensors");
  const std::vector<std::pair<std::string, std::string>> values = {
      {"step", "-1"},
      {"step", "1e3"},
      {"step", "99999999999999999999"},
      {"skipped_steps", ""},
      {"rng", "{\"seed\": -1, \"offset\": 0}"},
      {"rng", "[]"},
      {"rng", "{\"seed\": 1e999, \"offset\": 0}"},
      {"data_state", "{"},
      {"data_state", "{\"train\": [0, 99999999999], \"validation\": [0, 0]}"},
      {"config", "{"},
      {"config", "[]"},
      {"config", "{\"model\": {\"n_layer\": 1e999}}"},
      {"config", "{\"model\": {\"x\": 1}}"},
      {"config", "{\"fp8\": {\"recipe\": \"/nonexistent\"}}"},
      {"config", "{\"fp8\": {\"recipe\": {\"recipe\": \"delayed\", \"margin\": 1e300}}}"},
      {"version", "2"},
      {"format", "other"},
      {"fp8_recipes", "{"},
      {"quantized", "{"}};
  for (const auto& [key, value] : values) {
    SafetensorsMetadata metadata = good.metadata;
    metadata[key] = value;
    save_safetensors(path, good.tensors, metadata);
    only_octet_errors(key + "=" + value, path, [&] {
      const Checkpoint c = read_checkpoint(path);
      const Outcome r = octet({"eval", "--checkpoint", path});
      if (r.code != 0) throw Error(r.err.substr(0, r.err.find('\n')));
    });
  }
  // A module's recorded recipe of any JSON shape, on --resume (which compares it with the
  // model's): an error naming the checkpoint. The fuzzer's find: a "recipe" that is not a string
  // escaped as the JSON library's type error.
  const nlohmann::json recipes = nlohmann::json::parse(good.metadata.at("fp8_recipes"));
  ASSERT_TRUE(recipes.is_object() && !recipes.empty()) << recipes.dump();
  const std::string module = recipes.begin().key();
  const std::string copy = scratch.file("resumed");
  std::filesystem::copy(dir, copy, std::filesystem::copy_options::recursive);
  const Args resume = {"train", "--quiet", "--resume", "--out", copy, "--set", "training.steps=4"};
  ASSERT_EQ(octet(resume).code, 0) << "the unchanged checkpoint resumes";
  for (const char* recorded :
       {R"({"recipe": 5})", R"({"recipe": null})", R"({"recipe": ["delayed"]})",
        R"({"recipe": {"recipe": "delayed"}})", R"({"recipe": "delayed", "margin": "1"})",
        R"({"recipe": "delayed", "unknown": 1})", R"({"recipe": "nvfp4", "nvfp4_4over6": 1})",
        R"({})", R"(7)", R"("delayed")"}) {
    nlohmann::json changed = recipes;
    changed[module] = nlohmann::json::parse(recorded);
    SafetensorsMetadata metadata = good.metadata;
    metadata["fp8_recipes"] = changed.dump();
    const std::string saved = copy + "/checkpoint.safetensors";
    save_safetensors(saved, good.tensors, metadata);
    only_octet_errors(std::string("fp8_recipes[") + module + "]=" + recorded, saved, [&] {
      const Outcome r = octet(resume);
      if (r.code != 0) throw Error(r.err.substr(0, r.err.find('\n')));
      ADD_FAILURE() << "a checkpoint whose recipe for " << module << " is " << recorded
                    << " resumed";
    });
  }
  // The FP8 primary weights' entries ("quantized") of any JSON shape, on inspect.
  for (const char* entry :
       {R"(5)", R"({"format": 5})", R"({"format": "fp8", "dtype": []})",
        R"({"format": "fp8", "dtype": "F8_E4M3", "shape": "x"})",
        R"({"format": "fp8", "dtype": "F8_E4M3", "shape": [1.5], "tensors": []})",
        R"({"format": "fp8", "dtype": "F8_E4M3", "shape": [-2], "tensors": []})",
        R"({"format": "fp8", "dtype": "F8_E4M3", "shape": [2], "tensors": 3})",
        R"({"format": "fp8", "dtype": "F8_E4M3", "shape": [2], "tensors": [3]})",
        R"({"format": "fp8", "dtype": "F8_E4M3", "shape": [2], "tensors": ["model.none"]})",
        R"({"format": "fp8", "dtype": "F8_E4M3", "shape": [2], "tensors": [], "attributes": 1})"}) {
    SafetensorsMetadata metadata = good.metadata;
    metadata["quantized"] = nlohmann::json{{"model.w", nlohmann::json::parse(entry)}}.dump();
    save_safetensors(path, good.tensors, metadata);
    for (const bool json : {false, true}) {
      only_octet_errors(std::string("quantized entry ") + entry, path, [&] {
        Args args = {"inspect", path};
        if (json) args.push_back("--json");
        const Outcome r = octet(args);
        if (r.code != 0) throw Error(r.err.substr(0, r.err.find('\n')));
        ADD_FAILURE() << "inspect showed a checkpoint whose FP8 weight entry is " << entry;
      });
    }
  }
  // A data position that does not fit the data, on --resume: names the checkpoint and the key.
  SafetensorsMetadata far = good.metadata;
  far["data_state"] = R"({"train": [7, 0], "validation": [0, 0]})";
  save_safetensors(dir + "/checkpoint.safetensors", good.tensors, far);
  const Outcome resumed =
      octet({"train", "--quiet", "--resume", "--out", dir, "--set", "training.steps=5"});
  expect_one_clear_line(resumed, "train", dir + "/checkpoint.safetensors");
  EXPECT_THAT(resumed.err, HasSubstr("data_state"));

  // Random byte changes anywhere in the file.
  const std::string bytes = read(dir + "/checkpoint.safetensors");
  Generator gen(18);
  for (int i = 0; i < 200; ++i) {
    std::string mutated = bytes;
    const size_t header = 8 + (gen.next_u32() % 4000);
    mutated[header % mutated.size()] = static_cast<char>(gen.next_u32());
    test::write_file_bytes(path, mutated);
    only_octet_errors(fmt::format("mutation {}", i), path, [&] { read_checkpoint(path); });
  }
}

}  // namespace
}  // namespace octet::cli
