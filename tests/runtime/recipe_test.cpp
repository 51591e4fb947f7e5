// Recipes from JSON: the shipped configs/recipes files, defaults, round trips, and errors that
// name the key and what was expected for unknown keys, wrong types and out-of-range values.
#include "runtime/recipe.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/error.h"

namespace octet {
namespace {

std::string config_path(const std::string& name) {
  // tests/runtime/ -> repository root -> configs/recipes/
  const std::filesystem::path root = std::filesystem::path(__FILE__).parent_path() / ".." / "..";
  return (root / "configs" / "recipes" / name).string();
}

TEST(Recipe, ShippedConfigsLoadAsTheDocumentedRecipes) {
  const Recipe delayed = load_recipe(config_path("delayed.json"));
  EXPECT_EQ(delayed.kind, RecipeKind::kDelayed);
  EXPECT_EQ(delayed.fp8_format, FP8Format::kHybrid);
  EXPECT_EQ(delayed.margin, 0);
  EXPECT_EQ(delayed.amax_history_len, 1024);
  EXPECT_EQ(delayed.amax_compute_algo, AmaxComputeAlgo::kMax);
  EXPECT_TRUE(delayed.reduce_amax);
  EXPECT_EQ(delayed, Recipe::delayed());

  const Recipe current = load_recipe(config_path("current.json"));
  EXPECT_EQ(current.kind, RecipeKind::kCurrent);
  EXPECT_EQ(current.fp8_format, FP8Format::kHybrid);
  EXPECT_FALSE(current.power_2_scale);
  EXPECT_EQ(current.amax_epsilon, 0.f);
  EXPECT_EQ(current, Recipe::current());

  const Recipe mx = load_recipe(config_path("mxfp8.json"));
  EXPECT_EQ(mx.kind, RecipeKind::kMXFP8);
  EXPECT_EQ(mx, Recipe::mxfp8());

  const Recipe block = load_recipe(config_path("blockwise.json"));
  EXPECT_EQ(block.kind, RecipeKind::kBlockwise);
  EXPECT_EQ(block.fp8_format, FP8Format::kE4M3);
  EXPECT_TRUE(block.power_2_scale);
  EXPECT_EQ(block.x_block_scaling, BlockScaling::k1D);
  EXPECT_EQ(block.w_block_scaling, BlockScaling::k2D);
  EXPECT_EQ(block.grad_block_scaling, BlockScaling::k1D);
  EXPECT_EQ(block, Recipe::blockwise());

  const Recipe fp4 = load_recipe(config_path("nvfp4.json"));
  EXPECT_EQ(fp4.kind, RecipeKind::kNVFP4);
  EXPECT_TRUE(fp4.random_hadamard_transform);
  EXPECT_TRUE(fp4.stochastic_rounding);
  EXPECT_TRUE(fp4.weight_2d_quantization);
  EXPECT_EQ(fp4, Recipe::nvfp4());

  const Recipe quartet2 = load_recipe(config_path("nvfp4_quartet2.json"));
  EXPECT_TRUE(quartet2.is_quartet2());
  EXPECT_EQ(quartet2, Recipe::nvfp4_quartet2());
}

TEST(Recipe, DefaultsWhenKeysAreLeftOut) {
  const Recipe d = parse_recipe(R"({"recipe": "delayed"})");
  EXPECT_EQ(d, Recipe::delayed());
  const Recipe c = parse_recipe(R"({"recipe": "current", "power_2_scale": true,
                                    "amax_epsilon": 1e-6, "fp8_format": "e4m3"})");
  EXPECT_TRUE(c.power_2_scale);
  EXPECT_EQ(c.amax_epsilon, 1e-6f);
  EXPECT_EQ(c.fp8_format, FP8Format::kE4M3);
  const Recipe m = parse_recipe(R"({"recipe": "mxfp8", "fp8_format": "e4m3"})");
  EXPECT_EQ(m, Recipe::mxfp8());
}

TEST(Recipe, FormatsGiveTheDtypesOfEachDirection) {
  const Recipe hybrid = Recipe::delayed(FP8Format::kHybrid);
  EXPECT_EQ(hybrid.dtype(FP8Direction::kForward), DType::kE4M3);
  EXPECT_EQ(hybrid.dtype(FP8Direction::kBackward), DType::kE5M2);
  const Recipe e4m3 = Recipe::current(FP8Format::kE4M3);
  EXPECT_EQ(e4m3.dtype(FP8Direction::kBackward), DType::kE4M3);
  EXPECT_EQ(Recipe::mxfp8().dtype(FP8Direction::kBackward), DType::kE4M3);
}

TEST(Recipe, JsonRoundTrip) {
  Recipe d = Recipe::delayed(FP8Format::kE4M3, 3, 31, AmaxComputeAlgo::kMostRecent);
  d.reduce_amax = false;
  Recipe c = Recipe::current(FP8Format::kE4M3);
  c.power_2_scale = true;
  c.amax_epsilon = 0.5f;
  for (const Recipe& r : {d, c, Recipe::mxfp8()}) {
    EXPECT_EQ(recipe_from_json(recipe_to_json(r)), r) << describe(r);
    EXPECT_EQ(parse_recipe(describe(r)), r) << describe(r);
  }
}

// Quartet II's one switch, the forward's 4over6 (the reference's four_over_six): TE's key and
// scopes, "all" when left out (the method as the paper's kernel runs it); "none" scales every
// block to 6 under the 448 bound. Nothing else of the recipe moves.
TEST(Recipe, Quartet2SwitchesItsForwardFourOverSix) {
  const Recipe all = parse_recipe(R"({"recipe": "nvfp4", "method": "quartet2"})");
  EXPECT_EQ(all.four_over_six, NVFP4Scope::kAll);
  EXPECT_EQ(all, Recipe::nvfp4_quartet2());
  EXPECT_EQ(parse_recipe(R"({"recipe": "nvfp4", "method": "quartet2", "nvfp4_4over6": "all"})"),
            all);
  const Recipe none =
      parse_recipe(R"({"recipe": "nvfp4", "method": "quartet2", "nvfp4_4over6": "none"})");
  EXPECT_TRUE(none.is_quartet2());
  EXPECT_TRUE(none.uses_rng_streams());
  EXPECT_EQ(none.four_over_six, NVFP4Scope::kNone);
  Recipe want = Recipe::nvfp4_quartet2();
  want.four_over_six = NVFP4Scope::kNone;
  EXPECT_EQ(none, want);
  EXPECT_NE(none, all);
  for (const char* scope : {"none", "weights", "activations", "all"}) {
    const Recipe r = parse_recipe(std::string(R"({"recipe": "nvfp4", "method": "quartet2", )") +
                                  R"("nvfp4_4over6": ")" + scope + "\"}");
    EXPECT_EQ(nvfp4_scope_name(r.four_over_six), scope);
    EXPECT_EQ(recipe_to_json(r)["nvfp4_4over6"], scope);
    EXPECT_EQ(recipe_from_json(recipe_to_json(r)), r) << describe(r);
  }
}

struct BadCase {
  const char* json;
  std::vector<const char*> expect;  // substrings of the message
};

class RecipeErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(RecipeErrors, NameTheKeyAndTheExpectation) {
  const BadCase c = GetParam();
  try {
    parse_recipe(c.json);
    FAIL() << "accepted " << c.json;
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* s : c.expect) {
      EXPECT_NE(what.find(s), std::string::npos) << "'" << s << "' missing from: " << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Recipe, RecipeErrors,
    ::testing::Values(
        BadCase{R"({"recipe": "delayed", "margin": -1})", {"recipe.margin", "[0, 64]", "-1"}},
        BadCase{R"({"recipe": "delayed", "margin": 65})", {"recipe.margin", "[0, 64]", "65"}},
        BadCase{R"({"recipe": "delayed", "margin": "2"})", {"recipe.margin", "integer", "string"}},
        BadCase{R"({"recipe": "delayed", "margin": 2.5})", {"recipe.margin", "integer", "2.5"}},
        BadCase{R"({"recipe": "delayed", "amax_history_len": 0})",
                {"recipe.amax_history_len", "[1, 1048576]", "got 0"}},
        BadCase{R"({"recipe": "delayed", "amax_history_len": 18446744073709551615})",
                {"recipe.amax_history_len", "[1, 1048576]"}},
        BadCase{R"({"recipe": "delayed", "amax_compute_algo": "mean"})",
                {"recipe.amax_compute_algo", "max, most_recent", "\"mean\""}},
        BadCase{R"({"recipe": "delayed", "fp8_format": "e5m2"})",
                {"recipe.fp8_format", "e4m3, hybrid", "\"e5m2\""}},
        BadCase{R"({"recipe": "delayed", "fp8_format": 1})", {"recipe.fp8_format", "string"}},
        BadCase{R"({"recipe": "delayed", "reduce_amax": 1})",
                {"recipe.reduce_amax", "true or false", "number"}},
        BadCase{R"({"recipe": "delayed", "power_2_scale": true})",
                {"recipe.power_2_scale", "unknown key", "'delayed'", "amax_history_len"}},
        BadCase{R"({"recipe": "current", "margin": 0})",
                {"recipe.margin", "unknown key", "'current'", "amax_epsilon"}},
        BadCase{R"({"recipe": "current", "amax_epsilon": -1})",
                {"recipe.amax_epsilon", "number >= 0", "-1"}},
        BadCase{R"({"recipe": "current", "amax_epsilon": 1e39})", {"recipe.amax_epsilon"}},
        BadCase{R"({"recipe": "current", "amax_epsilon": "0"})",
                {"recipe.amax_epsilon", "number", "string"}},
        BadCase{R"({"recipe": "current", "power_2_scale": "yes"})",
                {"recipe.power_2_scale", "true or false"}},
        BadCase{R"({"recipe": "mxfp8", "fp8_format": "hybrid"})",
                {"recipe.fp8_format", "e4m3", "\"hybrid\""}},
        BadCase{R"({"recipe": "mxfp8", "margin": 0})", {"recipe.margin", "unknown key", "'mxfp8'"}},
        BadCase{R"({"recipe": "nvfp4", "method": "quartet2", "nvfp4_4over6": "some"})",
                {"recipe.nvfp4_4over6", "none, weights, activations, all", "\"some\""}},
        BadCase{R"({"recipe": "nvfp4", "method": "quartet2", "nvfp4_4over6": false})",
                {"recipe.nvfp4_4over6", "string", "boolean"}},
        BadCase{R"({"recipe": "nvfp4", "method": "quartet2", "nvfp4_4over6_err_mode": "MAE"})",
                {"recipe.nvfp4_4over6_err_mode", "unknown key", "method quartet2",
                 "recipe, method, nvfp4_4over6"}},
        BadCase{R"({"recipe": "nvfp4", "method": "quartet2", "nvfp4_4over6_e4m3_use_256": "all"})",
                {"recipe.nvfp4_4over6_e4m3_use_256", "unknown key", "method quartet2"}},
        BadCase{R"({"recipe": "fancy"})", {"recipe.recipe", "delayed, current, mxfp8", "fancy"}},
        BadCase{R"({"fp8_format": "e4m3"})", {"recipe.recipe", "missing"}},
        BadCase{R"([1, 2])", {"recipe", "JSON object", "array"}},
        BadCase{R"({"recipe": "delayed",)", {"recipe", "invalid JSON"}}));

TEST(Recipe, NestedLocationAndFilePathAppearInErrors) {
  const nlohmann::json j = nlohmann::json::parse(R"({"recipe": "delayed", "margin": true})");
  try {
    recipe_from_json(j, "train.fp8");
    FAIL() << "accepted a boolean margin";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.fp8.margin"), std::string::npos) << e.what();
  }
  try {
    load_recipe("/nonexistent/recipe.json");
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/recipe.json"), std::string::npos)
        << e.what();
  }
}

TEST(Recipe, FactoryChecksRanges) {
  EXPECT_THROW(Recipe::delayed(FP8Format::kHybrid, -1), Error);
  EXPECT_THROW(Recipe::delayed(FP8Format::kHybrid, 0, 0), Error);
}

}  // namespace
}  // namespace octet
