// How one Hugging Face architecture maps onto octet's GPT: its config.json keys and its tensors.
// train/hf_checkpoint.cpp reads and writes folders of any architecture described this way.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "modules/gpt.h"
#include "train/hf_checkpoint.h"

namespace octet::train::detail {

// How an octet weight is laid out in the Hugging Face file.
enum class HfLayout : uint8_t {
  kSame,        // same shape and element order
  kTransposed,  // a 2-D matrix stored (in, out), as GPT-2's Conv1D does, for octet's (out, in)
};

// One Hugging Face tensor (its name without the architecture's prefix) that makes up an octet
// parameter, and the config.json keys its shape follows ("n_embd 32"), for errors.
struct HfPart {
  std::string name;
  Shape shape;  // as stored in the file
  HfLayout layout = HfLayout::kSame;
  std::string shape_keys;
};

// One octet parameter, made of its parts stacked along dimension 0 in order (one part when the
// file stores the tensor whole, as GPT-2 stores its fused c_attn).
struct HfTensor {
  std::string octet_name;
  Shape shape;  // octet's logical shape
  std::vector<HfPart> parts;
};

struct HfArchitecture {
  std::string_view name;        // the config.json "architectures" entry: "GPT2LMHeadModel"
  std::string_view model_type;  // config.json "model_type": "gpt2"
  std::string_view prefix;      // the base model's name prefix: optional on import, written out
  std::string_view head;        // the LM head's name (never prefixed)
  std::string_view embedding;   // the tensor a tied head equals (without the prefix)
  // An untied model lists its head among tensors(); a tied one may store it equal to `embedding`.
  // config.json -> the model's hyperparameters; `where` names the file in errors. A key the
  // model cannot express is an error naming it.
  modules::GPTConfig (*read_config)(const nlohmann::json& config, const std::string& where);
  // The model -> config.json; a model the architecture cannot express is an error naming the
  // octet config key.
  nlohmann::ordered_json (*write_config)(const modules::GPTConfig& config,
                                         const HfExportOptions& options);
  // Every tensor a folder holds for `config`, in octet's parameter order.
  std::vector<HfTensor> (*tensors)(const modules::GPTConfig& config);
  // Non-parameter buffers files may carry (name without the prefix), skipped on import.
  bool (*is_buffer)(std::string_view name);
};

const HfArchitecture& gpt2_architecture();
const HfArchitecture& llama_architecture();

// config.json accessors whose errors name the file and the key.
int64_t positive_int_key(const nlohmann::json& config, const char* key, const std::string& where);
// The key's boolean value, `fallback` when absent or null.
bool bool_key(const nlohmann::json& config, const char* key, bool fallback,
              const std::string& where);

}  // namespace octet::train::detail
