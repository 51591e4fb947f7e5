// Run checkpoints: the library checkpoint plus the command line's metadata.
#include "tools/checkpoint.h"

#include <fmt/format.h>

#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "modules/layernorm_mlp.h"
#include "runtime/error.h"
#include "tools/run.h"

namespace octet::cli {
namespace {

constexpr std::string_view kTokenizerKey = "tokenizer";

}  // namespace

SafetensorsMetadata run_metadata(const TrainerState& state) {
  const nlohmann::json rng = {{"seed", state.rng.seed}, {"offset", state.rng.offset}};
  SafetensorsMetadata metadata = {
      {"rng", rng.dump()},
      {"data_state", data::encode_state(state.data)},
      {"config", config::to_json(state.config).dump()},
  };
  if (state.tokenizer) metadata[std::string(kTokenizerKey)] = state.tokenizer->serialize();
  return metadata;
}

Checkpoint read_checkpoint(const std::string& path) {
  return with_error_context("checkpoint " + path, [&] {
    Checkpoint c;
    static_cast<train::Checkpoint&>(c) = train::read_checkpoint(path);
    c.state.step = train::metadata_int(c, "step");
    c.state.skipped_steps = train::metadata_int(c, "skipped_steps");
    const std::string& rng_text = train::metadata_at(c, "rng");
    const auto rng = nlohmann::json::parse(rng_text, nullptr, false);
    OCTET_CHECK(!rng.is_discarded() && rng.is_object() && rng.contains("seed") &&
                    rng["seed"].is_number_unsigned() && rng.contains("offset") &&
                    rng["offset"].is_number_unsigned(),
                "checkpoint ", path, ": __metadata__ \"rng\" is ", rng_text,
                ", expected {\"seed\": N, \"offset\": N}");
    c.state.rng = {rng["seed"].get<uint64_t>(), rng["offset"].get<uint64_t>()};
    try {
      c.state.data = data::decode_state(train::metadata_at(c, "data_state"));
    } catch (const Error& e) {
      OCTET_FAIL("checkpoint ", path, ": __metadata__ \"data_state\": ", e.what());
    }
    const auto config =
        nlohmann::ordered_json::parse(train::metadata_at(c, "config"), nullptr, false);
    OCTET_CHECK(!config.is_discarded() && config.is_object(), "checkpoint ", path,
                ": __metadata__ \"config\" is not a JSON object");
    c.state.config = config::from_json(config, "the config in checkpoint " + path);
    if (const auto it = c.metadata.find(std::string(kTokenizerKey)); it != c.metadata.end()) {
      try {
        c.state.tokenizer = data::Tokenizer::deserialize(it->second, "checkpoint " + path);
      } catch (const Error& e) {
        OCTET_FAIL("checkpoint ", path, ": __metadata__ \"tokenizer\": ", e.what());
      }
    }
    return c;
  });
}

std::optional<data::Tokenizer> checkpoint_tokenizer(const Checkpoint& checkpoint) {
  if (checkpoint.state.tokenizer) return checkpoint.state.tokenizer;
  const config::DataConfig& d = checkpoint.state.config.data;
  if (d.kind == "text" && d.tokenizer.empty()) return data::Tokenizer::bytes();
  return std::nullopt;
}

void load_model_state(modules::Module& model, const Checkpoint& checkpoint) {
  try {
    model.load_state_dict(checkpoint.model);
  } catch (const Error& e) {
    OCTET_FAIL("checkpoint ", checkpoint.path,
               " cannot be loaded into the model its config describes: ", e.what());
  }
  // Module::load_state_dict also drops the FP8 primary weights' stale column-wise data and brings
  // their f32 master in line with the loaded weight; a resumed optimizer then loads its own.
}

void check_resumable(const config::RunConfig& saved, const config::RunConfig& run,
                     const std::string& path) {
  const auto a = config::to_json(saved);
  const auto b = config::to_json(run);
  for (const char* section : {"model", "fp8", "data"}) {
    for (const auto& [key, value] : a[section].items()) {
      OCTET_CHECK(b[section][key] == value, "cannot resume from ", path, ": it was trained with ",
                  section, ".", key, "=", value.dump(), " but this run has ", section, ".", key,
                  "=", b[section][key].dump(), " (these keys must stay the same)");
    }
  }
  OCTET_CHECK(a["optimizer"]["kind"] == b["optimizer"]["kind"], "cannot resume from ", path,
              ": it was trained with optimizer.kind=", a["optimizer"]["kind"].dump(),
              " but this run has optimizer.kind=", b["optimizer"]["kind"].dump());
}

// ---- models without their data, Hugging Face folders, and --init ----

namespace {

// A dataset with no data: the vocabulary and length a model was built with, so that a model can
// be built, loaded and run on token ids alone. Batches and text are errors.
class NoData final : public data::Dataset {
 public:
  explicit NoData(int64_t vocab) : vocab_(vocab) {}
  std::string describe() const override { return "no data"; }
  int64_t vocab_size() const override { return vocab_; }
  int64_t natural_seq_len() const override { return 0; }
  data::Metric metric() const override { return data::Metric::kLoss; }
  data::Batch next_rows(data::Split, int64_t, int64_t, int64_t, int64_t) override {
    OCTET_FAIL("this model was loaded without data: no batches to draw");
  }
  int64_t batches_per_pass(data::Split, int64_t, int64_t) const override { return 0; }
  std::vector<int32_t> encode(std::string_view) const override {
    OCTET_FAIL("this model was loaded without data, so it has no tokenizer: give token ids");
  }
  std::string decode(const std::vector<int32_t>&) const override {
    OCTET_FAIL("this model was loaded without data, so it has no tokenizer");
  }

 protected:
  void check_cursor(data::Split, const data::Cursor&) const override {}

 private:
  int64_t vocab_;
};

std::mutex init_mutex;
NamedTensors init_values;  // guarded by init_mutex

}  // namespace

modules::GPTConfig gpt_config_without_data(const config::RunConfig& c) {
  OCTET_CHECK(c.model.vocab > 0 && c.model.seq_len > 0,
              "the model cannot be built without its data: model.vocab (", c.model.vocab,
              ") and model.seq_len (", c.model.seq_len, ") must be set");
  return gpt_config(c, NoData(c.model.vocab));
}

config::RunConfig imported_run_config(const train::HfModel& hf, const std::string& folder) {
  const std::string source = "the " + hf.architecture + " of Hugging Face folder " + folder;
  const modules::GPTConfig& g = hf.config;
  const bool llama = g.arch == modules::Arch::kLlama;
  nlohmann::ordered_json model = {
      {"arch", llama ? "llama" : "gpt2"},
      {"n_layer", g.n_layer},
      {"d_model", g.d_model},
      {"n_head", g.n_head},
      {"n_kv_head", g.n_kv_head},
      {"rope_theta", g.rope_theta},
      {"ffn_hidden", g.ffn},
      {"vocab", g.vocab_size},
      {"seq_len", g.max_seq_len},
      // transformers' GPT-2 activations are octet's gelu (tanh form), relu and silu; Llama's
      // MLP is swiglu.
      {"activation", std::string(modules::mlp_activation_name(g.activation))},
      {"norm", g.norm == modules::NormKind::kRMSNorm ? "rmsnorm" : "layernorm"},
      // The f32 epsilon as the shortest decimal that reads back as it (1e-06, as config.json).
      {"norm_eps", std::stod(fmt::format("{}", g.norm_eps))},
      {"bias", g.bias == modules::Bias::kYes},
      {"tie_embeddings", g.tie_embeddings == modules::TieEmbeddings::kYes}};
  config::RunConfig c;
  c.fp8.enabled = false;
  config::apply_json(c, {{"model", model}}, source);
  config::validate(c);
  return c;
}

void write_imported_checkpoint(const train::HfModel& hf, const std::string& folder,
                               const std::string& path) {
  TrainerState state;
  state.config = imported_run_config(hf, folder);
  state.rng = {static_cast<uint64_t>(state.config.training.seed), 0};
  modules::GPT model(gpt_config_without_data(state.config));
  train::load_parameter_values(model, hf.weights);
  SafetensorsMetadata metadata = run_metadata(state);
  metadata["step"] = "0";
  metadata["skipped_steps"] = "0";
  nlohmann::json tokens = nlohmann::json::object();
  if (hf.bos_token_id) tokens["bos_token_id"] = *hf.bos_token_id;
  if (hf.eos_token_id) tokens["eos_token_id"] = *hf.eos_token_id;
  metadata["hf_token_ids"] = tokens.dump();
  train::save_checkpoint(path, model, nullptr, metadata);
}

train::HfExportOptions hf_export_options(const Checkpoint& checkpoint) {
  train::HfExportOptions o;
  const auto it = checkpoint.metadata.find("hf_token_ids");
  if (it == checkpoint.metadata.end()) return o;
  const auto tokens = nlohmann::json::parse(it->second, nullptr, false);
  OCTET_CHECK(!tokens.is_discarded() && tokens.is_object(), "checkpoint ", checkpoint.path,
              ": __metadata__ \"hf_token_ids\" is not a JSON object");
  for (const auto& [key, id] : tokens.items()) {
    OCTET_CHECK(id.is_number_integer(), "checkpoint ", checkpoint.path,
                ": __metadata__ \"hf_token_ids\" entry \"", key, "\" is ", id.dump(),
                ", expected a token id");
    if (key == "bos_token_id") o.bos_token_id = id.get<int64_t>();
    if (key == "eos_token_id") o.eos_token_id = id.get<int64_t>();
  }
  return o;
}

void complete_model_keys(config::RunConfig& c, const Checkpoint& checkpoint) {
  for (const auto& [name, t] : checkpoint.model) {
    if (name == "wte.weight" && t.dim() == 2 && c.model.vocab == 0) c.model.vocab = t.size(0);
    if (name == "wpe.weight" && t.dim() == 2 && c.model.seq_len == 0) c.model.seq_len = t.size(0);
  }
  // A Llama model has no position embedding: a task's length comes from the task itself.
  if (c.model.seq_len == 0 && c.data.kind == "task") {
    c.model.seq_len = data::open_dataset(config::data_options(c))->natural_seq_len();
  }
}

InitWeights read_init_weights(const std::string& source) {
  if (std::filesystem::is_directory(source)) {
    train::HfModel hf = train::import_hf(source);
    return {imported_run_config(hf, source).model, std::move(hf.weights)};
  }
  const Checkpoint ckpt = read_checkpoint(source);
  config::RunConfig c = ckpt.state.config;
  complete_model_keys(c, ckpt);
  // Built as inference builds it: FP8 primary weights row-wise only, nothing recorded.
  autograd::InferenceModeGuard inference;
  modules::GPT model(gpt_config_without_data(c));
  load_model_state(model, ckpt);
  return {c.model, train::parameter_values(model)};
}

void set_init_weights(NamedTensors values) {
  const std::lock_guard<std::mutex> lock(init_mutex);
  init_values = std::move(values);
}

void load_init_weights(modules::GPT& model) {
  NamedTensors values;
  {
    const std::lock_guard<std::mutex> lock(init_mutex);
    values.swap(init_values);
  }
  if (values.empty()) return;
  try {
    train::load_parameter_values(model, values);
  } catch (const Error& e) {
    OCTET_FAIL("--init: the weights do not fit the model the config describes: ", e.what());
  }
}

}  // namespace octet::cli
