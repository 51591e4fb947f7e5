// `octet bench`: the JSON output is valid and complete (every group in f32 and each recipe, with
// the required keys and plausible values), the table prints, and bad arguments are clear errors.
// Speed itself is never asserted here.
#include "tools/bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "runtime/device.h"
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

TEST(Bench, HelpPrintsUsage) {
  std::ostringstream out;
  EXPECT_EQ(run_bench({"--help"}, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("usage: octet bench"));
}

}  // namespace
}  // namespace octet::bench
