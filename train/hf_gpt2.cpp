// GPT2LMHeadModel in octet's terms: its config.json keys, and its tensors (Conv1D weights stored
// (in, out), the fused c_attn whose (3, H, D) output order is octet's qkv order) by octet name.
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"
#include "runtime/named.h"
#include "train/hf_architecture.h"

namespace octet::train::detail {
namespace {

using Json = nlohmann::json;
using modules::GPTConfig;
using modules::MLPActivation;

// transformers' activation names that are octet's activations (gelu_new, gelu_pytorch_tanh and
// gelu_fast are all the tanh form of GELU, which is octet's gelu).
struct ActivationName {
  std::string_view hf;
  MLPActivation octet;
};
constexpr ActivationName kActivations[] = {
    {"gelu_new", MLPActivation::kGelu},  {"gelu_pytorch_tanh", MLPActivation::kGelu},
    {"gelu_fast", MLPActivation::kGelu}, {"relu", MLPActivation::kRelu},
    {"silu", MLPActivation::kSilu},      {"swish", MLPActivation::kSilu},
};

MLPActivation read_activation(const Json& config, const std::string& where) {
  if (!config.contains("activation_function") || config["activation_function"].is_null()) {
    return MLPActivation::kGelu;  // transformers' GPT2Config default, gelu_new
  }
  const Json& v = config["activation_function"];
  if (v.is_string()) {
    for (const ActivationName& a : kActivations) {
      if (v.get<std::string>() == a.hf) return a.octet;
    }
  }
  OCTET_FAIL(where, ": \"activation_function\" is ", v.dump(),
             ", expected gelu_new (or gelu_pytorch_tanh, gelu_fast), relu or silu: octet's GELU "
             "is the tanh form, so the exact (erf) \"gelu\" is not taken");
}

constexpr Named<MLPActivation> kActivationNames[] = {{MLPActivation::kGelu, "gelu_new"},
                                                     {MLPActivation::kRelu, "relu"},
                                                     {MLPActivation::kSilu, "silu"}};
std::string_view activation_name(MLPActivation a) {
  const std::string_view name = name_or_empty(kActivationNames, a);
  OCTET_CHECK(!name.empty(),
              "cannot export to GPT2LMHeadModel: config key \"model.activation\" is a gated or "
              "squared activation, which GPT-2's MLP cannot express (gelu, relu or silu only)");
  return name;
}

// A key whose only supported value is transformers' default: refused, naming it, otherwise.
void require_default(const Json& config, const char* key, bool expected, const std::string& where,
                     std::string_view why) {
  OCTET_CHECK(bool_key(config, key, expected, where) == expected, where, ": \"", key, "\" is ",
              config[key].dump(), ", but octet's GPT-2 supports only ", expected ? "true" : "false",
              " (", why, ")");
}

GPTConfig read_config(const Json& config, const std::string& where) {
  GPTConfig c;
  c.n_layer = positive_int_key(config, "n_layer", where);
  c.d_model = positive_int_key(config, "n_embd", where);
  c.n_head = positive_int_key(config, "n_head", where);
  c.max_seq_len = positive_int_key(config, "n_positions", where);
  c.vocab_size = positive_int_key(config, "vocab_size", where);
  OCTET_CHECK(c.d_model % c.n_head == 0, where, ": \"n_head\" ", c.n_head,
              " does not divide \"n_embd\" ", c.d_model);
  if (config.contains("n_inner") && !config["n_inner"].is_null()) {
    const int64_t inner = positive_int_key(config, "n_inner", where);
    c.ffn = inner == 4 * c.d_model ? 0 : inner;
  }
  c.activation = read_activation(config, where);
  if (config.contains("layer_norm_epsilon") && !config["layer_norm_epsilon"].is_null()) {
    const Json& eps = config["layer_norm_epsilon"];
    OCTET_CHECK(eps.is_number() && eps.get<double>() > 0, where, ": \"layer_norm_epsilon\" is ",
                eps.dump(), ", expected a number > 0");
    c.norm_eps = eps.get<float>();
  }
  require_default(config, "tie_word_embeddings", true, where,
                  "GPT2LMHeadModel ties its LM head to wte, and so does octet's GPT");
  require_default(config, "scale_attn_weights", true, where,
                  "attention scores are scaled by 1/sqrt(head size)");
  require_default(config, "scale_attn_by_inverse_layer_idx", false, where,
                  "no per-layer attention scaling");
  require_default(config, "add_cross_attention", false, where, "a decoder-only model");
  return c;
}

// A float as the shortest decimal that reads back as it (1e-05, not 9.999999747378752e-06).
double decimal(float x) { return std::stod(fmt::format("{}", x)); }

nlohmann::ordered_json write_config(const GPTConfig& c, const HfExportOptions& options) {
  const char* refuse = "cannot export to GPT2LMHeadModel: config key ";
  OCTET_CHECK(c.arch == modules::Arch::kGPT2, refuse,
              "\"model.arch\" is llama, but GPT-2 has learned positions");
  OCTET_CHECK(c.tie_embeddings == modules::TieEmbeddings::kYes, refuse,
              "\"model.tie_embeddings\" is false, but GPT2LMHeadModel ties its LM head to wte");
  OCTET_CHECK(c.n_kv_head == 0 || c.n_kv_head == c.n_head, refuse, "\"model.n_kv_head\" is ",
              c.n_kv_head, ", but GPT-2 has one key/value head per head (", c.n_head, ")");
  OCTET_CHECK(c.norm == modules::NormKind::kLayerNorm, refuse,
              "\"model.norm\" is rmsnorm, but GPT-2 has LayerNorm");
  OCTET_CHECK(c.zero_centered_gamma == modules::ZeroCenteredGamma::kNo, refuse,
              "\"model.zero_centered_gamma\" is true, which GPT-2's LayerNorm cannot express");
  OCTET_CHECK(c.bias == modules::Bias::kYes, refuse,
              "\"model.bias\" is false, but every GPT-2 layer has biases");
  const auto token = [](const std::optional<int64_t>& id) {
    return id ? nlohmann::ordered_json(*id) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.max_seq_len},
      {"n_ctx", c.max_seq_len},
      {"n_embd", c.d_model},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", c.ffn == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.ffn)},
      {"activation_function", activation_name(c.activation)},
      {"layer_norm_epsilon", decimal(c.norm_eps)},
      {"resid_pdrop", c.dropout},
      {"embd_pdrop", c.dropout},
      {"attn_pdrop", c.dropout},
      {"initializer_range", decimal(c.init_std)},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"bos_token_id", token(options.bos_token_id)},
      {"eos_token_id", token(options.eos_token_id)},
      {"torch_dtype", "float32"},
  };
  return j;
}

std::vector<HfTensor> tensors(const GPTConfig& c) {
  const int64_t C = c.d_model, V = c.vocab_size, P = c.max_seq_len;
  const int64_t F = c.ffn == 0 ? 4 * C : c.ffn;
  const std::string e = "n_embd " + std::to_string(C);
  const std::string f =
      c.ffn == 0 ? e + " (n_inner null: 4 * n_embd)" : e + ", n_inner " + std::to_string(F);
  const auto same = [](std::string octet, std::string hf, Shape shape, std::string keys) {
    return HfTensor{std::move(octet), shape, {{std::move(hf), shape, HfLayout::kSame, keys}}};
  };
  // A Conv1D weight: octet's (out, in) stored (in, out).
  const auto conv = [](std::string octet, std::string hf, int64_t in, int64_t out,
                       std::string keys) {
    return HfTensor{std::move(octet),
                    {out, in},
                    {{std::move(hf), {in, out}, HfLayout::kTransposed, std::move(keys)}}};
  };
  std::vector<HfTensor> t;
  t.push_back(
      same("wte.weight", "wte.weight", {V, C}, "vocab_size " + std::to_string(V) + ", " + e));
  t.push_back(
      same("wpe.weight", "wpe.weight", {P, C}, "n_positions " + std::to_string(P) + ", " + e));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string o = "layers." + std::to_string(i) + ".";
    const std::string h = "h." + std::to_string(i) + ".";
    t.push_back(same(o + "attn.qkv.norm.weight", h + "ln_1.weight", {C}, e));
    t.push_back(same(o + "attn.qkv.norm.bias", h + "ln_1.bias", {C}, e));
    t.push_back(conv(o + "attn.qkv.weight", h + "attn.c_attn.weight", C, 3 * C, e));
    t.push_back(same(o + "attn.qkv.bias", h + "attn.c_attn.bias", {3 * C}, e));
    t.push_back(conv(o + "attn.proj.weight", h + "attn.c_proj.weight", C, C, e));
    t.push_back(same(o + "attn.proj.bias", h + "attn.c_proj.bias", {C}, e));
    t.push_back(same(o + "mlp.norm.weight", h + "ln_2.weight", {C}, e));
    t.push_back(same(o + "mlp.norm.bias", h + "ln_2.bias", {C}, e));
    t.push_back(conv(o + "mlp.fc1.weight", h + "mlp.c_fc.weight", C, F, f));
    t.push_back(same(o + "mlp.fc1.bias", h + "mlp.c_fc.bias", {F}, f));
    t.push_back(conv(o + "mlp.fc2.weight", h + "mlp.c_proj.weight", F, C, f));
    t.push_back(same(o + "mlp.fc2.bias", h + "mlp.c_proj.bias", {C}, e));
  }
  t.push_back(same("ln_f.weight", "ln_f.weight", {C}, e));
  t.push_back(same("ln_f.bias", "ln_f.bias", {C}, e));
  return t;
}

// "h.<digits>.attn.bias" (the causal mask) and "h.<digits>.attn.masked_bias" (its fill value).
bool is_buffer(std::string_view name) {
  if (!name.starts_with("h.")) return false;
  name.remove_prefix(2);
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits == 0) return false;
  name.remove_prefix(digits);
  return name == ".attn.bias" || name == ".attn.masked_bias";
}

}  // namespace

const HfArchitecture& gpt2_architecture() {
  static const HfArchitecture a{"GPT2LMHeadModel", "gpt2",       "transformer.",
                                "lm_head.weight",  "wte.weight", read_config,
                                write_config,      tensors,      is_buffer};
  return a;
}

}  // namespace octet::train::detail
