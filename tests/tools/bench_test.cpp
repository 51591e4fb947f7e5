// `octet bench`: the JSON output is valid and complete (every group in f32 and each recipe, with
// the required keys and plausible values), the table prints, the model bench counts FLOPs and MFU
// as worked out by hand, and bad arguments are clear errors. Speed itself is never asserted here.
#include "tools/bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/token_data.h"
#include "runtime/device.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace octet::bench {
namespace {

using ::testing::HasSubstr;

TEST(Bench, QuickJsonHasEveryGroupAndPrecisionWithTheRequiredKeys) {
  std::ostringstream out;
  ASSERT_EQ(run_bench({"--quick", "--json"}, out), 0);
  const nlohmann::json results = nlohmann::json::parse(out.str());  // throws on invalid JSON
  ASSERT_TRUE(results.is_array());

  // gemm: 1 quick shape x 3 layouts; block, layer, model: one bench each; all x 8 precisions.
  std::map<std::string, std::set<std::string>> precisions_by_group;
  int gemms = 0;
  for (const nlohmann::json& r : results) {
    SCOPED_TRACE(r.dump());
    for (const char* key : {"bench", "precision", "median_ms", "gflops", "peak_bytes"}) {
      ASSERT_TRUE(r.contains(key)) << key;
    }
    ASSERT_TRUE(r["bench"].is_string());
    ASSERT_TRUE(r["precision"].is_string());
    EXPECT_GT(r["median_ms"].get<double>(), 0.0);
    EXPECT_GT(r["gflops"].get<double>(), 0.0);
    // Every bench holds at least its operands while it runs.
    EXPECT_GT(r["peak_bytes"].get<int64_t>(), 0);
    const std::string group = r["group"].get<std::string>();
    precisions_by_group[group].insert(r["precision"].get<std::string>());
    if (group == "gemm") {
      ++gemms;
      EXPECT_TRUE(r["tokens_per_s"].is_null());
    } else {
      EXPECT_GT(r["tokens_per_s"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(gemms, 3 * 8);
  const std::set<std::string> all = {"f32",       "delayed", "current",  "mxfp8",
                                     "blockwise", "nvfp4",   "quartet2", "rowwise"};
  for (const char* group : {"gemm", "block", "layer", "model"}) {
    EXPECT_EQ(precisions_by_group[group], all) << group;
  }
  EXPECT_EQ(results.size(), 24u + 3 * 8);
}

TEST(Bench, GroupSelectionAndTable) {
  std::ostringstream out;
  ASSERT_EQ(run_bench({"block", "--quick", "--reps", "2"}, out), 0);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("median of 2 runs"));
  EXPECT_THAT(text, HasSubstr("block.layernorm_mlp"));
  EXPECT_THAT(text, HasSubstr("mxfp8"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("gemm.")));
}

TEST(Bench, BadArgumentsAreClearErrors) {
  std::ostringstream out;
  EXPECT_THAT(test::error_of([&] { run_bench({"layers"}, out); }),
              HasSubstr("unknown argument 'layers'"));
  EXPECT_THAT(test::error_of([&] {
                run_bench({"--reps", "0"}, out);
              }),
              HasSubstr("bench: --reps: expected an integer >= 1, got \"0\""));
  EXPECT_THAT(test::error_of([&] { run_bench({"--reps", "3x"}, out); }), HasSubstr("got \"3x\""));
  EXPECT_THAT(test::error_of([&] { run_bench({"--traffic"}, out); }),
              HasSubstr("--traffic records device traffic: it needs --device cuda"));
  EXPECT_THAT(test::error_of([&] {
                run_bench({"--launch-us", "-1"}, out);
              }),
              HasSubstr("--launch-us: expected a positive number, got \"-1\""));
  EXPECT_THAT(test::error_of([&] { run_bench({"--reps"}, out); }),
              HasSubstr("--reps needs a number"));
  EXPECT_TRUE(out.str().empty());  // nothing ran
}

TEST(Bench, CudaDeviceWithoutAGpuIsTheNoDeviceError) {
  if (cuda_device_count() > 0)
    GTEST_SKIP() << "skipped: a GPU is present (" << cuda_status() << ")";
  std::ostringstream out;
  EXPECT_THAT(test::error_of([&] {
                run_bench({"layer", "--device", "cuda", "--quick"}, out);
              }),
              HasSubstr("no CUDA device"));
  EXPECT_THAT(test::error_of([&] {
                run_bench({"gemm", "--device", "cuda:1"}, out);
              }),
              HasSubstr("no CUDA device"));
  EXPECT_THAT(test::error_of([&] {
                run_bench({"model", "--device", "cuda", "--quick"}, out);
              }),
              HasSubstr("no CUDA device"));
  EXPECT_THAT(test::error_of([&] {
                run_bench({"--device", "gpu"}, out);
              }),
              HasSubstr("unknown device \"gpu\""));
  EXPECT_TRUE(out.str().empty());
}

TEST(Bench, QuickLayerBenchAtAChosenShape) {
  std::ostringstream out;
  ASSERT_EQ(run_bench({"layer", "--quick", "--reps", "1", "--precision", "f32,delayed", "--d-model",
                       "64", "--heads", "2", "--seq", "16", "--batch", "2"},
                      out),
            0);
  EXPECT_THAT(out.str(), HasSubstr("delayed"));
  EXPECT_THAT(out.str(), ::testing::Not(HasSubstr("mxfp8")));
}

// GPT-2 at 2 layers, d 64, 4 heads, vocab 256, seq 32, by hand: the token embedding 256 x 64 =
// 16384; a layer 12 d^2 + 13 d = 49984 (QKV 64 x 192 + 192, projection 64 x 64 + 64, fc1 64 x 256
// + 256, fc2 256 x 64 + 64, two LayerNorms 2 x 128), two of them 99968; the final LayerNorm 128;
// the position embedding 32 x 64 = 2048: 118528 parameters. FLOPs a token: 6 x (118528 - 2048)
// + 12 x 2 layers x 64 x 32 = 698880 + 49152 = 748032. bench/torch_gpt2.py prints the same two
// numbers at this shape.
TEST(Bench, ModelCountsSixFlopsAParameterAndAttentionAndReadsAShard) {
  test::ScratchDir dir;
  std::vector<uint16_t> tokens(2 * 64 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 37) % 256);
  data::write_token_shard(dir.file("tokens.bin"), tokens);
  std::vector<std::string> args = {"model", "--json", "--reps", "2", "--warmup", "1"};
  args.insert(args.end(), {"--precision", "f32,delayed", "--layers", "2", "--d-model", "64"});
  args.insert(args.end(), {"--heads", "4", "--vocab", "256", "--seq", "32", "--batch", "2"});
  args.insert(args.end(), {"--data", dir.file("tokens.bin"), "--peak-tflops", "0.5"});
  std::ostringstream out;
  ASSERT_EQ(run_bench(args, out), 0);
  const nlohmann::json results = nlohmann::json::parse(out.str());
  ASSERT_EQ(results.size(), 2u);
  for (const nlohmann::json& r : results) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["group"], "model");
    EXPECT_EQ(r["shape"]["params"].get<int64_t>(), 118528);
    EXPECT_EQ(r["shape"]["flops_per_token"].get<double>(), 748032.0);
    EXPECT_EQ(r["flops"].get<double>(), 748032.0 * 64);
    EXPECT_EQ(r["shape"]["layers"].get<int64_t>(), 2);
    EXPECT_EQ(r["shape"]["vocab"].get<int64_t>(), 256);
    EXPECT_EQ(r["data"], dir.file("tokens.bin"));
    // MFU is the FLOPs rate over the peak: GFLOP/s over 500 GFLOP/s.
    EXPECT_DOUBLE_EQ(r["mfu"].get<double>(), r["gflops"].get<double>() / 500);
    EXPECT_EQ(r["peak_tflops"].get<double>(), 0.5);
    EXPECT_NEAR(r["tokens_per_s"].get<double>(), 64 / (r["median_ms"].get<double>() * 1e-3),
                1e-6 * r["tokens_per_s"].get<double>());
  }
  // The table ends a model row with its MFU; without --peak-tflops the CPU has no peak, no MFU.
  std::ostringstream table, no_peak;
  std::vector<std::string> tiny = {"model", "--quick", "--precision", "f32"};
  tiny.insert(tiny.end(), {"--d-model", "64", "--heads", "4", "--seq", "32"});
  std::vector<std::string> with_peak = tiny;
  with_peak.insert(with_peak.end(), {"--peak-tflops", "1"});
  ASSERT_EQ(run_bench(with_peak, table), 0);
  EXPECT_THAT(table.str(), HasSubstr("MFU against 1 TFLOP/s"));
  EXPECT_THAT(table.str(), ::testing::ContainsRegex("model.gpt_train_step +f32 .* MFU [0-9.]+%"));
  std::vector<std::string> json = tiny;
  json.push_back("--json");
  ASSERT_EQ(run_bench(json, no_peak), 0);
  EXPECT_FALSE(nlohmann::json::parse(no_peak.str())[0].contains("mfu"));
}

TEST(Bench, ModelShardErrorsNameTheShard) {
  test::ScratchDir dir;
  data::write_token_shard(dir.file("short.bin"), std::vector<uint16_t>(64, 3));
  data::write_token_shard(dir.file("wide.bin"), std::vector<uint16_t>(200, 300));
  std::ostringstream out;
  auto with_data = [&](const std::string& path) {
    std::vector<std::string> args = {"model", "--precision", "f32", "--d-model", "64", "--json"};
    args.insert(args.end(), {"--heads", "4", "--seq", "32", "--batch", "2", "--data", path});
    return args;
  };
  EXPECT_THAT(test::error_of([&] { run_bench(with_data(dir.file("short.bin")), out); }),
              HasSubstr("has 64 tokens; a batch of 64 tokens and its targets need 65"));
  EXPECT_THAT(test::error_of([&] { run_bench(with_data(dir.file("wide.bin")), out); }),
              HasSubstr("token 0 is 300, not below the vocabulary 256 (--vocab)"));
  EXPECT_THAT(test::error_of([&] { run_bench(with_data(dir.file("none.bin")), out); }),
              HasSubstr("none.bin"));
  EXPECT_THAT(test::error_of([&] {
                run_bench({"model", "--layers", "0"}, out);
              }),
              HasSubstr("bench: --layers: expected an integer >= 1, got \"0\""));
  EXPECT_THAT(test::error_of([&] {
                run_bench({"model", "--data"}, out);
              }),
              HasSubstr("--data needs an llm.c token shard's path"));
}

TEST(Bench, HelpPrintsUsage) {
  std::ostringstream out;
  EXPECT_EQ(run_bench({"--help"}, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("usage: octet bench"));
}

}  // namespace
}  // namespace octet::bench
