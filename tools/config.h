// The run configuration of `octet train`: a schema of every key (dotted path, type, range, doc),
// loading as defaults < JSON file < --set overrides, and the resolved config as JSON.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"

namespace octet::config {

// The defaults below are the built-in default run (configs/train/default.json holds the same): a
// 2-layer GPT learning to sort 6 digits under FP8 delayed scaling (hybrid).
struct ModelConfig {
  std::string arch = "gpt2";  // gpt2 | llama
  int64_t n_layer = 2;
  int64_t d_model = 64;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;  // 0: n_head
  double rope_theta = 10000;
  int64_t ffn_hidden = 0;  // 0: 4 * d_model
  int64_t vocab = 0;       // 0: the data's vocabulary
  int64_t seq_len = 0;     // 0: the data's natural length (tasks only)
  std::string activation = "gelu";
  std::string norm = "layernorm";
  double norm_eps = 1e-5;  // Hugging Face's layer_norm_epsilon / rms_norm_eps
  bool zero_centered_gamma = false;
  bool bias = true;
  bool tie_embeddings = true;
  bool fp8_primary_weights = false;
  std::string dtype = "auto";  // auto | f32 | bf16
  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

struct Fp8Config {
  bool enabled = true;
  // A path to a recipe JSON file, or the recipe object itself; parsed by the recipe loader.
  nlohmann::ordered_json recipe = nlohmann::ordered_json::object({{"recipe", "delayed"},
                                                                  {"fp8_format", "hybrid"},
                                                                  {"margin", 0},
                                                                  {"amax_history_len", 1024},
                                                                  {"amax_compute_algo", "max"}});
  // Modules kept in high precision under the recipe (modules::GPTConfig::high_precision_*).
  std::vector<std::string> high_precision_modules;
  int64_t high_precision_first_layers = 0;
  int64_t high_precision_last_layers = 0;
  // The fraction of training.steps after which the forward GEMMs run in high precision (the
  // backward stays under the recipe); 1: never.
  double high_precision_after = 1.0;
  bool high_precision_backward = false;
  bool lm_head = false;
  friend bool operator==(const Fp8Config&, const Fp8Config&) = default;
};

struct DataConfig {
  std::string kind = "task";  // task | text | shards
  std::string path;           // text file, or shard file / directory / glob pattern
  std::string tokenizer;      // tokenizer.json or a folder; empty: bytes (text), none (shards)
  std::string val_path;       // shards: validation shards; empty: hold out the tail
  double val_fraction = 0.1;
  std::string task = "sort";  // sort | add
  int64_t task_digits = 6;
  int64_t seed = 1;
  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

struct OptimizerConfig {
  std::string kind = "adamw";  // sgd | adamw
  double lr = 3e-3;
  std::array<double, 2> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.01;
  double momentum = 0.9;   // sgd only
  double grad_clip = 1.0;  // global norm; 0: off
  friend bool operator==(const OptimizerConfig&, const OptimizerConfig&) = default;
};

struct ScheduleConfig {
  int64_t warmup_steps = 100;
  int64_t total_steps = 0;  // cosine decay length; 0: training.steps
  double min_lr_ratio = 0.1;
  friend bool operator==(const ScheduleConfig&, const ScheduleConfig&) = default;
};

struct TrainingConfig {
  int64_t steps = 2000;
  int64_t batch_size = 32;      // sequences per micro-batch
  int64_t grad_accum = 1;       // micro-batches per optimizer step
  int64_t eval_interval = 250;  // 0: only at the end
  int64_t eval_batches = 4;
  int64_t eval_examples = 1000;       // held-out problems for exact match (tasks)
  int64_t checkpoint_interval = 500;  // 0: only at the end
  int64_t log_interval = 10;
  int64_t seed = 1337;
  std::string device = "cpu";
  int64_t max_nonfinite_steps = 10;  // skipped steps in a row before the run stops
  int64_t threads = 0;               // CPU threads; 0: the machine's cores
  bool log_fp8_slots = false;        // metrics.jsonl: every FP8 slot and weight, not a summary
  int64_t zero_stage = 0;            // data parallel: 1 shards the optimizer state (ZeRO-1)
  int64_t grad_bucket_kb = 256;      // data parallel: f32 gradient KiB per reduced bucket
  bool cuda_graphs = true;           // CUDA: the step captured once and replayed, where it can be
  friend bool operator==(const TrainingConfig&, const TrainingConfig&) = default;
};

struct OutputConfig {
  std::string dir = "runs/default";
  friend bool operator==(const OutputConfig&, const OutputConfig&) = default;
};

struct RunConfig {
  ModelConfig model;
  Fp8Config fp8;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  TrainingConfig training;
  OutputConfig output;
  friend bool operator==(const RunConfig&, const RunConfig&) = default;
};

// ---- the schema ----

enum class KeyType : uint8_t {
  kInt,
  kFloat,
  kBool,
  kString,
  kChoice,      // a string from `choices`
  kFloatPair,   // [a, b], each number in the range
  kDevice,      // "cpu", "cuda", "cuda:N"
  kRecipe,      // a string (path) or an object
  kStringList,  // an array of strings
};

enum class Bound : uint8_t { kClosed, kOpen };

struct Range {
  double min = 0;
  double max = 0;
  Bound min_bound = Bound::kClosed;
  Bound max_bound = Bound::kClosed;
};

struct KeySpec {
  std::string path;  // "model.n_layer": section, dot, key
  KeyType type;
  Range range;  // numbers only
  std::vector<std::string> choices;
  std::string doc;
};

// Every key, in the order the resolved JSON lists them.
const std::vector<KeySpec>& schema();
const KeySpec* find_key(std::string_view path);  // nullptr when unknown

// ---- loading ----

// Defaults, then the JSON file at `path` (skipped when empty; // comments allowed), then each
// "dotted.key=value" of `overrides` (value as JSON, else the bare text as a string); then
// validate(). Unknown keys, wrong types and out-of-range values throw, naming the full dotted key,
// the value, what was expected and where it came from.
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// `json` (an object of sections) over `config`; `source` says where it came from in errors.
void apply_json(RunConfig& config, const nlohmann::ordered_json& json, std::string_view source);
// One "dotted.key=value" (a section takes a JSON object: model={"n_layer":4}).
void apply_override(RunConfig& config, std::string_view assignment);
// Checks between keys (n_head divides d_model, a path for file data, ...).
void validate(const RunConfig& config);

// Every key with its value, nested by section in schema order; from_json(to_json(c)) == c.
nlohmann::ordered_json to_json(const RunConfig& config);
RunConfig from_json(const nlohmann::ordered_json& json,
                    std::string_view source = "resolved config");

// The resolved values the run uses where a key says "0: from elsewhere".
int64_t total_schedule_steps(const RunConfig& config);
data::DataOptions data_options(const RunConfig& config);

// The "Training config keys" section of configs/README.md, generated from the schema.
std::string keys_markdown();

}  // namespace octet::config
