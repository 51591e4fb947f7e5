// Embedding, causal self-attention (grouped-query heads, rotary positions) and the pre-norm
// TransformerLayer of modules/gpt.h.
#include <cmath>
#include <utility>

#include "autograd/ops/arithmetic.h"
#include "autograd/ops/nn.h"
#include "autograd/variable.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "modules/gpt.h"
#include "modules/gpt_options.h"
#include "runtime/memory.h"

namespace octet::modules {

Embedding::Embedding(int64_t num, int64_t dim, DType dtype, float init_std, uint64_t seed)
    : Module("Embedding") {
  OCTET_CHECK(num > 0 && dim > 0, "Embedding(", num, ", ", dim, "): sizes must be positive");
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "Embedding: parameter dtype ", dtype,
              " is not supported (f32 or bf16)");
  OCTET_CHECK(init_std >= 0.f, "Embedding: init_std ", init_std, " must be >= 0");
  MemTagScope tag(MemTag::kWeights);
  // Drawn in f32 and rounded, so a bf16 table holds the f32 table's values to bf16 precision.
  Tensor values = Tensor::empty({num, dim}, DType::kF32);
  Generator gen(seed);
  gen.fill_normal(values, 0.f, init_std);
  table_ = dtype == DType::kF32 ? values : ops::cast(values, dtype);
  autograd::set_requires_grad(table_);
  register_parameter("weight", &table_);
}

Tensor Embedding::forward(const Tensor& ids) { return autograd::embedding(table_, ids); }

RopeTable::RopeTable(int64_t max_len, int64_t head_dim, double theta) {
  MemTagScope tag(MemTag::kWeights);
  host_ = ops::rope_table(max_len, head_dim, theta);
}

const Tensor& RopeTable::on(Device device) {
  if (device.is_cpu()) return host_;
  for (const Tensor& t : copies_) {
    if (t.device() == device) return t;
  }
  MemTagScope tag(MemTag::kWeights);
  copies_.push_back(host_.to(device));
  return copies_.back();
}

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config, uint64_t seed, int64_t layer,
                                         std::shared_ptr<RopeTable> rope)
    : Module("CausalSelfAttention"),
      d_model_(config.d_model),
      n_head_(config.n_head),
      n_kv_head_(config.n_kv_head == 0 ? config.n_head : config.n_kv_head),
      rope_(std::move(rope)) {
  OCTET_CHECK(n_head_ > 0 && d_model_ > 0 && d_model_ % n_head_ == 0,
              "CausalSelfAttention: d_model ", d_model_, " must be a positive multiple of n_head ",
              n_head_);
  OCTET_CHECK(n_kv_head_ > 0 && n_head_ % n_kv_head_ == 0, "CausalSelfAttention: n_kv_head ",
              n_kv_head_, " must divide n_head ", n_head_);
  const int64_t head_dim = d_model_ / n_head_;
  LayerNormLinearOptions qkv_options;
  qkv_options.norm = detail::norm_options(config);
  qkv_options.linear = detail::module_linear_options(config, detail::derive_seed(seed, 0), layer,
                                                     detail::layer_module_name(layer, "attn.qkv"));
  qkv_ = register_module("qkv", std::make_shared<LayerNormLinear>(
                                    d_model_, (n_head_ + 2 * n_kv_head_) * head_dim, qkv_options));
  proj_ = register_module(
      "proj", std::make_shared<Linear>(
                  d_model_, d_model_,
                  detail::module_linear_options(config, detail::derive_seed(seed, 1), layer,
                                                detail::layer_module_name(layer, "attn.proj"))));
}

Tensor CausalSelfAttention::forward(const Tensor& x, FirstMicrobatch first) {
  OCTET_CHECK(x.dim() == 3 && x.size(2) == d_model_, "CausalSelfAttention(d_model ", d_model_,
              "): input ", x, " must be (B, T, ", d_model_, ")");
  Tensor qkv = qkv_->forward(x, first);  // (B, T, (H + 2G) D)
  if (rope_ != nullptr)
    qkv = autograd::rope_heads(qkv, n_head_, n_kv_head_, rope_->on(qkv.device()));
  const float scale = 1.f / std::sqrt(static_cast<float>(d_model_ / n_head_));
  const Tensor y = autograd::causal_attention(qkv, n_head_, n_kv_head_, scale);  // (B, T, C)
  return proj_->forward(y, first);
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, LayerCache& cache, int64_t pos) {
  OCTET_CHECK(x.dim() == 3 && x.size(2) == d_model_, "CausalSelfAttention(d_model ", d_model_,
              "): input ", x, " must be (N, T, ", d_model_, ")");
  const int64_t T = x.size(1);
  Tensor qkv = qkv_->forward(x, FirstMicrobatch::kUnset);  // (N, T, (H + 2G) D)
  if (rope_ != nullptr) {
    // Rows pos .. pos + T - 1 of the table: the new positions' angles.
    qkv = ops::rope_heads(qkv, n_head_, n_kv_head_, rope_->on(qkv.device()).slice(pos, pos + T));
  }
  // The G key/value heads go into the cache unrepeated.
  ops::kv_cache_write(qkv, cache.k, cache.v, pos);
  const float scale = 1.f / std::sqrt(static_cast<float>(d_model_ / n_head_));
  const Tensor y = ops::cached_attention(qkv, cache.k, cache.v, pos, scale);  // (N, T, C)
  return proj_->forward(y, FirstMicrobatch::kUnset);
}

LayerCache CausalSelfAttention::make_cache(int64_t batch, int64_t max_len, Device device) const {
  const Shape shape = {batch, max_len, n_kv_head_, d_model_ / n_head_};
  return {Tensor::zeros(shape, DType::kF32, device), Tensor::zeros(shape, DType::kF32, device)};
}

TransformerLayer::TransformerLayer(const GPTConfig& config, uint64_t seed, int64_t layer,
                                   std::shared_ptr<RopeTable> rope)
    : Module("TransformerLayer"),
      dropout_(config.dropout),
      dropout_gen_(detail::derive_seed(seed, 2)) {
  OCTET_CHECK(dropout_ >= 0.f && dropout_ < 1.f, "TransformerLayer: dropout ", dropout_,
              " must be in [0, 1)");
  OCTET_CHECK(config.ffn >= 0, "TransformerLayer: ffn ", config.ffn,
              " must be >= 0 (0: 4 * d_model)");
  attn_ =
      register_module("attn", std::make_shared<CausalSelfAttention>(
                                  config, detail::derive_seed(seed, 0), layer, std::move(rope)));
  LayerNormMLPOptions mlp_options;
  mlp_options.norm = detail::norm_options(config);
  mlp_options.activation = config.activation;
  mlp_options.recompute = config.recompute;
  mlp_options.linear = detail::module_linear_options(config, detail::derive_seed(seed, 1), layer,
                                                     detail::layer_module_name(layer, "mlp"));
  const int64_t ffn = config.ffn == 0 ? 4 * config.d_model : config.ffn;
  mlp_ = register_module("mlp", std::make_shared<LayerNormMLP>(config.d_model, ffn, mlp_options));
}

Tensor TransformerLayer::branch_dropout(const Tensor& branch) {
  if (dropout_ == 0.f || !training()) return branch;
  return autograd::dropout(branch, dropout_, dropout_gen_);
}

Tensor TransformerLayer::forward(const Tensor& x, FirstMicrobatch first) {
  const Tensor h = autograd::add(x, branch_dropout(attn_->forward(x, first)));
  return autograd::add(h, branch_dropout(mlp_->forward(h, first)));
}

Tensor TransformerLayer::forward_cached(const Tensor& x, LayerCache& cache, int64_t pos) {
  const Tensor h = autograd::add(x, attn_->forward_cached(x, cache, pos));
  return autograd::add(h, mlp_->forward(h, FirstMicrobatch::kUnset));
}

}  // namespace octet::modules
