// The GPT model (GPT-2 or Llama architecture): embeddings, layers, final norm, LM head, loss, and
// generation that pads its batch to the FP8 GEMM row rule so it runs under any FP8 scope.
#include "modules/gpt.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/nn.h"
#include "autograd/ops/shape.h"
#include "kernels/ops.h"
#include "kernels/quantized_format.h"
#include "kernels/quantizer.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt_options.h"
#include "runtime/memory.h"

namespace octet::modules {
namespace {

// Token rows an FP8 GEMM needs a multiple of under the active scope (1 without FP8): the row
// multiple of the formats the recipe casts activations and gradients to.
int64_t fp8_row_multiple() {
  if (!fp8_enabled()) return 1;
  int64_t multiple = 1;
  for (SlotId slot :
       {forward_slot(0, ForwardTensor::kInput), backward_slot(0, BackwardTensor::kGradOutput)}) {
    const std::string format = quantized_format_for(fp8_recipe(), slot);
    multiple = std::max(multiple, ops::quantized_format(format).row_multiple());
  }
  // Quartet II's backward transform runs along the token rows too.
  if (fp8_recipe().is_quartet2()) multiple = std::max<int64_t>(multiple, 128);
  return multiple;
}

// ids (B, T) of positions start .. start + T - 1, for the position embedding (an embedding of
// (B, T) ids keeps the add with the token embedding shape for shape, with no broadcast).
Tensor positions(int64_t batch, int64_t seq, int64_t start = 0) {
  Tensor pos = Tensor::empty({batch, seq}, DType::kI32);
  auto* p = pos.data_as<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) p[b * seq + t] = static_cast<int32_t>(start + t);
  }
  return pos;
}

// The (padded batch, padded length) with the fewest token rows whose product is a multiple of
// `multiple`, for `batch` sequences of `seq` tokens and lengths up to `max_seq`. Padding the length
// on the right is harmless under causal attention; padding the batch adds dummy sequences.
std::pair<int64_t, int64_t> padded_shape(int64_t batch, int64_t seq, int64_t max_seq,
                                         int64_t multiple) {
  std::pair<int64_t, int64_t> best{0, 0};
  for (int64_t t = seq; t <= max_seq; ++t) {
    int64_t b = batch;
    while ((b * t) % multiple != 0) ++b;
    if (best.first == 0 || b * t < best.first * best.second) best = {b, t};
  }
  return best;
}

// Index of the token drawn from one row of logits: argmax (first of equals) at temperature 0,
// else a sample of softmax(logits / temperature) over the top_k most likely tokens (all when 0)
// whose probabilities, largest first, are the fewest that reach top_p; one uniform draw of gen.
int32_t pick_token(const float* logits, int64_t vocab, const GenerateOptions& o, Generator* gen) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v) {
    if (logits[v] > logits[best]) best = v;
  }
  if (o.temperature == 0.f) return static_cast<int32_t>(best);
  // Candidates: every token in index order, or with top-k / top-p the most likely first (ties
  // by index) cut to the first top_k and then to the fewest whose probability reaches top_p.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const bool filtered = o.top_k > 0 || o.top_p < 1.f;
  if (filtered) {
    const auto keep = static_cast<size_t>(o.top_k > 0 ? std::min(o.top_k, vocab) : vocab);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    order.resize(keep);
  }
  std::vector<double> p(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    p[i] = std::exp((static_cast<double>(logits[order[i]]) - logits[best]) /
                    static_cast<double>(o.temperature));
    total += p[i];
  }
  if (o.top_p < 1.f) {
    double mass = 0;
    size_t n = 0;
    while (n < p.size() && mass < static_cast<double>(o.top_p) * total) mass += p[n++];
    p.resize(std::max<size_t>(n, 1));
    total = 0;
    for (double x : p) total += x;
  }
  const double u = static_cast<double>(gen->uniform()) * total;
  double cumulative = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    cumulative += p[i];
    if (u < cumulative) return order[i];
  }
  return filtered ? order[0] : static_cast<int32_t>(best);  // u within rounding of the total
}

// GPT::generate's options, checked the same for every form of prompts.
void check_generate_options(const GenerateOptions& o, const Generator* gen, int64_t vocab) {
  OCTET_CHECK(o.new_tokens >= 0, "GPT::generate: new_tokens ", o.new_tokens, " must be >= 0");
  OCTET_CHECK(std::isfinite(o.temperature) && o.temperature >= 0.f, "GPT::generate: temperature ",
              o.temperature, " must be finite and >= 0 (0: greedy)");
  OCTET_CHECK(o.temperature == 0.f || gen != nullptr, "GPT::generate: temperature ", o.temperature,
              " samples, so it needs a Generator");
  OCTET_CHECK(o.top_k >= 0 && o.top_p > 0.f && o.top_p <= 1.f, "GPT::generate: top_k ", o.top_k,
              " must be >= 0 and top_p ", o.top_p, " in (0, 1]");
  OCTET_CHECK(!o.eos_id || (*o.eos_id >= 0 && *o.eos_id < vocab), "GPT::generate: eos id ",
              o.eos_id.value_or(0), " is outside the vocabulary [0, ", vocab, ")");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GPT::GPT(const GPTConfig& config) : Module("GPT"), config_(config) {
  const GPTConfig& c = config_;
  OCTET_CHECK(c.vocab_size > 0 && c.max_seq_len > 0 && c.n_layer >= 0 && c.d_model > 0,
              "GPT: vocab_size ", c.vocab_size, ", max_seq_len ", c.max_seq_len, ", d_model ",
              c.d_model, " must be positive and n_layer ", c.n_layer, " >= 0");
  // bf16 parameters with f32 activations (the nn kernels compute and return f32); gradients
  // come back in bf16 (the engine rounds them to each input's dtype).
  OCTET_CHECK(c.dtype == DType::kF32 || c.dtype == DType::kBF16, "GPT: parameter dtype ", c.dtype,
              " is not supported (f32 or bf16)");
  OCTET_CHECK(c.vocab_size <= std::numeric_limits<int32_t>::max(), "GPT: vocab_size ", c.vocab_size,
              " does not fit the i32 token ids");
  wte_ = register_module("wte",
                         std::make_shared<Embedding>(c.vocab_size, c.d_model, c.dtype, c.init_std,
                                                     detail::derive_seed(c.seed, 0)));
  if (c.arch == Arch::kGPT2) {
    wpe_ = register_module(
        "wpe", std::make_shared<Embedding>(c.max_seq_len, c.d_model, c.dtype, c.init_std,
                                           detail::derive_seed(c.seed, 1)));
  } else {
    OCTET_CHECK(c.n_head > 0 && c.d_model % c.n_head == 0 && (c.d_model / c.n_head) % 2 == 0,
                "GPT (llama): the head dimension d_model / n_head = ", c.d_model, " / ", c.n_head,
                " must be an even integer for rotary positions");
    rope_ = std::make_shared<RopeTable>(c.max_seq_len, c.d_model / c.n_head, c.rope_theta);
  }
  for (int64_t i = 0; i < c.n_layer; ++i) {
    layers_.push_back(register_module(
        "layers." + std::to_string(i),
        std::make_shared<TransformerLayer>(
            c, detail::derive_seed(c.seed, 100 + static_cast<uint64_t>(i)), i, rope_)));
  }
  ln_f_ = register_module("ln_f", std::make_shared<Norm>(c.d_model, detail::norm_options(c)));
  if (c.tie_embeddings == TieEmbeddings::kNo) {
    head_ = register_module(
        "lm_head", std::make_shared<Embedding>(c.vocab_size, c.d_model, c.dtype, c.init_std,
                                               detail::derive_seed(c.seed, 2)));
  }
  if (c.fp8_lm_head) {
    const bool high = detail::keeps_lm_head_high_precision(c);
    head_gemm_ = register_module(
        std::string(detail::kLmHeadGemm),
        std::make_shared<ForeignWeightLinear>("LM head", c.recipe, detail::derive_seed(c.seed, 3),
                                              high ? Precision::kHigh : Precision::kFP8));
    if (c.recipe && !high) {
      // The vocabulary and width against the shape rule now, not at the first forward.
      check_gemm_shapes(*c.recipe, 0, "LM head", 128, c.d_model, c.vocab_size);
    }
  }
  // A pattern that keeps nothing in high precision is a typo, not a choice: say so.
  OCTET_CHECK(c.high_precision_first_layers >= 0 && c.high_precision_last_layers >= 0,
              "GPT: high_precision_first_layers ", c.high_precision_first_layers,
              " and high_precision_last_layers ", c.high_precision_last_layers, " must be >= 0");
  std::string names;
  for (const auto& [name, state] : fp8_states()) names += (names.empty() ? "" : ", ") + name;
  for (const std::string& p : c.high_precision_modules) {
    bool matched = false;
    for (const auto& [name, state] : fp8_states())
      matched = matched || module_pattern_matches(p, name);
    OCTET_CHECK(matched, "high-precision module pattern \"", p,
                "\" names no FP8 module of this GPT (they are ", names, ")");
  }
}

bool module_pattern_matches(std::string_view pattern, std::string_view name) {
  // Glob match of `pattern` against a prefix of `name` that ends at a dot or at the end.
  const auto glob = [](std::string_view p, std::string_view s) {
    size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
    while (si < s.size()) {
      if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
        ++pi;
        ++si;
      } else if (pi < p.size() && p[pi] == '*') {
        star = pi++;
        mark = si;
      } else if (star != std::string_view::npos) {
        pi = star + 1;
        si = ++mark;
      } else {
        return false;
      }
    }
    while (pi < p.size() && p[pi] == '*') ++pi;
    return pi == p.size();
  };
  for (size_t end = 0; end <= name.size(); ++end) {
    if ((end == name.size() || name[end] == '.') && glob(pattern, name.substr(0, end))) return true;
  }
  return false;
}

bool runs_fp8_modules(const GPTConfig& config) {
  if (!config.recipe) return false;
  if (config.fp8_lm_head && !detail::keeps_lm_head_high_precision(config)) return true;
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    for (std::string_view module : detail::kLayerFp8Modules) {
      if (!detail::keeps_high_precision(config, layer, detail::layer_module_name(layer, module))) {
        return true;
      }
    }
  }
  return false;
}

void GPT::check_fp8_rows(int64_t batch, int64_t seq) const {
  const int64_t multiple = fp8_row_multiple();
  OCTET_CHECK((batch * seq) % multiple == 0, "GPT under FP8 (", recipe_kind_name(fp8_recipe().kind),
              "): ids (B, T) = (", batch, ", ", seq, ") give ", batch * seq,
              " token rows, but FP8 GEMMs need a multiple of ", multiple,
              " (per-tensor: 8, MXFP8: 32, NVFP4: 16, its quartet2 method: 128); change the batch "
              "or sequence length, or run outside "
              "the FP8 scope");
}

Tensor GPT::hidden(const Tensor& ids, FirstMicrobatch first) {
  OCTET_CHECK(ids.dim() == 2 && (ids.dtype() == DType::kI32 || ids.dtype() == DType::kI64),
              "GPT: ids ", ids, " must be (B, T) i32 or i64");
  const int64_t batch = ids.size(0), seq = ids.size(1);
  OCTET_CHECK(batch > 0 && seq > 0 && seq <= config_.max_seq_len, "GPT: ids ", ids,
              " must have 1 <= T <= max_seq_len ", config_.max_seq_len, " and B >= 1");
  check_fp8_rows(batch, seq);
  // Token ids may come from the host (a data loader); they go where the model lives.
  const Tensor on_device = ids.device() == device() ? ids : ids.to(device());
  Tensor x = wte_->forward(on_device);  // (B, T, C)
  if (wpe_ != nullptr) {
    Tensor pos = positions(batch, seq);
    if (!device().is_cpu()) pos = pos.to(device());
    x = autograd::add(x, wpe_->forward(pos));
  }
  for (const auto& layer : layers_) x = layer->forward(x, first);
  return ln_f_->forward(x);
}

Tensor GPT::lm_head(const Tensor& h, FirstMicrobatch first) {
  // Tied: the token embedding's table gets gradient from the lookup and from here.
  const Tensor& table = head_ != nullptr ? head_->table() : wte_->table();
  if (head_gemm_ != nullptr) return head_gemm_->forward(h, table, first);
  return autograd::linear(h, table);
}

Tensor GPT::forward(const Tensor& ids, FirstMicrobatch first) {
  return lm_head(hidden(ids, first), first);
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets, FirstMicrobatch first) {
  OCTET_CHECK(targets.shape() == ids.shape(), "GPT::loss: targets ", targets,
              " must have the shape of ids ", ids);
  const Tensor logits = forward(ids, first);  // (B, T, V)
  const int64_t rows = ids.numel();
  const Tensor on_device =
      targets.device() == logits.device() ? targets : targets.to(logits.device());
  return autograd::cross_entropy(autograd::reshape(logits, {rows, config_.vocab_size}),
                                 on_device.reshape({rows}), -100);
}

Tensor GPT::hidden_cached(const Tensor& ids, std::vector<LayerCache>& caches, int64_t pos) {
  const int64_t batch = ids.size(0), seq = ids.size(1);
  OCTET_CHECK(pos + seq <= config_.max_seq_len, "GPT: positions [", pos, ", ", pos + seq,
              ") pass max_seq_len ", config_.max_seq_len);
  check_fp8_rows(batch, seq);
  const Tensor on_device = ids.device() == device() ? ids : ids.to(device());
  Tensor x = wte_->forward(on_device);  // (N, T, C)
  if (wpe_ != nullptr) {
    Tensor at = positions(batch, seq, pos);
    if (!device().is_cpu()) at = at.to(device());
    x = autograd::add(x, wpe_->forward(at));
  }
  for (size_t l = 0; l < layers_.size(); ++l) x = layers_[l]->forward_cached(x, caches[l], pos);
  return ln_f_->forward(x);
}

void GPT::pick_tokens(const Tensor& logits_in, int64_t n, int64_t step, const GenerateOptions& o,
                      Generator* gen, std::vector<int32_t>& seq, int64_t total, Tensor& out,
                      std::vector<bool>& done) const {
  Tensor logits = logits_in;  // (rows >= n, V) in the model's dtype
  if (!logits.device().is_cpu()) logits = logits.to(Device::cpu());
  if (logits.dtype() != DType::kF32) logits = ops::cast(logits, DType::kF32);  // exact
  const int64_t vocab = config_.vocab_size, len = total - o.new_tokens + step;
  const auto* lp = logits.data_as<float>();
  auto* out_ids = out.data_as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t token =
        done[static_cast<size_t>(i)] ? *o.eos_id : pick_token(lp + i * vocab, vocab, o, gen);
    if (o.eos_id && token == *o.eos_id) done[static_cast<size_t>(i)] = true;
    seq[static_cast<size_t>(i * total + len)] = token;
    out_ids[i * o.new_tokens + step] = token;
  }
}

Tensor GPT::generate(const Tensor& prompts, int64_t new_tokens, float temperature, Generator* gen) {
  GenerateOptions o;
  o.new_tokens = new_tokens;
  o.temperature = temperature;
  return generate(prompts, o, gen).tokens;
}

Generation GPT::generate(const Tensor& prompts, const GenerateOptions& o, Generator* gen) {
  OCTET_CHECK(prompts.dim() == 2 && prompts.size(0) > 0 && prompts.size(1) > 0 &&
                  (prompts.dtype() == DType::kI32 || prompts.dtype() == DType::kI64),
              "GPT::generate: prompts ", prompts, " must be (N, P) i32 or i64 with N, P >= 1");
  check_generate_options(o, gen, config_.vocab_size);
  autograd::InferenceModeGuard inference;
  const int64_t n = prompts.size(0), p = prompts.size(1), total = p + o.new_tokens;
  // Every sequence, prompt then generated tokens: (N, P + new_tokens).
  std::vector<int32_t> seq(static_cast<size_t>(n * total));
  const std::vector<float> prompt_values = prompts.to_floats();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < p; ++t) {
      const float id = prompt_values[static_cast<size_t>(i * p + t)];
      OCTET_CHECK(id >= 0 && id < static_cast<float>(config_.vocab_size), "GPT::generate: prompt ",
                  i, " token ", t, " is ", id, ", outside the vocabulary [0, ", config_.vocab_size,
                  ")");
      seq[static_cast<size_t>(i * total + t)] = static_cast<int32_t>(id);
    }
  }
  Generation result;
  result.tokens = Tensor::empty({n, o.new_tokens}, DType::kI32);
  std::vector<bool> done(static_cast<size_t>(n), false);
  const auto all_done = [&] {
    return std::all_of(done.begin(), done.end(), [](bool d) { return d; });
  };
  int64_t step = 0;
  if (o.kv_cache == KVCacheUse::kYes && p < config_.max_seq_len && o.new_tokens > 0) {
    step = generate_cached(seq, n, total, o, gen, result, done);
  }
  const auto window_start = std::chrono::steady_clock::now();
  for (; step < o.new_tokens && !all_done(); ++step) {
    pick_tokens(window_logits(seq, n, total, p + step), n, step, o, gen, seq, total, result.tokens,
                done);
  }
  result.window_s = seconds_since(window_start);
  // Rows that stopped early: eos to the end.
  for (; step < o.new_tokens; ++step) {
    for (int64_t i = 0; i < n; ++i)
      result.tokens.data_as<int32_t>()[i * o.new_tokens + step] = *o.eos_id;
  }
  return result;
}

int64_t GPT::generate_cached(std::vector<int32_t>& seq, int64_t n, int64_t total,
                             const GenerateOptions& o, Generator* gen, Generation& result,
                             std::vector<bool>& done) {
  const int64_t p = total - o.new_tokens;
  // Under FP8 every GEMM's rows must be a multiple of the format's: pad the batch with dummy
  // sequences (token 0), so that prompt (rows_pad * P) and each step (rows_pad) fit.
  const int64_t multiple = fp8_row_multiple();
  const int64_t rows = (n + multiple - 1) / multiple * multiple;
  // The positions this generation reaches: the prompt and its tokens, at most the context.
  std::vector<LayerCache> caches =
      make_caches(rows, std::min(total, config_.max_seq_len), result.cache_bytes);
  auto last_logits = [&](const Tensor& h) { return last_logits_of(h, rows, h.size(1) - 1); };
  Tensor ids = Tensor::zeros({rows, p}, DType::kI32);  // the prompts, then padding rows
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(ids.data_as<int32_t>() + i * p, seq.data() + i * total,
                static_cast<size_t>(p) * sizeof(int32_t));
  }
  const auto start = std::chrono::steady_clock::now();
  pick_tokens(last_logits(hidden_cached(ids, caches, 0)), n, 0, o, gen, seq, total, result.tokens,
              done);
  result.prompt_s = seconds_since(start);
  const auto decode_start = std::chrono::steady_clock::now();
  int64_t step = 1;
  // The token at position len - 1 goes in while the window still starts at position 0.
  for (int64_t len = p + 1; step < o.new_tokens && len <= config_.max_seq_len; ++step, ++len) {
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    Tensor next = Tensor::zeros({rows, 1}, DType::kI32);
    for (int64_t i = 0; i < n; ++i)
      next.data_as<int32_t>()[i] = seq[static_cast<size_t>(i * total + len - 1)];
    pick_tokens(last_logits(hidden_cached(next, caches, len - 1)), n, step, o, gen, seq, total,
                result.tokens, done);
  }
  result.cached_s = seconds_since(decode_start);
  result.cached_tokens = step;
  return step;
}

Generation GPT::generate(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
                         Generator* gen) {
  OCTET_CHECK(!prompts.empty(), "GPT::generate: no prompts");
  check_generate_options(o, gen, config_.vocab_size);
  const auto n = static_cast<int64_t>(prompts.size());
  size_t shortest = prompts[0].size(), longest = prompts[0].size();
  for (const auto& p : prompts) {
    shortest = std::min(shortest, p.size());
    longest = std::max(longest, p.size());
  }
  if (shortest == longest) {  // one length: the tensor path, with its sliding window
    Tensor t = Tensor::empty({n, static_cast<int64_t>(longest)}, DType::kI32);
    for (int64_t i = 0; i < n; ++i)
      std::copy(prompts[static_cast<size_t>(i)].begin(), prompts[static_cast<size_t>(i)].end(),
                t.data_as<int32_t>() + i * static_cast<int64_t>(longest));
    return generate(t, o, gen);
  }
  OCTET_CHECK(shortest > 0, "GPT::generate: an empty prompt");
  if (o.kv_cache == KVCacheUse::kNo) {  // the reference: each prompt alone, re-running windows
    Generation all;
    all.tokens = Tensor::empty({n, o.new_tokens}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) {
      const Generation one =
          generate(std::vector<std::vector<int32_t>>{prompts[static_cast<size_t>(i)]}, o, gen);
      std::copy_n(one.tokens.data_as<int32_t>(), o.new_tokens,
                  all.tokens.data_as<int32_t>() + i * o.new_tokens);
      all.window_s += one.window_s;
    }
    return all;
  }
  OCTET_CHECK(static_cast<int64_t>(longest) + o.new_tokens <= config_.max_seq_len,
              "GPT::generate: prompts of different lengths need the longest (", longest,
              " tokens) plus new_tokens ", o.new_tokens, " to fit max_seq_len ",
              config_.max_seq_len, "; generate them apart, or fewer tokens");
  for (int64_t i = 0; i < n; ++i) {
    for (const int32_t id : prompts[static_cast<size_t>(i)]) {
      OCTET_CHECK(id >= 0 && id < config_.vocab_size, "GPT::generate: prompt ", i, " holds token ",
                  id, ", outside the vocabulary [0, ", config_.vocab_size, ")");
    }
  }
  autograd::InferenceModeGuard inference;
  const int64_t multiple = fp8_row_multiple();
  const int64_t rows = (n + multiple - 1) / multiple * multiple;
  const int64_t vocab = config_.vocab_size;
  Generation result;
  result.tokens =
      Tensor::full({n, o.new_tokens}, static_cast<float>(o.eos_id.value_or(0)), DType::kI32);
  std::vector<LayerCache> caches =
      make_caches(rows, static_cast<int64_t>(longest) + o.new_tokens, result.cache_bytes);
  // Every sequence's known tokens: its prompt, then what it generated (made[i] of them).
  std::vector<std::vector<int32_t>> seq(prompts.begin(), prompts.end());
  std::vector<int64_t> made(static_cast<size_t>(n), 0);
  std::vector<bool> done(static_cast<size_t>(n), false);
  auto* out = result.tokens.data_as<int32_t>();
  const auto wants = [&](int64_t i) {
    return made[static_cast<size_t>(i)] < o.new_tokens && !done[static_cast<size_t>(i)];
  };
  // After a pass whose last position is `pos`: each sequence that knows no token past pos and
  // wants more picks one from that position's logits.
  auto pick = [&](const Tensor& h, int64_t pos) {
    Tensor logits = last_logits_of(h, rows, h.size(1) - 1);  // (rows, V)
    if (!logits.device().is_cpu()) logits = logits.to(Device::cpu());
    if (logits.dtype() != DType::kF32) logits = ops::cast(logits, DType::kF32);  // exact
    const float* lp = logits.data_as<float>();
    for (int64_t i = 0; i < n; ++i) {
      auto& known = seq[static_cast<size_t>(i)];
      if (static_cast<int64_t>(known.size()) != pos + 1 || !wants(i)) continue;
      const int32_t token = pick_token(lp + i * vocab, vocab, o, gen);
      known.push_back(token);
      out[i * o.new_tokens + made[static_cast<size_t>(i)]++] = token;
      done[static_cast<size_t>(i)] = o.eos_id && token == *o.eos_id;
    }
  };
  const auto start = std::chrono::steady_clock::now();
  const auto p0 = static_cast<int64_t>(shortest);
  Tensor ids = Tensor::zeros({rows, p0}, DType::kI32);  // every prompt's first p0 tokens
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(prompts[static_cast<size_t>(i)].begin(), p0, ids.data_as<int32_t>() + i * p0);
  pick(hidden_cached(ids, caches, 0), p0 - 1);
  result.prompt_s = seconds_since(start);
  const auto decode_start = std::chrono::steady_clock::now();
  for (int64_t pos = p0;; ++pos) {
    bool more = false;
    Tensor next = Tensor::zeros({rows, 1}, DType::kI32);  // padding and finished rows: token 0
    for (int64_t i = 0; i < n; ++i) {
      const auto& known = seq[static_cast<size_t>(i)];
      more = more || wants(i);
      if (static_cast<int64_t>(known.size()) > pos)
        next.data_as<int32_t>()[i] = known[static_cast<size_t>(pos)];
    }
    if (!more) break;
    pick(hidden_cached(next, caches, pos), pos);
  }
  result.cached_s = seconds_since(decode_start);
  for (const int64_t m : made) result.cached_tokens = std::max(result.cached_tokens, m);
  return result;
}

Tensor GPT::window_logits(const std::vector<int32_t>& seq, int64_t n, int64_t total, int64_t len) {
  const int64_t window = std::min(len, config_.max_seq_len);  // the last max_seq_len tokens
  const auto [batch_pad, seq_pad] =
      padded_shape(n, window, config_.max_seq_len, fp8_row_multiple());
  Tensor ids = Tensor::zeros({batch_pad, seq_pad}, DType::kI32);  // padding: token 0
  auto* id = ids.data_as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(id + i * seq_pad, seq.data() + i * total + (len - window),
                static_cast<size_t>(window) * sizeof(int32_t));
  }
  // Only each real sequence's last position goes through the LM head: (N, V).
  return last_logits_of(hidden(ids, FirstMicrobatch::kUnset), n, window - 1);
}

std::vector<LayerCache> GPT::make_caches(int64_t rows, int64_t positions, int64_t& bytes) const {
  MemTagScope tag(MemTag::kActivations);
  std::vector<LayerCache> caches;
  for (const auto& layer : layers_) {
    caches.push_back(layer->make_cache(rows, positions, device()));
    bytes += static_cast<int64_t>(caches.back().k.nbytes() + caches.back().v.nbytes());
  }
  return caches;
}

Tensor GPT::last_logits_of(const Tensor& h, int64_t rows, int64_t position) {
  const int64_t T = h.size(1), c = config_.d_model;
  Tensor last = Tensor::empty({rows, c}, h.dtype(), h.device());  // (rows, C)
  const Tensor flat = h.reshape({h.size(0) * T, c});
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = i * T + position;
    last.slice(i, i + 1).copy_bytes_from(flat.slice(r, r + 1));
  }
  return lm_head(last);  // (rows, V) in the model's dtype
}

}  // namespace octet::modules
