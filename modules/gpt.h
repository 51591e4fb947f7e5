// The transformer modules built from the FP8 blocks: Embedding, causal self-attention (QKV from a
// LayerNormLinear, grouped-query heads, rotary positions, fused SDPA core, output Linear), the
// pre-norm TransformerLayer, and a GPT model in two architectures: GPT-2 (token + learned position
// embeddings) and Llama (rotary positions on queries and keys); N layers, final norm, an LM head
// tied to the token embedding or its own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "modules/module.h"
#include "modules/norm.h"
#include "runtime/rng.h"

namespace octet::modules {

// Where positions come from: GPT-2's learned position embedding, or Llama's rotary embedding of
// queries and keys (rotate-half, Hugging Face's layout).
enum class Arch : uint8_t { kGPT2, kLlama };
enum class TieEmbeddings : uint8_t { kNo, kYes };

struct GPTConfig {
  Arch arch = Arch::kGPT2;
  int64_t vocab_size = 16;
  int64_t max_seq_len = 64;  // position embeddings (GPT-2), rotary table (Llama)
  int64_t n_layer = 2;
  int64_t d_model = 64;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;      // key/value heads, dividing n_head (grouped-query); 0: n_head
  double rope_theta = 10000;  // Llama: the rotary base
  TieEmbeddings tie_embeddings = TieEmbeddings::kYes;  // kNo: an LM head of its own
  int64_t ffn = 0;  // the MLP's hidden width (a gated activation's per half); 0: 4 * d_model
  MLPActivation activation = MLPActivation::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  ZeroCenteredGamma zero_centered_gamma = ZeroCenteredGamma::kNo;
  float norm_eps = 1e-5f;
  Bias bias = Bias::kYes;
  DType dtype = DType::kF32;
  float init_std = 0.02f;
  float dropout = 0.f;
  Recompute recompute = Recompute::kNo;  // LayerNormMLP recompute
  std::optional<Recipe> recipe;          // FP8 metas exist from construction
  FP8PrimaryWeights fp8_primary_weights = FP8PrimaryWeights::kNo;  // needs recipe
  // Per-module precision: FP8 modules kept in high precision inside FP8 scopes (TE users keep the
  // first and last layers so). A pattern (`*` any run of characters, `?` one) names a module or
  // an enclosing one: "layers.0" is all of layer 0, "layers.*.attn.proj" every output
  // projection; "lm_head" names the LM head's GEMM when fp8_lm_head.
  std::vector<std::string> high_precision_modules;
  int64_t high_precision_first_layers = 0;  // the first N transformer layers
  int64_t high_precision_last_layers = 0;   // the last N
  // The LM head's GEMM (tied or untied) under the recipe, as the FP8 module "lm_head_gemm";
  // false: high precision, as TE users keep it.
  bool fp8_lm_head = false;
  uint64_t seed = 0;
};

// Whether a `*` / `?` pattern matches `name`, or a module enclosing it (a prefix ending at a dot).
bool module_pattern_matches(std::string_view pattern, std::string_view name);

// Whether a GPT built from `config` has a module that runs in FP8: a recipe, and some layer's
// module not kept in high precision by the first / last layers or a pattern. Checks that only
// FP8 GEMMs need (the shape rules) apply only then.
bool runs_fp8_modules(const GPTConfig& config);

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, DType dtype, float init_std, uint64_t seed);
  Tensor forward(const Tensor& ids);  // ids (...) i32/i64 -> (..., dim)
  const Tensor& table() const { return table_; }

 private:
  Tensor table_;  // (num, dim)
};

// The rotary table of a Llama model (ops::rope_table), shared by its layers, with a copy on each
// device it ran on.
class RopeTable {
 public:
  RopeTable(int64_t max_len, int64_t head_dim, double theta);
  const Tensor& on(Device device);  // (max_len, head_dim) f32

 private:
  Tensor host_;
  std::vector<Tensor> copies_;
};

// One layer's key/value cache for generation: (N, max_len, G, D) f32 each, keys rotated (Llama),
// the G key/value heads unrepeated (each serves H / G query heads).
struct LayerCache {
  Tensor k, v;
};

class CausalSelfAttention : public Module {
 public:
  // `rope`: the rotary table (Llama), or null for none.
  CausalSelfAttention(const GPTConfig& config, uint64_t seed, int64_t layer = 0,
                      std::shared_ptr<RopeTable> rope = nullptr);
  Tensor forward(const Tensor& x,
                 FirstMicrobatch first);  // (B, T, C) -> (B, T, C), pre-norm inside
  // Inference: x (N, T, C) at positions [pos, pos + T); their keys and values join `cache`, and
  // each attends to the cached positions up to its own.
  Tensor forward_cached(const Tensor& x, LayerCache& cache, int64_t pos);
  LayerCache make_cache(int64_t batch, int64_t max_len, Device device) const;

 private:
  int64_t d_model_, n_head_, n_kv_head_;
  std::shared_ptr<RopeTable> rope_;
  // norm, then C -> (H + 2 G) D packed as (H + 2 G, D): query, key and value heads
  std::shared_ptr<LayerNormLinear> qkv_;
  std::shared_ptr<Linear> proj_;  // C -> C
};

class TransformerLayer : public Module {
 public:
  // `layer`: the index in the model, for per-module precision (GPTConfig::high_precision_*);
  // a layer built on its own is layer 0.
  TransformerLayer(const GPTConfig& config, uint64_t seed, int64_t layer = 0,
                   std::shared_ptr<RopeTable> rope = nullptr);
  // x + attention(x), then + mlp(.): the norms are inside the fused modules (pre-norm).
  Tensor forward(const Tensor& x, FirstMicrobatch first);
  // The same in inference, attention over a key/value cache (CausalSelfAttention::forward_cached).
  Tensor forward_cached(const Tensor& x, LayerCache& cache, int64_t pos);
  LayerCache make_cache(int64_t batch, int64_t max_len, Device device) const {
    return attn_->make_cache(batch, max_len, device);
  }

 private:
  // Dropout on each residual branch (training mode, dropout > 0); Philox, seeded per layer.
  Tensor branch_dropout(const Tensor& branch);

  float dropout_;
  Generator dropout_gen_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<LayerNormMLP> mlp_;
};

// What GPT::generate draws and when it stops.
enum class KVCacheUse : uint8_t {
  kYes,  // the prompt in one pass, then one position a step over cached keys and values
  kNo,   // every token re-runs the whole window (the reference the cache is tested against)
};
struct GenerateOptions {
  int64_t new_tokens = 0;
  float temperature = 0.f;  // 0: greedy (the first of equal logits)
  int64_t top_k = 0;        // > 0: sample among the k most likely tokens only
  float top_p = 1.f;        // < 1: among the fewest most likely whose probability reaches top_p
  // A sequence that generates this id stops; the rest of its row holds it too, and generation
  // ends when every sequence has stopped.
  std::optional<int32_t> eos_id;
  KVCacheUse kv_cache = KVCacheUse::kYes;
};
struct Generation {
  Tensor tokens;              // (N, new_tokens) i32 on the CPU
  int64_t cache_bytes = 0;    // the key/value cache's (0 without one)
  int64_t cached_tokens = 0;  // tokens that came from the cache; past max_seq_len the window
                              // slides and each later token re-runs it
  // Wall-clock seconds of the prompt's pass (with the first token), of the later cached tokens,
  // and of the tokens that re-ran the window.
  double prompt_s = 0, cached_s = 0, window_s = 0;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config);
  const GPTConfig& config() const { return config_; }

  // ids (B, T) i32 -> logits (B, T, vocab) in the model's dtype (activations keep it from the
  // embedding on: kernels/nn.h; the loss is f32). Under an FP8 scope the layers' GEMMs run in FP8
  // (the LM head too with config fp8_lm_head). T <= max_seq_len.
  Tensor forward(const Tensor& ids, FirstMicrobatch first = FirstMicrobatch::kUnset);
  // Mean cross-entropy over positions whose target is not -100; targets (B, T) i32.
  Tensor loss(const Tensor& ids, const Tensor& targets,
              FirstMicrobatch first = FirstMicrobatch::kUnset);
  // Appends `new_tokens` tokens to each prompt (N, P) i32: greedy at temperature 0, else
  // sampled from `gen`. Runs in inference mode (no autograd state); returns (N, new_tokens).
  // Under an FP8 scope the token rows are padded (right and/or extra sequences) to the FP8 GEMM
  // row rule, so any N and P work.
  Tensor generate(const Tensor& prompts, int64_t new_tokens, float temperature = 0.f,
                  Generator* gen = nullptr);
  // The same with every option (GenerateOptions); a sampling temperature needs `gen`.
  Generation generate(const Tensor& prompts, const GenerateOptions& options,
                      Generator* gen = nullptr);
  // Prompts of different lengths in one batch, over the key/value cache: the batch moves one
  // position a step from the shortest prompt's end, each longer prompt feeding its own next token
  // until it ends and then its generated ones, so every sequence gets the tokens it would get
  // alone up to rounding (its later prompt tokens go through one-row GEMMs rather than the
  // prompt's pass; under current scaling and NVFP4 a GEMM's scale also sees the other rows).
  // The longest prompt plus new_tokens must fit max_seq_len. KVCacheUse::kNo generates each
  // prompt alone without the cache.
  Generation generate(const std::vector<std::vector<int32_t>>& prompts,
                      const GenerateOptions& options, Generator* gen = nullptr);

 private:
  // The final norm's output (B, T, C): everything but the LM head.
  Tensor hidden(const Tensor& ids, FirstMicrobatch first);
  // generate()'s parts: the steps over a key/value cache from the prompt on (returns how many
  // tokens it made: all of them, or those while the window starts at position 0), and the
  // last position's logits (N, V) of a window of the last max_seq_len tokens without one.
  int64_t generate_cached(std::vector<int32_t>& seq, int64_t n, int64_t total,
                          const GenerateOptions& o, Generator* gen, Generation& result,
                          std::vector<bool>& done);
  Tensor window_logits(const std::vector<int32_t>& seq, int64_t n, int64_t total, int64_t len);
  // Every layer's key/value cache for `rows` sequences of `positions`; adds their bytes to `bytes`.
  std::vector<LayerCache> make_caches(int64_t rows, int64_t positions, int64_t& bytes) const;
  // The LM head on hidden states h (N, T, C) at `position` of each of the first `rows` rows.
  Tensor last_logits_of(const Tensor& h, int64_t rows, int64_t position);
  // hidden() at positions [pos, pos + T) over the layers' key/value caches (inference).
  Tensor hidden_cached(const Tensor& ids, std::vector<LayerCache>& caches, int64_t pos);
  // One token for each of the first n rows of (rows, V) logits into column `step` of `out`.
  void pick_tokens(const Tensor& logits, int64_t n, int64_t step, const GenerateOptions& o,
                   Generator* gen, std::vector<int32_t>& seq, int64_t total, Tensor& out,
                   std::vector<bool>& done) const;
  // The LM head on hidden states (..., C) -> (..., vocab): x · Wᵀ, W the token embedding (tied)
  // or lm_head's own; in high precision unless config fp8_lm_head.
  Tensor lm_head(const Tensor& h, FirstMicrobatch first = FirstMicrobatch::kUnset);
  // Under an FP8 scope, B*T must satisfy the FP8 GEMM row rule: a clear error naming B and T.
  void check_fp8_rows(int64_t batch, int64_t seq) const;

  GPTConfig config_;
  std::shared_ptr<Embedding> wte_;                  // (vocab, C), also the LM head when tied
  std::shared_ptr<Embedding> wpe_;                  // (max_seq_len, C); GPT-2 only
  std::shared_ptr<Embedding> head_;                 // "lm_head" (vocab, C); untied only
  std::shared_ptr<ForeignWeightLinear> head_gemm_;  // "lm_head_gemm"; fp8_lm_head only
  std::shared_ptr<RopeTable> rope_;                 // Llama only
  std::vector<std::shared_ptr<TransformerLayer>> layers_;
  std::shared_ptr<Norm> ln_f_;
};

}  // namespace octet::modules
