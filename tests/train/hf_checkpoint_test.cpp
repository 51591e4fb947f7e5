// Hugging Face folders: GPT-2 and Llama logits of imported folders against float64 forwards
// written from the architectures (tests/support/hf_reference.py), import -> export -> import, the
// folders that must be refused, and weights loaded into FP8 primary weights.
#include "train/hf_checkpoint.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "kernels/quantized.h"
#include "modules/gpt.h"
#include "runtime/fp8_meta.h"
#include "runtime/safetensors.h"
#include "runtime/text_file.h"
#include "tests/support/hf_folders.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace octet::train {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr const char* kGoodFolders[] = {"gpt2_f32", "gpt2_bf16", "gpt2_f16_sharded",
                                        "gpt2_n_inner"};
// Grouped-query attention (2 and 1 key/value heads for 4 query heads), rope_theta 10000 and
// 500000, tied and untied heads, f32, bf16 and f16 (sharded).
constexpr const char* kLlamaFolders[] = {"llama_f32", "llama_bf16_tied", "llama_f16_sharded",
                                         "llama_mqa_tied"};

#define REQUIRE_HF_FOLDERS()                 \
  do {                                       \
    if (!test::hf_folders().error.empty()) { \
      FAIL() << test::hf_folders().error;    \
    }                                        \
  } while (0)

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_file_text(path, "test file"));
}

std::unique_ptr<modules::GPT> imported_model(const HfModel& hf) {
  auto model = std::make_unique<modules::GPT>(hf.config);
  load_parameter_values(*model, hf.weights);
  return model;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(HfCheckpoint, Gpt2FolderConfigIsRead) {
  REQUIRE_HF_FOLDERS();
  const HfModel hf = import_hf(test::hf_folders().folder("gpt2_f32"));
  EXPECT_EQ(hf.architecture, "GPT2LMHeadModel");
  EXPECT_EQ(hf.config.n_layer, 2);
  EXPECT_EQ(hf.config.d_model, 32);
  EXPECT_EQ(hf.config.n_head, 4);
  EXPECT_EQ(hf.config.vocab_size, 50);
  EXPECT_EQ(hf.config.max_seq_len, 16);
  EXPECT_EQ(hf.config.ffn, 0);
  EXPECT_EQ(hf.config.activation, modules::MLPActivation::kGelu);
  EXPECT_EQ(hf.config.norm_eps, 1e-5f);
  EXPECT_EQ(hf.bos_token_id, 49);
  EXPECT_EQ(hf.eos_token_id, 49);
  // Every parameter of octet's GPT, f32, and nothing else (the attention-mask buffers skipped).
  modules::GPT model(hf.config);
  ASSERT_EQ(hf.weights.size(), model.parameters().size());
  for (size_t i = 0; i < hf.weights.size(); ++i) {
    EXPECT_EQ(hf.weights[i].first, model.parameters()[i].name);
    EXPECT_EQ(hf.weights[i].second.dtype(), DType::kF32);
  }
}

// Compares the logits of the imported folder `name` with its reference.json (a float64 forward on
// the stored values). Bound per logit: a chain of f32 roundings whose sums add up to N terms
// errs by at most about N * 2^-24 times the sum of the magnitudes it adds; `terms` counts every
// reduction from the embedding to the logit for the architecture, the magnitude is the head's
// sum of |h_c * head[v, c]|, and a factor 2 covers the roundings of exp, tanh, sqrt and division.
// A layout mistake (an untransposed weight, q/k/v, heads or gate/up swapped, a rotation of the
// wrong pairs) moves logits by O(1), thousands of times the bound.
void expect_reference_logits(
    const std::string& name,
    const std::function<double(const modules::GPTConfig&, int64_t)>& terms) {
  SCOPED_TRACE(name);
  const std::string folder = test::hf_folders().folder(name);
  const HfModel hf = import_hf(folder);
  const std::unique_ptr<modules::GPT> model = imported_model(hf);
  const nlohmann::json ref = read_json(folder + "/reference.json");
  const auto ids_json = ref["ids"];
  const int64_t batch = static_cast<int64_t>(ids_json.size());
  const int64_t tokens = static_cast<int64_t>(ids_json[0].size());
  std::vector<int32_t> ids;
  for (const auto& row : ids_json) {
    for (const auto& id : row) ids.push_back(id.get<int32_t>());
  }
  autograd::InferenceModeGuard inference;
  const Tensor logits =
      model->forward(Tensor::from_bytes(ids.data(), {batch, tokens}, DType::kI32));
  ASSERT_EQ(logits.shape(), (Shape{batch, tokens, hf.config.vocab_size}));
  const std::vector<float> got = logits.to_floats();
  const auto want = ref["logits"].get<std::vector<double>>();
  const auto magnitude = ref["head_abs_sum"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), want.size());

  const double n = terms(hf.config, tokens);
  const double u = std::ldexp(1.0, -24);
  size_t bad = 0, first_bad = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = 2 * n * u * magnitude[i];
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    worst_ratio = std::max(worst_ratio, err / bound);
    if (!(err <= bound) && bad++ == 0) first_bad = i;
  }
  EXPECT_EQ(bad, 0u) << "first at " << first_bad << ": got " << got[first_bad] << ", want "
                     << want[first_bad] << ", bound " << 2 * n * u * magnitude[first_bad];
  ::testing::Test::RecordProperty(name + "_worst_error_over_bound", std::to_string(worst_ratio));
}

// GPT-2, per layer: both LayerNorms' mean and variance 4C, qkv C, scores D, attention-weighted
// values T, output projection C, fc1 C, fc2 F; then ln_f 2C and the head C.
TEST(HfCheckpoint, ImportedLogitsMatchAFloat64Gpt2Forward) {
  REQUIRE_HF_FOLDERS();
  for (const char* name : kGoodFolders) {
    expect_reference_logits(name, [](const modules::GPTConfig& c, int64_t tokens) {
      const int64_t C = c.d_model, L = c.n_layer, D = C / c.n_head;
      const int64_t F = c.ffn == 0 ? 4 * C : c.ffn;
      return static_cast<double>(L * (4 * C + C + D + tokens + C + C + F) + 3 * C);
    });
  }
}

// Llama, per layer: both RMSNorms' mean square 2C, q/k/v C, scores D, attention-weighted values
// T, o_proj C, gate and up C, down_proj F, and 2T for the rotation angles (octet's table rounds
// position * inv_freq in f32, an error that grows with the position); then the final norm C and
// the head C.
TEST(HfCheckpoint, ImportedLogitsMatchAFloat64LlamaForward) {
  REQUIRE_HF_FOLDERS();
  for (const char* name : kLlamaFolders) {
    expect_reference_logits(name, [](const modules::GPTConfig& c, int64_t tokens) {
      const int64_t C = c.d_model, L = c.n_layer, D = C / c.n_head, F = c.ffn;
      return static_cast<double>(L * (2 * C + C + D + tokens + C + C + F + 2 * tokens) + 2 * C);
    });
  }
}

// Each Llama folder's hyperparameters, and octet's Llama GPT holds exactly the tensors imported.
TEST(HfCheckpoint, LlamaFolderConfigIsRead) {
  REQUIRE_HF_FOLDERS();
  const HfModel hf = import_hf(test::hf_folders().folder("llama_f32"));
  EXPECT_EQ(hf.architecture, "LlamaForCausalLM");
  const modules::GPTConfig& c = hf.config;
  EXPECT_EQ(c.arch, modules::Arch::kLlama);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.ffn, 64);
  EXPECT_EQ(c.vocab_size, 50);
  EXPECT_EQ(c.max_seq_len, 16);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.norm, modules::NormKind::kRMSNorm);
  EXPECT_EQ(c.activation, modules::MLPActivation::kSwiglu);
  EXPECT_EQ(c.bias, modules::Bias::kNo);
  EXPECT_EQ(c.tie_embeddings, modules::TieEmbeddings::kNo);
  EXPECT_EQ(hf.bos_token_id, 1);
  EXPECT_EQ(hf.eos_token_id, 2);
  // (H + 2G) * D = (4 + 4) * 8 rows of q, k, v; 2F rows of gate and up.
  modules::GPT model(c);
  ASSERT_EQ(hf.weights.size(), model.parameters().size());
  for (size_t i = 0; i < hf.weights.size(); ++i) {
    EXPECT_EQ(hf.weights[i].first, model.parameters()[i].name);
    EXPECT_EQ(hf.weights[i].second.shape(), model.parameters()[i].value_shape())
        << hf.weights[i].first;
  }
  EXPECT_EQ(hf.weights.back().first, "lm_head.weight");

  const HfModel tied = import_hf(test::hf_folders().folder("llama_bf16_tied"));
  EXPECT_EQ(tied.config.tie_embeddings, modules::TieEmbeddings::kYes);
  EXPECT_EQ(tied.config.rope_theta, 500000);
  EXPECT_EQ(tied.config.norm_eps, 1e-5f);
  EXPECT_EQ(tied.weights.size(), hf.weights.size() - 1);
  EXPECT_EQ(import_hf(test::hf_folders().folder("llama_mqa_tied")).config.n_kv_head, 1);
}

// An import of a test folder, its model exported to `out` (as `architecture`) and imported again.
struct RoundTrip {
  HfModel first, second;
  std::string out, architecture;
};

// Fills `r` for folder `name`; the two imports must hold the same tensors, in order, bit for bit.
void round_trip(const char* name, const test::ScratchDir& scratch, RoundTrip& r) {
  r.first = import_hf(test::hf_folders().folder(name));
  const std::unique_ptr<modules::GPT> model = imported_model(r.first);
  r.out = scratch.file(name);
  r.architecture = export_hf(*model, r.out, {r.first.bos_token_id, r.first.eos_token_id});
  r.second = import_hf(r.out);
  ASSERT_EQ(r.first.weights.size(), r.second.weights.size());
  for (size_t i = 0; i < r.first.weights.size(); ++i) {
    EXPECT_EQ(r.first.weights[i].first, r.second.weights[i].first);
    EXPECT_TRUE(same_bits(r.first.weights[i].second, r.second.weights[i].second))
        << r.first.weights[i].first;
  }
}

TEST(HfCheckpoint, ImportExportImportGivesIdenticalTensors) {
  REQUIRE_HF_FOLDERS();
  test::ScratchDir scratch;
  for (const char* name : kGoodFolders) {
    SCOPED_TRACE(name);
    RoundTrip r;
    ASSERT_NO_FATAL_FAILURE(round_trip(name, scratch, r));
    const HfModel &first = r.first, &second = r.second;
    const std::string& out = r.out;
    EXPECT_EQ(second.config.n_layer, first.config.n_layer);
    EXPECT_EQ(second.config.d_model, first.config.d_model);
    EXPECT_EQ(second.config.max_seq_len, first.config.max_seq_len);
    EXPECT_EQ(second.config.norm_eps, first.config.norm_eps);
    EXPECT_EQ(second.bos_token_id, first.bos_token_id);

    // What transformers reads: the config keys, F32 tensors under GPT-2's names and layout.
    const nlohmann::json config = read_json(out + "/config.json");
    EXPECT_EQ(config["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
    EXPECT_EQ(config["model_type"], "gpt2");
    EXPECT_EQ(config["n_embd"], 32);
    EXPECT_EQ(config["n_positions"], 16);
    if (first.config.ffn == 0) {
      EXPECT_TRUE(config["n_inner"].is_null());
    } else {
      EXPECT_EQ(config["n_inner"], 48);
    }
    EXPECT_EQ(config["activation_function"], "gelu_new");
    EXPECT_EQ(config["layer_norm_epsilon"], 1e-5);
    EXPECT_EQ(config["tie_word_embeddings"], true);
    EXPECT_EQ(config["torch_dtype"], "float32");
    EXPECT_EQ(config["eos_token_id"], 49);
    const SafetensorsFile file = load_safetensors(out + "/model.safetensors");
    EXPECT_EQ(file.metadata.at("format"), "pt");
    EXPECT_EQ(file.tensors.size(), 4 + 12 * 2u);
    for (const auto& [tensor_name, t] : file.tensors) {
      EXPECT_TRUE(tensor_name.starts_with("transformer.")) << tensor_name;
      EXPECT_EQ(t.dtype(), DType::kF32) << tensor_name;
    }
    EXPECT_EQ(file.at("transformer.h.0.attn.c_attn.weight").shape(), (Shape{32, 96}));
    EXPECT_EQ(file.at("transformer.h.1.mlp.c_proj.weight").shape(),
              (Shape{first.config.ffn == 0 ? 128 : first.config.ffn, 32}));
    EXPECT_FALSE(file.contains("lm_head.weight"));
  }
}

TEST(HfCheckpoint, LlamaImportExportImportGivesIdenticalTensors) {
  REQUIRE_HF_FOLDERS();
  test::ScratchDir scratch;
  for (const char* name : kLlamaFolders) {
    SCOPED_TRACE(name);
    RoundTrip r;
    ASSERT_NO_FATAL_FAILURE(round_trip(name, scratch, r));
    const HfModel &first = r.first, &second = r.second;
    const std::string& out = r.out;
    EXPECT_EQ(r.architecture, "LlamaForCausalLM");
    const modules::GPTConfig &a = first.config, &b = second.config;
    EXPECT_EQ(b.arch, modules::Arch::kLlama);
    EXPECT_EQ(b.n_kv_head, a.n_kv_head);
    EXPECT_EQ(b.rope_theta, a.rope_theta);
    EXPECT_EQ(b.ffn, a.ffn);
    EXPECT_EQ(b.norm_eps, a.norm_eps);
    EXPECT_EQ(b.tie_embeddings, a.tie_embeddings);
    EXPECT_EQ(b.max_seq_len, a.max_seq_len);
    EXPECT_EQ(second.bos_token_id, first.bos_token_id);
    EXPECT_EQ(second.eos_token_id, first.eos_token_id);

    // What transformers' LlamaForCausalLM reads: the config keys, F32 tensors under its names.
    const bool tied = a.tie_embeddings == modules::TieEmbeddings::kYes;
    const int64_t kv = a.n_kv_head == 0 ? a.n_head : a.n_kv_head;
    const nlohmann::json config = read_json(out + "/config.json");
    EXPECT_EQ(config["architectures"], nlohmann::json({"LlamaForCausalLM"}));
    EXPECT_EQ(config["model_type"], "llama");
    EXPECT_EQ(config["hidden_size"], 32);
    EXPECT_EQ(config["intermediate_size"], 64);
    EXPECT_EQ(config["num_attention_heads"], 4);
    EXPECT_EQ(config["num_key_value_heads"], kv);
    EXPECT_EQ(config["head_dim"], 8);
    EXPECT_EQ(config["max_position_embeddings"], 16);
    EXPECT_EQ(config["hidden_act"], "silu");
    // The shortest decimal of the f32 epsilon: 1e-06 as config.json had it.
    EXPECT_EQ(config["rms_norm_eps"], std::stod(fmt::format("{}", a.norm_eps)));
    EXPECT_EQ(config["rope_theta"], a.rope_theta);
    EXPECT_TRUE(config["rope_scaling"].is_null());
    EXPECT_EQ(config["tie_word_embeddings"], tied);
    EXPECT_EQ(config["attention_bias"], false);
    EXPECT_EQ(config["mlp_bias"], false);
    EXPECT_EQ(config["torch_dtype"], "float32");
    const SafetensorsFile file = load_safetensors(out + "/model.safetensors");
    EXPECT_EQ(file.metadata.at("format"), "pt");
    EXPECT_EQ(file.tensors.size(), 2 + 9 * 2u + (tied ? 0 : 1));
    for (const auto& [tensor_name, t] : file.tensors) {
      EXPECT_TRUE(tensor_name.starts_with("model.") || tensor_name == "lm_head.weight")
          << tensor_name;
      EXPECT_EQ(t.dtype(), DType::kF32) << tensor_name;
    }
    EXPECT_EQ(file.at("model.embed_tokens.weight").shape(), (Shape{50, 32}));
    EXPECT_EQ(file.at("model.layers.0.self_attn.q_proj.weight").shape(), (Shape{32, 32}));
    EXPECT_EQ(file.at("model.layers.0.self_attn.k_proj.weight").shape(), (Shape{kv * 8, 32}));
    EXPECT_EQ(file.at("model.layers.1.self_attn.v_proj.weight").shape(), (Shape{kv * 8, 32}));
    EXPECT_EQ(file.at("model.layers.1.mlp.gate_proj.weight").shape(), (Shape{64, 32}));
    EXPECT_EQ(file.at("model.layers.1.mlp.down_proj.weight").shape(), (Shape{32, 64}));
    EXPECT_EQ(file.contains("lm_head.weight"), !tied);
  }
}

// The q/k/v and gate/up parts land in octet's rows where the forward reads them: k_proj's rows
// right after q_proj's, up_proj's after gate_proj's, each exactly as stored.
TEST(HfCheckpoint, LlamaPartsAreStackedInOctetsRowOrder) {
  REQUIRE_HF_FOLDERS();
  const std::string folder = test::hf_folders().folder("llama_f32");
  const HfModel hf = import_hf(folder);
  const SafetensorsFile file = load_safetensors(folder + "/model.safetensors");
  const auto weight = [&](const std::string& name) -> const Tensor& {
    for (const auto& [n, t] : hf.weights) {
      if (n == name) return t;
    }
    throw std::runtime_error("no " + name);
  };
  const auto rows = [](const Tensor& t, int64_t begin, int64_t end) {
    return t.slice(begin, end).clone();
  };
  const Tensor& qkv = weight("layers.1.attn.qkv.weight");  // (4 + 2 * 2) * 8 rows
  ASSERT_EQ(qkv.shape(), (Shape{64, 32}));
  EXPECT_TRUE(same_bits(rows(qkv, 0, 32), file.at("model.layers.1.self_attn.q_proj.weight")));
  EXPECT_TRUE(same_bits(rows(qkv, 32, 48), file.at("model.layers.1.self_attn.k_proj.weight")));
  EXPECT_TRUE(same_bits(rows(qkv, 48, 64), file.at("model.layers.1.self_attn.v_proj.weight")));
  const Tensor& fc1 = weight("layers.0.mlp.fc1.weight");
  ASSERT_EQ(fc1.shape(), (Shape{128, 32}));
  EXPECT_TRUE(same_bits(rows(fc1, 0, 64), file.at("model.layers.0.mlp.gate_proj.weight")));
  EXPECT_TRUE(same_bits(rows(fc1, 64, 128), file.at("model.layers.0.mlp.up_proj.weight")));
  EXPECT_TRUE(same_bits(weight("lm_head.weight"), file.at("lm_head.weight")));
  EXPECT_TRUE(same_bits(weight("ln_f.weight"), file.at("model.norm.weight")));
}

// Each faulty folder: one error naming the tensor or key and what was expected.
TEST(HfCheckpoint, FoldersItCannotTakeAreOneClearError) {
  REQUIRE_HF_FOLDERS();
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"bad_architecture", {"BertForMaskedLM", "not one octet imports", "GPT2LMHeadModel"}},
      {"bad_activation", {"\"activation_function\" is \"gelu\"", "gelu_new"}},
      {"bad_missing", {"missing tensor \"h.1.mlp.c_fc.bias\"", "(128,)"}},
      {"bad_extra", {"unexpected tensor \"h.0.attn.q_norm.weight\""}},
      {"bad_misshapen", {"\"h.0.attn.c_attn.weight\"", "(32, 95)", "(32, 96)", "n_embd 32"}},
      {"bad_config_shape", {"\"wte.weight\"", "(50, 32)", "n_embd 48", "(50, 48)"}},
      {"bad_dtype", {"\"h.1.ln_2.weight\"", "I32", "expected F32, BF16 or F16"}},
      {"bad_f64", {"\"ln_f.bias\"", "unknown dtype \"F64\""}},
      {"bad_untied_head", {"\"lm_head.weight\"", "differs from \"wte.weight\"", "ties"}},
      {"bad_truncated", {"model-00002-of-00003.safetensors", "truncated"}},
      {"bad_index_missing_file",
       {"model.safetensors.index.json", "names model-00003-of-00003.safetensors",
        "which is not in"}},
      {"bad_no_weights", {"no model.safetensors or model.safetensors.index.json"}},
      {"bad_llama_rope_scaling", {"\"rope_scaling\" is", "\"linear\"", "unscaled"}},
      {"bad_llama_attention_bias", {"\"attention_bias\" is true", "supports only false"}},
      {"bad_llama_head_dim", {"\"head_dim\" is 16", "= 8"}},
      {"bad_llama_kv_heads",
       {"\"num_key_value_heads\" 3 does not divide \"num_attention_heads\" 4"}},
      {"bad_llama_hidden_act", {"\"hidden_act\" is \"gelu\"", "silu"}},
      {"bad_llama_missing_k_proj",
       {"missing tensor \"model.layers.1.self_attn.k_proj.weight\"", "(16, 32)",
        "num_key_value_heads 2"}},
      {"bad_llama_gate_shape",
       {"\"model.layers.0.mlp.gate_proj.weight\"", "(63, 32)", "(64, 32)", "intermediate_size 64"}},
      {"bad_llama_missing_head",
       {"missing tensor \"lm_head.weight\"", "(50, 32)", "tie_word_embeddings false"}},
      {"bad_llama_tied_head_differs",
       {"\"lm_head.weight\"", "differs from \"model.embed_tokens.weight\"",
        "tie_word_embeddings true"}},
  };
  for (const auto& [name, says] : cases) {
    SCOPED_TRACE(name);
    const std::string folder = test::hf_folders().folder(name);  // clang 14: no captured binding
    const std::string error = test::error_of([&] { import_hf(folder); });
    for (const std::string& s : says) EXPECT_THAT(error, HasSubstr(s));
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  EXPECT_THAT(test::error_of([] { import_hf("/nonexistent/hf"); }),
              HasSubstr("/nonexistent/hf is not a directory"));
}

TEST(HfCheckpoint, ExportRefusesWhatGpt2CannotExpressAndLeavesNothing) {
  test::ScratchDir scratch;
  modules::GPTConfig base;
  base.vocab_size = 20;
  base.max_seq_len = 8;
  base.n_layer = 1;
  base.d_model = 16;
  base.n_head = 2;
  const std::vector<std::pair<std::string, std::function<void(modules::GPTConfig&)>>> cases = {
      {"model.norm", [](modules::GPTConfig& c) { c.norm = modules::NormKind::kRMSNorm; }},
      {"model.bias", [](modules::GPTConfig& c) { c.bias = modules::Bias::kNo; }},
      {"model.activation",
       [](modules::GPTConfig& c) { c.activation = modules::MLPActivation::kSwiglu; }},
      {"model.zero_centered_gamma",
       [](modules::GPTConfig& c) { c.zero_centered_gamma = modules::ZeroCenteredGamma::kYes; }},
      {"model.tie_embeddings",
       [](modules::GPTConfig& c) { c.tie_embeddings = modules::TieEmbeddings::kNo; }},
      {"model.n_kv_head", [](modules::GPTConfig& c) { c.n_kv_head = 1; }},
  };
  for (const auto& [key, change] : cases) {
    SCOPED_TRACE(key);
    modules::GPTConfig c = base;
    change(c);
    modules::GPT model(c);
    EXPECT_THAT(test::error_of([&] { export_hf(model, scratch.file("out")); }), HasSubstr(key));
  }
  // And what Llama cannot: a model.arch llama whose other keys are GPT-2's is refused by its norm.
  modules::GPTConfig llama = base;
  llama.arch = modules::Arch::kLlama;
  llama.norm = modules::NormKind::kRMSNorm;
  llama.bias = modules::Bias::kNo;
  llama.activation = modules::MLPActivation::kSwiglu;
  const std::vector<std::pair<std::string, std::function<void(modules::GPTConfig&)>>> llama_cases =
      {
          {"model.norm", [](modules::GPTConfig& c) { c.norm = modules::NormKind::kLayerNorm; }},
          {"model.bias", [](modules::GPTConfig& c) { c.bias = modules::Bias::kYes; }},
          {"model.activation",
           [](modules::GPTConfig& c) { c.activation = modules::MLPActivation::kGelu; }},
          {"model.zero_centered_gamma",
           [](modules::GPTConfig& c) { c.zero_centered_gamma = modules::ZeroCenteredGamma::kYes; }},
      };
  for (const auto& [key, change] : llama_cases) {
    SCOPED_TRACE("llama " + key);
    modules::GPTConfig c = llama;
    change(c);
    modules::GPT model(c);
    const std::string error = test::error_of([&] { export_hf(model, scratch.file("out")); });
    EXPECT_THAT(error, HasSubstr(key));
    EXPECT_THAT(error, HasSubstr("LlamaForCausalLM"));
  }
  {
    modules::GPT ok(llama);  // ffn 0: intermediate_size 4 * d_model
    EXPECT_EQ(export_hf(ok, scratch.file("llama_ok")), "LlamaForCausalLM");
    EXPECT_EQ(read_json(scratch.file("llama_ok/config.json"))["intermediate_size"], 64);
    fs::remove_all(scratch.file("llama_ok"));
  }
  // A folder that holds something is not replaced.
  modules::GPT model(base);
  fs::create_directory(scratch.file("full"));
  test::write_file_bytes(scratch.file("full/keep.txt"), "kept");
  EXPECT_THAT(test::error_of([&] { export_hf(model, scratch.file("full")); }),
              HasSubstr("not an empty folder"));
  EXPECT_EQ(test::read_file_bytes(scratch.file("full/keep.txt")), "kept");
  // Nothing else was left behind: no output folder, no temporary one.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(scratch.path())) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"full"});
  // An empty folder is filled.
  fs::create_directory(scratch.file("empty"));
  export_hf(model, scratch.file("empty"));
  EXPECT_TRUE(fs::exists(scratch.file("empty/model.safetensors")));
  EXPECT_TRUE(fs::exists(scratch.file("empty/config.json")));
}

// FP8 primary weights take imported values as at construction: quantized from them with no amax
// recorded, and their f32 master is the values themselves.
TEST(HfCheckpoint, LoadedValuesBecomeFp8PrimaryWeightsAndTheirMasters) {
  REQUIRE_HF_FOLDERS();
  for (const char* folder : {"gpt2_f32", "llama_f32"}) {
    const HfModel hf = import_hf(test::hf_folders().folder(folder));
    for (const Recipe& recipe : {Recipe::delayed(), Recipe::current(), Recipe::mxfp8()}) {
      SCOPED_TRACE(std::string(folder) + " " + describe(recipe));
      modules::GPTConfig c = hf.config;
      c.recipe = recipe;
      c.fp8_primary_weights = modules::FP8PrimaryWeights::kYes;
      modules::GPT model(c);
      load_parameter_values(model, hf.weights);
      int fp8 = 0;
      for (const modules::Parameter& p : model.parameters()) {
        const Tensor* want = nullptr;
        for (const auto& [name, t] : hf.weights) {
          if (name == p.name) want = &t;
        }
        ASSERT_NE(want, nullptr) << p.name;
        if (!p.is_fp8()) {
          EXPECT_TRUE(same_bits(*p.tensor, *want)) << p.name;
          continue;
        }
        ++fp8;
        ASSERT_TRUE(p.initial_master->defined());
        EXPECT_TRUE(same_bits(*p.initial_master, *want)) << p.name;
        // E4M3 keeps 3 mantissa bits: half a step is 1/16 of a value; values far below the
        // tensor's scale flush, hence the absolute floor.
        const std::vector<float> got = ops::dequantize(**p.fp8, DType::kF32).to_floats();
        const std::vector<float> w = want->to_floats();
        const std::vector<double> wd(w.begin(), w.end());
        EXPECT_TRUE(test::all_close(got, wd, {2e-3, 1.0 / 16})) << p.name;
      }
      EXPECT_EQ(fp8, 4 * hf.config.n_layer);
      for (const auto& [name, meta] : model.fp8_metas()) {
        for (const FP8Slot& slot : meta->slots(FP8Direction::kForward)) {
          for (float v : slot.amax_history.to_floats()) ASSERT_EQ(v, 0.f) << name;
        }
      }
    }
  }
}

TEST(HfCheckpoint, LoadParameterValuesNamesWhatDoesNotFit) {
  REQUIRE_HF_FOLDERS();
  const HfModel hf = import_hf(test::hf_folders().folder("gpt2_f32"));
  modules::GPT model(hf.config);
  NamedTensors missing(hf.weights.begin() + 1, hf.weights.end());
  EXPECT_THAT(test::error_of([&] { load_parameter_values(model, missing); }),
              HasSubstr("missing \"wte.weight\""));
  NamedTensors extra = hf.weights;
  extra.emplace_back("lm_head.weight", hf.weights.front().second);
  EXPECT_THAT(test::error_of([&] { load_parameter_values(model, extra); }),
              HasSubstr("unexpected \"lm_head.weight\""));
  NamedTensors wrong = hf.weights;
  wrong[1].second = Tensor::zeros({3, 32}, DType::kF32);
  EXPECT_THAT(test::error_of([&] { load_parameter_values(model, wrong); }),
              HasSubstr("\"wpe.weight\" is (3, 32) but the GPT expects (16, 32)"));
}

}  // namespace
}  // namespace octet::train
