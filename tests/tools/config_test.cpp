// The run configuration: defaults equal configs/train/default.json, file and --set precedence,
// every error names the key, JSON round trip, and configs/README.md kept equal to the schema.
#include "tools/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace octet::config {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

using test::error_of;

// The repository root, from this file's own path (tests/tools/config_test.cpp).
std::filesystem::path repo_root() {
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

RunConfig with(const std::vector<std::string>& overrides) { return load_config("", overrides); }

std::string set_error(const std::string& assignment) {
  return error_of([&] { with({assignment}); });
}

TEST(Config, DefaultsAreTheBuiltInRun) {
  const RunConfig c;
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.n_head, 4);
  EXPECT_EQ(c.data.kind, "task");
  EXPECT_EQ(c.data.task, "sort");
  EXPECT_EQ(c.data.task_digits, 6);
  EXPECT_TRUE(c.fp8.enabled);
  EXPECT_EQ(c.fp8.recipe["recipe"], "delayed");
  EXPECT_EQ(c.fp8.recipe["fp8_format"], "hybrid");
  EXPECT_EQ(c.optimizer.kind, "adamw");
  EXPECT_EQ(c.training.steps, 2000);
  EXPECT_EQ(c.training.device, "cpu");
  EXPECT_NO_THROW(validate(c));
  EXPECT_EQ(load_config(""), c);
  EXPECT_EQ(total_schedule_steps(c), 2000);
}

TEST(Config, DefaultJsonFileHoldsEveryKeyWithTheBuiltInValues) {
  const std::string path = (repo_root() / "configs/train/default.json").string();
  EXPECT_EQ(load_config(path), RunConfig{});
  const Json file = Json::parse(test::read_file_bytes(path));
  EXPECT_EQ(file, to_json(RunConfig{})) << "default.json must list every key with its default";
}

TEST(Config, ReadmeSectionMatchesTheSchema) {
  const std::string readme = test::read_file_bytes((repo_root() / "configs/README.md").string());
  EXPECT_THAT(readme, HasSubstr(keys_markdown()))
      << "configs/README.md is out of date; its \"Training config keys\" section must be:\n"
      << keys_markdown();
  for (const KeySpec& s : schema()) EXPECT_THAT(readme, HasSubstr("| `" + s.path + "` |"));
}

TEST(Config, SchemaKeysAreUniqueDottedAndDocumented) {
  std::set<std::string> paths;
  for (const KeySpec& s : schema()) {
    EXPECT_TRUE(paths.insert(s.path).second) << s.path;
    const size_t dot = s.path.find('.');
    EXPECT_TRUE(dot != std::string::npos && dot > 0 && dot + 1 < s.path.size() &&
                s.path.find('.', dot + 1) == std::string::npos)
        << s.path;
    EXPECT_FALSE(s.doc.empty()) << s.path;
    EXPECT_EQ(find_key(s.path), &s);
  }
  for (const char* required : {"model.n_layer",
                               "model.d_model",
                               "model.n_head",
                               "model.vocab",
                               "model.seq_len",
                               "model.activation",
                               "model.norm",
                               "model.zero_centered_gamma",
                               "model.bias",
                               "model.tie_embeddings",
                               "model.fp8_primary_weights",
                               "fp8.enabled",
                               "fp8.recipe",
                               "data.kind",
                               "data.path",
                               "data.task",
                               "data.seed",
                               "optimizer.kind",
                               "optimizer.lr",
                               "optimizer.betas",
                               "optimizer.eps",
                               "optimizer.weight_decay",
                               "optimizer.momentum",
                               "optimizer.grad_clip",
                               "schedule.warmup_steps",
                               "schedule.total_steps",
                               "schedule.min_lr_ratio",
                               "training.steps",
                               "training.batch_size",
                               "training.grad_accum",
                               "training.eval_interval",
                               "training.eval_batches",
                               "training.checkpoint_interval",
                               "training.log_interval",
                               "training.seed",
                               "training.device",
                               "training.max_nonfinite_steps",
                               "output.dir"}) {
    EXPECT_NE(find_key(required), nullptr) << required;
  }
  EXPECT_EQ(find_key("model.layers"), nullptr);
  EXPECT_EQ(find_key("model"), nullptr);
}

TEST(Config, FileThenOverridesInOrder) {
  test::ScratchDir dir;
  const std::string path = dir.file("run.json");
  test::write_file_bytes(path, R"({
    // comments are allowed in config files
    "model": {"n_layer": 3, "d_model": 128},
    "optimizer": {"lr": 1e-3},
    "training": {"steps": 500}
  })");
  const RunConfig c =
      load_config(path, {"model.n_layer=5", "training.steps=800", "training.steps=900"});
  EXPECT_EQ(c.model.n_layer, 5);    // --set beats the file
  EXPECT_EQ(c.model.d_model, 128);  // the file beats the default
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.training.steps, 900);  // the last --set wins
  EXPECT_EQ(c.model.n_head, 4);      // untouched keys keep their defaults
  EXPECT_EQ(c.data.task, "sort");
}

TEST(Config, OverrideValuesAreJsonOrBareStrings) {
  const RunConfig c = with({
      "data.kind=text",
      "data.path=input.txt",
      "model.seq_len=128",
      "output.dir=123",  // a number's text is still a directory name
      "optimizer.betas=[0.8, 0.99]",
      "model.bias=false",
      "optimizer.lr=2e-4",
      "training.steps=2e3",  // an integral float is an integer
      "training.device=cuda:1",
      "data.val_path=\"quoted.bin\"",
      "fp8.recipe=" + (repo_root() / "configs/recipes/mxfp8.json").string(),
      R"(fp8.high_precision_modules=["layers.0.mlp"])",
  });
  EXPECT_EQ(c.data.path, "input.txt");
  EXPECT_EQ(c.output.dir, "123");
  EXPECT_EQ(c.optimizer.betas, (std::array<double, 2>{0.8, 0.99}));
  EXPECT_FALSE(c.model.bias);
  EXPECT_EQ(c.optimizer.lr, 2e-4);
  EXPECT_EQ(c.training.steps, 2000);
  EXPECT_EQ(c.training.device, "cuda:1");
  EXPECT_EQ(c.data.val_path, "quoted.bin");
  // A recipe file is read at once: the run records the recipe, not the path.
  EXPECT_EQ(c.fp8.recipe, Json({{"fp8_format", "e4m3"}, {"recipe", "mxfp8"}}));
  EXPECT_EQ(c.fp8.high_precision_modules, std::vector<std::string>{"layers.0.mlp"});

  const RunConfig inline_recipe = with({R"(fp8.recipe={"recipe": "current"})"});
  EXPECT_EQ(inline_recipe.fp8.recipe, Json({{"recipe", "current"}}));
  const RunConfig section = with({R"(model={"n_layer": 4, "d_model": 128})"});
  EXPECT_EQ(section.model.n_layer, 4);
  EXPECT_EQ(section.model.d_model, 128);
  EXPECT_EQ(with({"data.val_path="}).data.val_path, "");
}

TEST(Config, TypeErrorsNameTheKeyTheValueAndTheExpectation) {
  struct Case {
    std::string assignment;
    std::string message;
  };
  const Case cases[] = {
      {"model.n_layer=two", R"(config key "model.n_layer" (from --set model.n_layer=two): )"
                            R"(expected an integer in [1, 128], got "two")"},
      {"model.n_layer=2.5", R"(expected an integer in [1, 128], got 2.5)"},
      {"model.n_layer=0", R"(config key "model.n_layer" (from --set model.n_layer=0): expected )"
                          R"(an integer in [1, 128], got 0)"},
      {"model.n_layer=1e30", "got 1e+30"},
      {"optimizer.lr=0", R"(config key "optimizer.lr" (from --set optimizer.lr=0): expected a )"
                         R"(number in (0, 10], got 0)"},
      {"optimizer.lr=fast", R"(expected a number in (0, 10], got "fast")"},
      {"model.bias=1", R"(config key "model.bias" (from --set model.bias=1): expected true or )"
                       R"(false, got 1)"},
      {"model.activation=tanh",
       R"(config key "model.activation" (from --set model.activation=tanh): expected one of )"
       R"("gelu", "relu", "srelu", "silu", "swiglu", "geglu" or "reglu", got "tanh")"},
      {"optimizer.betas=[0.9, 1.0]", R"(config key "optimizer.betas" (from --set )"
                                     R"(optimizer.betas=[0.9, 1.0]): expected [a, b] with each )"
                                     R"(number in [0, 1), got [0.9,1.0])"},
      {"optimizer.betas=0.9", "expected [a, b] with each number in [0, 1), got 0.9"},
      {"training.device=gpu", R"(config key "training.device" (from --set training.device=gpu): )"
                              R"(expected a device: "cpu", "cuda" or "cuda:N", got "gpu")"},
      {"fp8.recipe=", R"(config key "fp8.recipe" (from --set fp8.recipe=): expected a recipe )"
                      R"(file path (a string) or an inline recipe object, got "")"},
      {"data.val_fraction=0.9", R"(config key "data.val_fraction")"},
      {R"(fp8.high_precision_modules=["layers.0", 3])",
       R"(config key "fp8.high_precision_modules" (from --set )"
       R"(fp8.high_precision_modules=["layers.0", 3]): expected an array of strings, got )"
       R"(["layers.0",3])"},
      {"fp8.high_precision_modules=layers.0", R"(expected an array of strings, got "layers.0")"},
      {"model=3", R"(config key "model" (from --set model=3) is a section: expected a JSON )"
                  R"(object of its keys, got 3)"},
  };
  for (const Case& c : cases) EXPECT_THAT(set_error(c.assignment), HasSubstr(c.message));
  // In a file the value's JSON type is what it is: a number is no recipe.
  RunConfig config;
  EXPECT_THAT(error_of([&] { apply_json(config, Json::parse(R"({"fp8": {"recipe": 3}})"), "x"); }),
              HasSubstr(R"(config key "fp8.recipe" (from x): expected a recipe file path (a )"
                        R"(string) or an inline recipe object, got 3)"));
  EXPECT_THAT(error_of([&] { apply_json(config, Json::parse(R"({"data": {"path": 3}})"), "x"); }),
              HasSubstr(R"(config key "data.path" (from x): expected a string, got 3)"));
}

TEST(Config, UnknownKeysAreNamedWithAHint) {
  EXPECT_THAT(set_error("model.n_layers=3"),
              HasSubstr(R"(unknown config key "model.n_layers" (from --set model.n_layers=3); )"
                        R"(did you mean "model.n_layer"?)"));
  EXPECT_THAT(set_error("model.dropout=0.1"),
              AllOf(HasSubstr(R"(unknown config key "model.dropout")"),
                    HasSubstr("the keys of model are model.arch, model.n_layer, model.d_model")));
  EXPECT_THAT(set_error("logging.level=info"),
              HasSubstr("the sections are model, fp8, data, optimizer, schedule, training or "
                        "output"));
  EXPECT_THAT(set_error("optimzer.lr=1"), HasSubstr(R"(did you mean "optimizer.lr"?)"));
  EXPECT_THAT(set_error("n_layer"), HasSubstr(R"(--set "n_layer": expected key=value)"));
  EXPECT_THAT(set_error("=3"), HasSubstr("expected key=value"));

  test::ScratchDir dir;
  const std::string path = dir.file("bad.json");
  test::write_file_bytes(path, R"({"model": {"n_layer": 2, "heads": 4}})");
  EXPECT_THAT(error_of([&] { load_config(path); }),
              HasSubstr(R"(unknown config key "model.heads" (from file )" + path + ")"));
  test::write_file_bytes(path, R"({"modle": {"n_layer": 2}})");
  EXPECT_THAT(error_of([&] { load_config(path); }),
              HasSubstr(R"(unknown config key "modle" (from file )" + path +
                        R"(); did you mean "model"?)"));
  // A key may not sit at the top level, nor a section inside a section.
  test::write_file_bytes(path, R"({"n_layer": 2})");
  EXPECT_THAT(error_of([&] { load_config(path); }), HasSubstr(R"(unknown config key "n_layer")"));
  test::write_file_bytes(path, R"({"model": {"model": {}}})");
  EXPECT_THAT(error_of([&] { load_config(path); }),
              HasSubstr(R"(unknown config key "model.model")"));
}

TEST(Config, FileErrors) {
  test::ScratchDir dir;
  EXPECT_THAT(error_of([&] { load_config(dir.file("none.json")); }),
              AllOf(HasSubstr("cannot open config file " + dir.file("none.json")),
                    HasSubstr("No such file or directory")));
  const std::string path = dir.file("broken.json");
  test::write_file_bytes(path, "{\"model\": {\"n_layer\": 2,}\n");
  EXPECT_THAT(error_of([&] { load_config(path); }),
              AllOf(HasSubstr("config file " + path + " is not valid JSON"), HasSubstr("line 1")));
  test::write_file_bytes(path, "[1, 2]");
  EXPECT_THAT(error_of([&] { load_config(path); }),
              HasSubstr("config (from file " + path + ") must be a JSON object of sections"));
  test::write_file_bytes(path, R"({"training": {"steps": -5}})");
  EXPECT_THAT(error_of([&] { load_config(path); }),
              HasSubstr(R"(config key "training.steps" (from file )" + path +
                        R"(): expected an integer in [1, 1000000000], got -5)"));
  test::write_file_bytes(path, R"({"model": [1]})");
  EXPECT_THAT(error_of([&] { load_config(path); }),
              HasSubstr(R"(config key "model" (from file )" + path + ") is a section"));
}

// Found by fuzz/config_fuzz.cpp: a check between keys of a config file named the keys but not
// the file they were read from.
TEST(Config, ChecksBetweenKeysOfAFileNameTheFile) {
  test::ScratchDir dir;
  const std::string path = dir.file("heads.json");
  test::write_file_bytes(path, R"({"model": {"d_model": 32, "n_head": 3}})");
  EXPECT_THAT(error_of([&] { load_config(path); }),
              AllOf(HasSubstr("config file " + path + ": "),
                    HasSubstr(R"(config key "model.n_head": 3 heads do not divide)")));
  EXPECT_THAT(error_of([&] { load_config(path, {"training.steps=10"}); }),
              HasSubstr("config file " + path + " and --set: "));
}

TEST(Config, ChecksBetweenKeysNameTheKey) {
  EXPECT_THAT(set_error("model.n_head=5"),
              HasSubstr(R"(config key "model.n_head": 5 heads do not divide model.d_model 64)"));
  EXPECT_THAT(error_of([] {
                with({"data.kind=text", "model.seq_len=64"});
              }),
              HasSubstr(R"(config key "data.path" is empty: data.kind "text" needs a file)"));
  EXPECT_THAT(error_of([] {
                with({"data.kind=shards", "data.path=x.bin"});
              }),
              HasSubstr(R"(config key "model.seq_len" is 0)"));
  EXPECT_THAT(error_of([] {
                with({"data.task=add", "data.task_digits=9"});
              }),
              HasSubstr(R"(config key "data.task_digits": 9 does not suit data.task "add": )"
                        R"(expected an integer in [2, 8])"));
  EXPECT_THAT(error_of([] { with({"data.task_digits=2"}); }),
              HasSubstr(R"(does not suit data.task "sort": expected an integer in [3, 16])"));
  EXPECT_THAT(error_of([] { with({"schedule.warmup_steps=3000"}); }),
              HasSubstr(R"(config key "schedule.warmup_steps": 3000 warm-up steps exceed the )"
                        R"(schedule's 2000)"));
  EXPECT_NO_THROW(with({"schedule.warmup_steps=3000", "schedule.total_steps=5000"}));
  EXPECT_THAT(set_error("output.dir="), HasSubstr(R"(config key "output.dir" is empty)"));
}

TEST(Config, RoundTripsThroughJson) {
  // Every key away from its default, so a key that is dropped or mis-read on the way shows.
  const RunConfig c =
      with({"model.arch=llama",
            "model.n_layer=3",
            "model.d_model=96",
            "model.n_head=6",
            "model.n_kv_head=2",
            "model.rope_theta=500000",
            "model.ffn_hidden=160",
            "model.vocab=300",
            "model.seq_len=40",
            "model.activation=swiglu",
            "model.norm=rmsnorm",
            "model.norm_eps=1e-6",
            "model.zero_centered_gamma=true",
            "model.bias=false",
            "model.tie_embeddings=false",
            "model.fp8_primary_weights=true",
            "model.dtype=bf16",
            "fp8.enabled=false",
            R"(fp8.recipe={"recipe": "current", "fp8_format": "e4m3", "power_2_scale": true})",
            R"(fp8.high_precision_modules=["layers.*.attn.proj", "layers.1"])",
            "fp8.high_precision_first_layers=1",
            "fp8.high_precision_last_layers=2",
            "fp8.high_precision_after=0.8",
            "fp8.high_precision_backward=true",
            "fp8.lm_head=true",
            "data.kind=shards",
            "data.path=train_*.bin",
            "data.tokenizer=gpt2/",
            "data.val_path=val.bin",
            "data.val_fraction=0.2",
            "data.task=add",
            "data.task_digits=3",
            "data.seed=99",
            "optimizer.kind=sgd",
            "optimizer.lr=0.05",
            "optimizer.betas=[0.5, 0.6]",
            "optimizer.eps=1e-6",
            "optimizer.weight_decay=0",
            "optimizer.momentum=0.8",
            "optimizer.grad_clip=0",
            "schedule.warmup_steps=7",
            "schedule.total_steps=300",
            "schedule.min_lr_ratio=0",
            "training.steps=321",
            "training.batch_size=5",
            "training.grad_accum=2",
            "training.eval_interval=0",
            "training.eval_batches=3",
            "training.eval_examples=50",
            "training.checkpoint_interval=0",
            "training.log_interval=1",
            "training.seed=4",
            "training.device=cuda",
            "training.max_nonfinite_steps=2",
            "training.threads=3",
            "training.log_fp8_slots=true",
            "training.zero_stage=1",
            "training.grad_bucket_kb=64",
            "training.cuda_graphs=false",
            "output.dir=/tmp/run"});
  const Json json = to_json(c);
  size_t keys = 0;
  for (const auto& [section, values] : json.items()) keys += values.size();
  EXPECT_EQ(keys, schema().size());
  EXPECT_EQ(json["fp8"]["recipe"].dump(),
            R"({"recipe":"current","fp8_format":"e4m3","power_2_scale":true})");
  const RunConfig back = from_json(Json::parse(json.dump(2)));
  EXPECT_EQ(back, c);
  EXPECT_NE(back, RunConfig{});
  // Each key differs from the default, so each one was carried.
  const Json defaults = to_json(RunConfig{});
  for (const KeySpec& s : schema()) {
    const size_t dot = s.path.find('.');
    const std::string section = s.path.substr(0, dot), key = s.path.substr(dot + 1);
    EXPECT_NE(json[section][key], defaults[section][key]) << s.path;
  }
}

TEST(Config, DataOptionsFollowTheConfig) {
  const RunConfig c = with({"data.task=add", "data.task_digits=2", "data.seed=17"});
  const data::DataOptions options = data_options(c);
  EXPECT_EQ(options.kind, data::DataKind::kTask);
  EXPECT_EQ(options.task, data::TaskKind::kAdd);
  EXPECT_EQ(options.task_digits, 2);
  EXPECT_EQ(options.seed, 17u);
  const RunConfig text =
      with({"data.kind=text", "data.path=a.txt", "model.seq_len=64", "data.val_fraction=0.25"});
  EXPECT_EQ(data_options(text).kind, data::DataKind::kText);
  EXPECT_EQ(data_options(text).path, "a.txt");
  EXPECT_EQ(data_options(text).val_fraction, 0.25);
}

}  // namespace
}  // namespace octet::config
