// Hugging Face folders (GPT-2 and Llama) through the command line: import -> generate (token ids,
// high precision and FP8) -> eval -> export, fine-tuning an imported model with train --init
// under each recipe, and the input it refuses (one line on stderr, nothing written).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "data/dataset.h"
#include "modules/gpt.h"
#include "tests/support/hf_folders.h"
#include "tests/support/scratch_dir.h"
#include "tests/tools/cli_test_util.h"
#include "tools/checkpoint.h"
#include "tools/config.h"
#include "tools/metrics.h"
#include "train/hf_checkpoint.h"

namespace octet::cli {
namespace {

using test_cli::expect_one_clear_line;
using test_cli::octet;
using test_cli::Outcome;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

#define REQUIRE_HF_FOLDERS()                                                   \
  do {                                                                         \
    if (!test::hf_folders().error.empty()) FAIL() << test::hf_folders().error; \
  } while (0)

std::string folder(const std::string& name) { return test::hf_folders().folder(name); }

bool same_weights(const train::HfModel& a, const train::HfModel& b) {
  if (a.weights.size() != b.weights.size()) return false;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const Tensor& x = a.weights[i].second;
    const Tensor& y = b.weights[i].second;
    if (a.weights[i].first != b.weights[i].first || x.shape() != y.shape() ||
        std::memcmp(x.data(), y.data(), x.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

// The greedy continuation the library gives the folder's model.
std::string library_greedy(const std::string& hf_folder, const std::vector<int32_t>& prompt,
                           int64_t new_tokens) {
  const train::HfModel hf = train::import_hf(hf_folder);
  modules::GPT model(hf.config);
  train::load_parameter_values(model, hf.weights);
  model.eval();
  const Tensor ids =
      Tensor::from_bytes(prompt.data(), {1, static_cast<int64_t>(prompt.size())}, DType::kI32);
  const Tensor out = model.generate(ids, new_tokens);
  std::string text;
  for (int64_t i = 0; i < out.numel(); ++i) {
    text += (i > 0 ? "," : "") + std::to_string(out.data_as<int32_t>()[i]);
  }
  return text + "\n";
}

TEST(HfCli, ImportGenerateEvalExport) {
  REQUIRE_HF_FOLDERS();
  test::ScratchDir scratch;
  const std::string ckpt = scratch.file("gpt2.safetensors");
  const Outcome imported = octet({"import", folder("gpt2_bf16"), "--out", ckpt});
  ASSERT_EQ(imported.code, 0) << imported.err;
  EXPECT_THAT(imported.out, HasSubstr("imported GPT2LMHeadModel"));
  EXPECT_EQ(octet({"inspect", ckpt}).code, 0);

  // Token ids in, the greedy continuation out, as the library computes it.
  const Outcome gen =
      octet({"generate", "--checkpoint", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "6"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_EQ(gen.out, library_greedy(folder("gpt2_bf16"), {1, 2, 3}, 6));
  // The same weights under FP8 recipes chosen now.
  const std::regex six_ids(R"(\d+(,\d+){5}\n)");
  for (const char* recipe : {R"({"recipe":"current"})", R"({"recipe":"mxfp8"})"}) {
    const Outcome fp8 =
        octet({"generate", "--checkpoint", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "6",
               "--set", "fp8.enabled=true", "--set", std::string("fp8.recipe=") + recipe});
    ASSERT_EQ(fp8.code, 0) << recipe << ": " << fp8.err;
    EXPECT_TRUE(std::regex_match(fp8.out, six_ids)) << fp8.out;
    EXPECT_THAT(fp8.err, HasSubstr("FP8 row-wise, 0 B FP8 column-wise")) << fp8.err;
  }

  const Outcome eval =
      octet({"eval", "--checkpoint", ckpt, "--examples", "8", "--set", "data.task_digits=4",
             "--set", "fp8.enabled=true", "--set", R"(fp8.recipe={"recipe":"current"})"});
  ASSERT_EQ(eval.code, 0) << eval.err;
  EXPECT_THAT(eval.out, HasSubstr("accuracy"));

  // Exported and imported again: the same tensors as the folder it came from.
  const Outcome exported = octet({"export", ckpt, "--to", scratch.file("hf")});
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_TRUE(
      same_weights(train::import_hf(folder("gpt2_bf16")), train::import_hf(scratch.file("hf"))));
  EXPECT_THAT(test::read_file_bytes(scratch.file("hf/config.json")),
              HasSubstr("\"eos_token_id\": 49"));

  // n_inner becomes model.ffn_hidden, and goes back out.
  const std::string inner = scratch.file("inner.safetensors");
  ASSERT_EQ(octet({"import", folder("gpt2_n_inner"), "--out", inner}).code, 0);
  EXPECT_THAT(octet({"inspect", inner}).out, HasSubstr("\"ffn_hidden\": 48"));
  ASSERT_EQ(octet({"export", inner, "--to", scratch.file("inner_hf")}).code, 0);
  EXPECT_TRUE(same_weights(train::import_hf(folder("gpt2_n_inner")),
                           train::import_hf(scratch.file("inner_hf"))));
}

// A Llama folder (grouped-query attention, an untied head, rms_norm_eps 1e-6) becomes a checkpoint
// whose model.* keys say so, generates what the library generates, and goes back out unchanged.
TEST(HfCli, LlamaImportGenerateExport) {
  REQUIRE_HF_FOLDERS();
  test::ScratchDir scratch;
  const std::string ckpt = scratch.file("llama.safetensors");
  const Outcome imported = octet({"import", folder("llama_f32"), "--out", ckpt});
  ASSERT_EQ(imported.code, 0) << imported.err;
  EXPECT_THAT(imported.out, HasSubstr("imported LlamaForCausalLM"));
  EXPECT_THAT(imported.out, HasSubstr("4 heads (2 key/value)"));
  const Outcome inspected = octet({"inspect", ckpt, "--json"});
  ASSERT_EQ(inspected.code, 0) << inspected.err;
  const auto model = nlohmann::json::parse(inspected.out)["config"]["model"];
  EXPECT_EQ(model["arch"], "llama");
  EXPECT_EQ(model["n_kv_head"], 2);
  EXPECT_EQ(model["rope_theta"], 10000.0);
  EXPECT_EQ(model["ffn_hidden"], 64);
  EXPECT_EQ(model["norm"], "rmsnorm");
  EXPECT_EQ(model["norm_eps"], 1e-6);
  EXPECT_EQ(model["activation"], "swiglu");
  EXPECT_EQ(model["bias"], false);
  EXPECT_EQ(model["tie_embeddings"], false);
  EXPECT_EQ(model["seq_len"], 16);

  const Outcome gen =
      octet({"generate", "--checkpoint", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "6"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_EQ(gen.out, library_greedy(folder("llama_f32"), {1, 2, 3}, 6));
  const Outcome fp8 =
      octet({"generate", "--checkpoint", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "6",
             "--set", "fp8.enabled=true", "--set", R"(fp8.recipe={"recipe":"current"})"});
  ASSERT_EQ(fp8.code, 0) << fp8.err;
  EXPECT_TRUE(std::regex_match(fp8.out, std::regex(R"(\d+(,\d+){5}\n)"))) << fp8.out;

  const Outcome exported = octet({"export", ckpt, "--to", scratch.file("hf")});
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_THAT(exported.out, HasSubstr("as LlamaForCausalLM"));
  EXPECT_TRUE(
      same_weights(train::import_hf(folder("llama_f32")), train::import_hf(scratch.file("hf"))));
  const std::string config = test::read_file_bytes(scratch.file("hf/config.json"));
  EXPECT_THAT(config, HasSubstr("\"rms_norm_eps\": 1e-06"));
  EXPECT_THAT(config, HasSubstr("\"eos_token_id\": 2"));

  // Tied, rope_theta 500000, rms_norm_eps 1e-5, stored in bf16.
  const std::string tied = scratch.file("tied.safetensors");
  ASSERT_EQ(octet({"import", folder("llama_bf16_tied"), "--out", tied}).code, 0);
  ASSERT_EQ(octet({"export", tied, "--to", scratch.file("tied_hf")}).code, 0);
  EXPECT_TRUE(same_weights(train::import_hf(folder("llama_bf16_tied")),
                           train::import_hf(scratch.file("tied_hf"))));
  EXPECT_THAT(test::read_file_bytes(scratch.file("tied_hf/config.json")),
              HasSubstr("\"tie_word_embeddings\": true"));
}

// A Llama octet trained itself on a task (model.seq_len 0: no position embedding to take it from)
// under FP8 primary weights goes out as a LlamaForCausalLM holding its dequantized weights, and
// runs from --prompt-ids.
TEST(HfCli, TrainedLlamaExportsAsLlamaForCausalLM) {
  test::ScratchDir scratch;
  const std::string run = scratch.file("run");
  const Outcome trained = octet(test_cli::tiny_train(
      run, {"--set", "model.arch=llama", "--set", "model.n_head=4", "--set", "model.n_kv_head=2",
            "--set", "model.norm=rmsnorm", "--set", "model.norm_eps=1e-6", "--set",
            "model.activation=swiglu", "--set", "model.bias=false", "--set",
            "model.tie_embeddings=false", "--set", "model.fp8_primary_weights=true"}));
  ASSERT_EQ(trained.code, 0) << trained.err;
  const std::string ckpt = run + "/checkpoint.safetensors";
  const Outcome exported = octet({"export", ckpt, "--to", scratch.file("hf")});
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_THAT(exported.out, HasSubstr("as LlamaForCausalLM"));
  const train::HfModel hf = train::import_hf(scratch.file("hf"));
  EXPECT_EQ(hf.config.n_kv_head, 2);
  EXPECT_EQ(hf.config.norm_eps, 1e-6f);
  EXPECT_EQ(hf.config.tie_embeddings, modules::TieEmbeddings::kNo);
  train::HfModel from_checkpoint;
  from_checkpoint.weights = cli::read_init_weights(ckpt).values;
  EXPECT_TRUE(same_weights(from_checkpoint, hf));
  const Outcome gen =
      octet({"generate", "--checkpoint", ckpt, "--prompt-ids", "1,2", "--max-new-tokens", "3"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_TRUE(std::regex_match(gen.out, std::regex(R"(\d+(,\d+){2}\n)"))) << gen.out;
}

TEST(HfCli, BadInputIsOneLineAndWritesNothing) {
  REQUIRE_HF_FOLDERS();
  test::ScratchDir scratch;
  const std::string out = scratch.file("m.safetensors");
  const std::vector<std::pair<std::string, std::string>> folders = {
      {"bad_architecture", "BertForMaskedLM"},
      {"bad_activation", "activation_function"},
      {"bad_missing", "h.1.mlp.c_fc.bias"},
      {"bad_extra", "h.0.attn.q_norm.weight"},
      {"bad_misshapen", "h.0.attn.c_attn.weight"},
      {"bad_config_shape", "n_embd 48"},
      {"bad_dtype", "I32"},
      {"bad_f64", "F64"},
      {"bad_untied_head", "lm_head.weight"},
      {"bad_truncated", "truncated"},
      {"bad_index_missing_file", "model-00003-of-00003.safetensors"},
      {"bad_no_weights", "no model.safetensors"},
      {"bad_llama_rope_scaling", "rope_scaling"},
      {"bad_llama_attention_bias", "attention_bias"},
      {"bad_llama_head_dim", "head_dim"},
      {"bad_llama_kv_heads", "num_key_value_heads"},
      {"bad_llama_missing_k_proj", "model.layers.1.self_attn.k_proj.weight"},
      {"bad_llama_gate_shape", "model.layers.0.mlp.gate_proj.weight"},
      {"bad_llama_missing_head", "lm_head.weight"},
  };
  for (const auto& [name, says] : folders) {
    SCOPED_TRACE(name);
    expect_one_clear_line(octet({"import", folder(name), "--out", out}), "import", says);
    EXPECT_FALSE(fs::exists(out));
  }
  expect_one_clear_line(octet({"import", folder("gpt2_f32")}), "import", "--out is required");
  expect_one_clear_line(octet({"import", "--out", out}), "import", "expected one Hugging Face");
  ASSERT_EQ(octet({"import", folder("gpt2_f32"), "--out", out}).code, 0);
  expect_one_clear_line(octet({"import", folder("gpt2_f32"), "--out", out}), "import", "exists");

  expect_one_clear_line(
      octet({"generate", "--checkpoint", out, "--prompt-ids", "1,x", "--max-new-tokens", "2"}),
      "generate", "\"x\" is not a token id");
  expect_one_clear_line(
      octet({"generate", "--checkpoint", out, "--prompt-ids", "1,99", "--max-new-tokens", "2"}),
      "generate", "vocabulary [0, 50)");
  expect_one_clear_line(
      octet({"generate", "--checkpoint", out, "--prompt-ids", "1", "--prompt", "a"}), "generate",
      "not both");

  fs::create_directory(scratch.file("full"));
  test::write_file_bytes(scratch.file("full/keep"), "kept");
  expect_one_clear_line(octet({"export", out, "--to", scratch.file("full")}), "export",
                        "not an empty folder");
  expect_one_clear_line(octet({"export", out}), "export", "--to is required");

  // A model GPT-2 cannot express is refused before anything is written.
  const std::string run = scratch.file("rms");
  ASSERT_EQ(octet(test_cli::tiny_train(run, {"--set", "model.norm=rmsnorm"})).code, 0);
  expect_one_clear_line(
      octet({"export", run + "/checkpoint.safetensors", "--to", scratch.file("rms_hf")}), "export",
      "model.norm");
  EXPECT_FALSE(fs::exists(scratch.file("rms_hf")));
  // The recipe of a checkpoint trained under FP8 stays.
  expect_one_clear_line(octet({"generate", "--checkpoint", run + "/checkpoint.safetensors",
                               "--prompt-ids", "1", "--set", "fp8.enabled=false"}),
                        "generate", "cannot change fp8.*");
  for (const auto& e : fs::directory_iterator(scratch.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

// A short fine-tuning run from `source` under `sets`, one loss per step.
std::vector<double> fine_tune(const std::string& dir, const std::string& source,
                              const std::vector<std::string>& sets) {
  Args a = {"train",  "--quiet",
            "--out",  dir,
            "--init", source,
            "--set",  "data.task_digits=4",
            "--set",  "training.steps=12",
            "--set",  "training.batch_size=8",
            "--set",  "training.log_interval=1",
            "--set",  "training.eval_interval=0",
            "--set",  "training.eval_examples=8",
            "--set",  "training.checkpoint_interval=0",
            "--set",  "schedule.warmup_steps=2"};
  for (const std::string& s : sets) a.insert(a.end(), {"--set", s});
  const Outcome r = octet(a);
  EXPECT_EQ(r.code, 0) << r.err;
  std::vector<double> losses;
  if (r.code != 0) return losses;
  for (const auto& line : read_metrics(dir + "/metrics.jsonl")) {
    if (line.contains("loss") && line["loss"].is_number()) losses.push_back(line["loss"]);
  }
  return losses;
}

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

// The first step's loss is the imported model's on the first batch: the run starts from the
// folder's weights, not from a fresh initialisation.
TEST(HfCli, TrainInitStartsFromTheImportedWeights) {
  REQUIRE_HF_FOLDERS();
  test::ScratchDir scratch;
  for (const char* name : {"gpt2_f32", "llama_f32"}) {
    SCOPED_TRACE(name);
    const std::vector<double> losses =
        fine_tune(scratch.file(name), folder(name), {"fp8.enabled=false"});
    ASSERT_EQ(losses.size(), 12u);

    const train::HfModel hf = train::import_hf(folder(name));
    modules::GPT model(hf.config);
    train::load_parameter_values(model, hf.weights);
    const config::RunConfig c = config::load_config("", {"data.task_digits=4"});
    const auto data = data::open_dataset(config::data_options(c));
    const data::Batch b = data->next_batch(data::Split::kTrain, 8, hf.config.max_seq_len);
    autograd::NoGradGuard no_grad;
    const double want = model.loss(b.inputs, b.targets).item();
    EXPECT_NEAR(losses.front(), want, 1e-5 * want);
  }
}

TEST(HfCli, FineTuningAnImportedModelLowersItsLossUnderEachRecipe) {
  REQUIRE_HF_FOLDERS();
  test::ScratchDir scratch;
  // An imported checkpoint and the folder itself are both sources.
  const std::string ckpt = scratch.file("gpt2.safetensors");
  ASSERT_EQ(octet({"import", folder("gpt2_f16_sharded"), "--out", ckpt}).code, 0);
  const std::string llama = scratch.file("llama.safetensors");
  ASSERT_EQ(octet({"import", folder("llama_f16_sharded"), "--out", llama}).code, 0);
  struct Case {
    std::string name, source;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {"f32", ckpt, {"fp8.enabled=false"}},
      {"delayed", folder("gpt2_f32"), {}},
      {"delayed_fp8_weights", ckpt, {"model.fp8_primary_weights=true"}},
      {"current", ckpt, {R"(fp8.recipe={"recipe":"current"})"}},
      {"mxfp8",
       folder("gpt2_bf16"),
       {R"(fp8.recipe={"recipe":"mxfp8"})", "model.fp8_primary_weights=true"}},
      {"blockwise", ckpt, {R"(fp8.recipe={"recipe":"blockwise"})"}},
      {"nvfp4", ckpt, {R"(fp8.recipe={"recipe":"nvfp4"})"}},
      // Llama: grouped-query attention, rotary positions, SwiGLU, an untied head.
      {"llama_f32", llama, {"fp8.enabled=false"}},
      {"llama_delayed", folder("llama_f32"), {}},
      {"llama_current_fp8_weights",
       llama,
       {R"(fp8.recipe={"recipe":"current"})", "model.fp8_primary_weights=true"}},
      {"llama_mxfp8", folder("llama_bf16_tied"), {R"(fp8.recipe={"recipe":"mxfp8"})"}},
      {"llama_nvfp4", llama, {R"(fp8.recipe={"recipe":"nvfp4"})"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const std::vector<double> losses = fine_tune(scratch.file(k.name), k.source, k.sets);
    ASSERT_EQ(losses.size(), 12u);
    EXPECT_LT(mean(losses, 9, 12), mean(losses, 0, 3) - 0.1)
        << fmt::format("{}", fmt::join(losses, ", "));
  }
}

TEST(HfCli, TrainInitRefusesModelKeysThatDisagree) {
  REQUIRE_HF_FOLDERS();
  test::ScratchDir scratch;
  const std::string src = folder("gpt2_f32");
  expect_one_clear_line(
      octet({"train", "--init", src, "--out", scratch.file("a"), "--set", "model.n_layer=3"}),
      "train", "config key \"model.n_layer\" is 3 (from --set)");
  const std::string file = scratch.file("run.json");
  test::write_file_bytes(file, R"({"model": {"d_model": 64}})");
  expect_one_clear_line(
      octet({"train", "--init", src, "--config", file, "--out", scratch.file("b")}), "train",
      "\"model.d_model\" is 64 (from " + file + "), but the --init weights");
  expect_one_clear_line(octet({"train", "--init", src, "--resume", "--out", scratch.file("c")}),
                        "train", "give one of them");
  expect_one_clear_line(
      octet({"train", "--init", folder("bad_missing"), "--out", scratch.file("d")}), "train",
      "h.1.mlp.c_fc.bias");
  for (const char* dir : {"a", "b", "c", "d"}) EXPECT_FALSE(fs::exists(scratch.file(dir))) << dir;
}

}  // namespace
}  // namespace octet::cli
