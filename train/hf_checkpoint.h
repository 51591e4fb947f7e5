// Hugging Face model folders in and out: config.json plus model.safetensors (or the shards that
// model.safetensors.index.json lists), read into octet's GPT and written back so that transformers
// loads them. Architectures: GPT2LMHeadModel and LlamaForCausalLM.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "modules/gpt.h"
#include "runtime/safetensors.h"

namespace octet::train {

// What a Hugging Face folder holds, in octet's terms.
struct HfModel {
  std::string architecture;   // "GPT2LMHeadModel" or "LlamaForCausalLM"
  modules::GPTConfig config;  // the architecture's hyperparameters; training knobs at defaults
  NamedTensors weights;       // every parameter as an f32 CPU tensor, octet's names and layout
  std::optional<int64_t> bos_token_id, eos_token_id;  // from config.json, when it has them
};

// Reads `folder`. Tensors may be F32, BF16 or F16 (converted exactly to f32); names may carry
// the base model's prefix ("transformer.", "model.") or not; non-parameter buffers real files
// carry (GPT-2's "h.N.attn.bias" and "h.N.attn.masked_bias", Llama's "rotary_emb.inv_freq") are
// skipped, and a tied LM head is taken when it equals the token embedding. Llama's q/k/v
// projections become octet's qkv rows and its gate/up projections fc1's two halves; rotary
// scaling, biases and a head_dim other than hidden_size / num_attention_heads are refused.
// Everything else is one octet::Error naming the folder, the tensor or config key and what was
// expected: an unknown architecture, a config key octet's model cannot express, a missing,
// unexpected or misshapen tensor (a shape that disagrees with config.json), an unsupported dtype, a
// truncated file, an index naming a file that is not there.
HfModel import_hf(const std::string& folder);

struct HfExportOptions {
  std::optional<int64_t> bos_token_id, eos_token_id;  // written as null when unknown
};

// Writes `model` as a GPT2LMHeadModel folder (model.arch gpt2) or a LlamaForCausalLM one
// (model.arch llama) and returns the architecture's name: config.json (the keys transformers
// reads, torch_dtype float32) and model.safetensors (F32, Hugging Face's names and layouts, the
// prefix real files carry, metadata format "pt"). The files are written into a temporary folder
// beside `folder` that is renamed into place, so nothing half-written is left on failure;
// `folder` must not exist or be empty. A model the architecture cannot express (GPT-2: RMSNorm,
// no biases, a gated activation, an untied head; Llama: LayerNorm, biases, an activation other
// than swiglu; either: zero-centered gamma) is refused, naming the config key. FP8 primary
// weights are exported dequantized.
std::string export_hf(modules::GPT& model, const std::string& folder,
                      const HfExportOptions& options = {});

// Every parameter of `model` as an f32 CPU tensor, by name, in parameters() order: FP8 primary
// weights dequantized, bf16 values widened.
NamedTensors parameter_values(modules::Module& model);

// Sets every parameter of `model` from `values` (names and logical shapes as parameter_values
// gives them; f32, bf16 or f16): high-precision parameters are copied (rounded to nearest even
// into a narrower dtype), FP8 primary weights are quantized from the values as at construction
// (the weight slot's amax history stays untouched) and their f32 master takes the values
// themselves. FP8 metas and other buffers are left as they are. A missing, unexpected or
// misshapen name is an error naming it. Call it before an optimizer is made from the model.
void load_parameter_values(modules::Module& model, const NamedTensors& values);

}  // namespace octet::train
