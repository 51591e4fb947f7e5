// LlamaForCausalLM in octet's terms: its config.json keys, and its tensors by octet name (q, k and
// v projections stacked into octet's qkv rows, gate and up projections into fc1's two halves).
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"
#include "train/hf_architecture.h"

namespace octet::train::detail {
namespace {

using Json = nlohmann::json;
using modules::GPTConfig;

constexpr const char* kName = "LlamaForCausalLM";

// A number > 0, `fallback` when absent or null.
double positive_number_key(const Json& config, const char* key, double fallback,
                           const std::string& where) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  const Json& v = config[key];
  OCTET_CHECK(v.is_number() && v.get<double>() > 0, where, ": \"", key, "\" is ", v.dump(),
              ", expected a number > 0");
  return v.get<double>();
}

// A key whose only supported value is `expected` (transformers' default): refused otherwise.
void require_bool(const Json& config, const char* key, bool expected, const std::string& where,
                  std::string_view why) {
  OCTET_CHECK(bool_key(config, key, expected, where) == expected, where, ": \"", key, "\" is ",
              config[key].dump(), ", but octet's Llama supports only ", expected ? "true" : "false",
              " (", why, ")");
}

// A rope_scaling / rope_parameters object that changes nothing: rope_type (or type) "default".
bool is_default_rope(const Json& v) {
  if (v.is_null()) return true;
  if (!v.is_object()) return false;
  for (const auto& [key, value] : v.items()) {
    const bool type_key = key == "rope_type" || key == "type";
    if (type_key && !(value.is_string() && value.get<std::string>() == "default")) return false;
    if (!type_key && key != "rope_theta") return false;
  }
  return true;
}

// The rotary base: "rope_theta" (default 10000), or the "rope_theta" of newer files'
// "rope_parameters"; any scaling of the frequencies (linear, dynamic, yarn, llama3) is refused.
double read_rope_theta(const Json& config, const std::string& where) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!config.contains(key)) continue;
    OCTET_CHECK(is_default_rope(config[key]), where, ": \"", key, "\" is ", config[key].dump(),
                ", but octet's rotary positions are unscaled (expected null or rope_type "
                "\"default\")");
  }
  if (config.contains("rope_parameters") && config["rope_parameters"].is_object() &&
      config["rope_parameters"].contains("rope_theta")) {
    return positive_number_key(config["rope_parameters"], "rope_theta", 10000,
                               where + " \"rope_parameters\"");
  }
  return positive_number_key(config, "rope_theta", 10000, where);
}

GPTConfig read_config(const Json& config, const std::string& where) {
  GPTConfig c;
  c.arch = modules::Arch::kLlama;
  c.n_layer = positive_int_key(config, "num_hidden_layers", where);
  c.d_model = positive_int_key(config, "hidden_size", where);
  c.n_head = positive_int_key(config, "num_attention_heads", where);
  c.max_seq_len = positive_int_key(config, "max_position_embeddings", where);
  c.vocab_size = positive_int_key(config, "vocab_size", where);
  c.ffn = positive_int_key(config, "intermediate_size", where);
  OCTET_CHECK(c.d_model % c.n_head == 0, where, ": \"num_attention_heads\" ", c.n_head,
              " does not divide \"hidden_size\" ", c.d_model);
  const int64_t head_dim = c.d_model / c.n_head;
  if (config.contains("head_dim") && !config["head_dim"].is_null()) {
    OCTET_CHECK(positive_int_key(config, "head_dim", where) == head_dim, where,
                ": \"head_dim\" is ", config["head_dim"].dump(),
                ", but octet's attention heads are hidden_size / num_attention_heads = ", head_dim,
                " wide");
  }
  OCTET_CHECK(head_dim % 2 == 0, where, ": the head size hidden_size / num_attention_heads is ",
              head_dim, ", but rotary positions need an even one");
  const int64_t kv =
      config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()
          ? positive_int_key(config, "num_key_value_heads", where)
          : c.n_head;
  OCTET_CHECK(c.n_head % kv == 0, where, ": \"num_key_value_heads\" ", kv,
              " does not divide \"num_attention_heads\" ", c.n_head);
  c.n_kv_head = kv == c.n_head ? 0 : kv;
  c.rope_theta = read_rope_theta(config, where);
  OCTET_CHECK(c.rope_theta > 1, where, ": \"rope_theta\" is ", c.rope_theta,
              ", expected a number > 1");
  c.norm_eps = static_cast<float>(positive_number_key(config, "rms_norm_eps", 1e-6, where));
  if (config.contains("hidden_act") && !config["hidden_act"].is_null()) {
    const Json& act = config["hidden_act"];
    OCTET_CHECK(
        act.is_string() && (act.get<std::string>() == "silu" || act.get<std::string>() == "swish"),
        where, ": \"hidden_act\" is ", act.dump(),
        ", but octet's Llama MLP is SiLU-gated (expected \"silu\")");
  }
  c.activation = modules::MLPActivation::kSwiglu;
  c.norm = modules::NormKind::kRMSNorm;
  c.bias = modules::Bias::kNo;
  // transformers' LlamaConfig unties the head unless told otherwise.
  c.tie_embeddings = bool_key(config, "tie_word_embeddings", false, where)
                         ? modules::TieEmbeddings::kYes
                         : modules::TieEmbeddings::kNo;
  require_bool(config, "attention_bias", false, where, "no biases in the attention projections");
  require_bool(config, "mlp_bias", false, where, "no biases in the MLP");
  return c;
}

// A float as the shortest decimal that reads back as it (1e-05, not 9.999999747378752e-06).
double decimal(float x) { return std::stod(fmt::format("{}", x)); }

nlohmann::ordered_json write_config(const GPTConfig& c, const HfExportOptions& options) {
  const std::string refuse = std::string("cannot export to ") + kName + ": config key ";
  OCTET_CHECK(c.arch == modules::Arch::kLlama, refuse,
              "\"model.arch\" is gpt2, but Llama has rotary positions");
  OCTET_CHECK(c.norm == modules::NormKind::kRMSNorm, refuse,
              "\"model.norm\" is layernorm, but Llama has RMSNorm");
  OCTET_CHECK(c.zero_centered_gamma == modules::ZeroCenteredGamma::kNo, refuse,
              "\"model.zero_centered_gamma\" is true, which Llama's RMSNorm cannot express");
  OCTET_CHECK(c.bias == modules::Bias::kNo, refuse,
              "\"model.bias\" is true, but Llama's layers have no biases");
  OCTET_CHECK(c.activation == modules::MLPActivation::kSwiglu, refuse,
              "\"model.activation\" is not swiglu, but Llama's MLP is SiLU-gated");
  const int64_t kv = c.n_kv_head == 0 ? c.n_head : c.n_kv_head;
  const auto token = [](const std::optional<int64_t>& id) {
    return id ? nlohmann::ordered_json(*id) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json j = {
      {"architectures", {kName}},
      {"model_type", "llama"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.d_model},
      {"intermediate_size", c.ffn == 0 ? 4 * c.d_model : c.ffn},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", kv},
      {"head_dim", c.d_model / c.n_head},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.max_seq_len},
      {"initializer_range", decimal(c.init_std)},
      {"rms_norm_eps", decimal(c.norm_eps)},
      {"use_cache", true},
      {"pad_token_id", nullptr},
      {"bos_token_id", token(options.bos_token_id)},
      {"eos_token_id", token(options.eos_token_id)},
      {"pretraining_tp", 1},
      {"tie_word_embeddings", c.tie_embeddings == modules::TieEmbeddings::kYes},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", nullptr},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"mlp_bias", false},
      {"torch_dtype", "float32"},
  };
  return j;
}

std::vector<HfTensor> tensors(const GPTConfig& c) {
  const int64_t C = c.d_model, V = c.vocab_size, H = c.n_head;
  const int64_t G = c.n_kv_head == 0 ? H : c.n_kv_head, D = C / H;
  const int64_t F = c.ffn == 0 ? 4 * C : c.ffn;
  const std::string e = "hidden_size " + std::to_string(C);
  const std::string v = "vocab_size " + std::to_string(V) + ", " + e;
  const std::string q = e + ", num_attention_heads " + std::to_string(H);
  const std::string kv = q + ", num_key_value_heads " + std::to_string(G);
  const std::string f = e + ", intermediate_size " + std::to_string(F);
  const auto part = [](std::string hf, Shape shape, std::string keys) {
    return HfPart{std::move(hf), std::move(shape), HfLayout::kSame, std::move(keys)};
  };
  const auto same = [&](std::string octet, std::string hf, Shape shape, std::string keys) {
    return HfTensor{std::move(octet), shape, {part(std::move(hf), shape, std::move(keys))}};
  };
  std::vector<HfTensor> t;
  t.push_back(same("wte.weight", "embed_tokens.weight", {V, C}, v));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string o = "layers." + std::to_string(i) + ".";
    const std::string h = "layers." + std::to_string(i) + ".";
    t.push_back(same(o + "attn.qkv.norm.weight", h + "input_layernorm.weight", {C}, e));
    // octet's qkv rows: H query heads, then G key heads, then G value heads, D rows each.
    t.push_back(HfTensor{o + "attn.qkv.weight",
                         {(H + 2 * G) * D, C},
                         {part(h + "self_attn.q_proj.weight", {H * D, C}, q),
                          part(h + "self_attn.k_proj.weight", {G * D, C}, kv),
                          part(h + "self_attn.v_proj.weight", {G * D, C}, kv)}});
    t.push_back(same(o + "attn.proj.weight", h + "self_attn.o_proj.weight", {C, H * D}, q));
    t.push_back(same(o + "mlp.norm.weight", h + "post_attention_layernorm.weight", {C}, e));
    // octet's swiglu is silu(first half) * second half: gate rows, then up rows.
    t.push_back(HfTensor{
        o + "mlp.fc1.weight",
        {2 * F, C},
        {part(h + "mlp.gate_proj.weight", {F, C}, f), part(h + "mlp.up_proj.weight", {F, C}, f)}});
    t.push_back(same(o + "mlp.fc2.weight", h + "mlp.down_proj.weight", {C, F}, f));
  }
  t.push_back(same("ln_f.weight", "norm.weight", {C}, e));
  if (c.tie_embeddings == modules::TieEmbeddings::kNo) {
    t.push_back(
        same("lm_head.weight", "lm_head.weight", {V, C}, v + ", tie_word_embeddings false"));
  }
  return t;
}

// The rotary frequencies older files store: "rotary_emb.inv_freq" and
// "layers.<digits>.self_attn.rotary_emb.inv_freq".
bool is_buffer(std::string_view name) {
  if (name == "rotary_emb.inv_freq") return true;
  if (!name.starts_with("layers.")) return false;
  name.remove_prefix(7);
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits == 0) return false;
  name.remove_prefix(digits);
  return name == ".self_attn.rotary_emb.inv_freq";
}

}  // namespace

const HfArchitecture& llama_architecture() {
  static const HfArchitecture a{
      kName,       "llama",      "model.", "lm_head.weight", "embed_tokens.weight",
      read_config, write_config, tensors,  is_buffer};
  return a;
}

}  // namespace octet::train::detail
