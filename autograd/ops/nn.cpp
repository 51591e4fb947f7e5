// Backward of the neural-network operations. Each function saves exactly what its backward
// kernel reads.
#include "autograd/ops/nn.h"

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "kernels/ops.h"

namespace octet::autograd {
namespace {

enum class Gating : uint8_t { kNone, kGated };  // gated: x = [a | g] -> act(a) * g

struct ActivationFn {
  static constexpr const char* kName = "activation";
  Activation act;
  Gating gating;
  Tensor forward(Context& ctx, const Tensor& x) {
    ctx.save(x);
    return gating == Gating::kGated ? ops::gated_activation(act, x) : ops::activation(act, x);
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [x] = ctx.restore<1>();
    return {gating == Gating::kGated ? ops::gated_activation_backward(act, dy[0], x)
                                     : ops::activation_backward(act, dy[0], x)};
  }
};

struct SoftmaxFn {
  static constexpr const char* kName = "softmax";
  Tensor forward(Context& ctx, const Tensor& x) {
    Tensor y = ops::softmax(x);
    ctx.save(y);
    return y;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [y] = ctx.restore<1>();
    return {ops::softmax_backward(dy[0], y)};
  }
};

struct LayerNormFn {
  static constexpr const char* kName = "layer_norm";
  float eps;
  ZeroCenteredGamma zc;
  Tensor forward(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta) {
    ops::NormForward f = ops::layernorm(x, gamma, beta.defined() ? &beta : nullptr, eps, zc);
    ctx.save(x, gamma, f.mean, f.rsigma);
    return f.y;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [x, gamma, mean, rsigma] = ctx.restore<4>();
    ops::NormBackward b = ops::layernorm_backward(dy[0], x, mean, rsigma, gamma, zc);
    return {b.dx, b.dgamma, b.dbeta};
  }
};

struct RmsNormFn {
  static constexpr const char* kName = "rms_norm";
  float eps;
  ZeroCenteredGamma zc;
  Tensor forward(Context& ctx, const Tensor& x, const Tensor& gamma) {
    ops::NormForward f = ops::rmsnorm(x, gamma, eps, zc);
    ctx.save(x, gamma, f.rsigma);
    return f.y;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [x, gamma, rsigma] = ctx.restore<3>();
    ops::NormBackward b = ops::rmsnorm_backward(dy[0], x, rsigma, gamma, zc);
    return {b.dx, b.dgamma};
  }
};

struct EmbeddingFn {
  static constexpr const char* kName = "embedding";
  int64_t rows = 0;
  Tensor forward(Context& ctx, const Tensor& table, const Tensor& ids) {
    rows = table.size(0);
    ctx.save(ids);
    return ops::embedding(table, ids);
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [ids] = ctx.restore<1>();
    return {ops::embedding_backward(dy[0], ids, rows), Tensor()};
  }
};

struct DropoutFn {
  static constexpr const char* kName = "dropout";
  float p;
  Generator* gen;
  Tensor forward(Context& ctx, const Tensor& x) {
    ops::DropoutForward f = ops::dropout(x, p, *gen);
    ctx.save(f.mask);
    return f.y;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [mask] = ctx.restore<1>();
    return {ops::dropout_backward(dy[0], mask, p)};
  }
};

struct AttentionFn {
  static constexpr const char* kName = "causal_attention";
  int64_t heads, kv_heads;
  float scale;
  Tensor forward(Context& ctx, const Tensor& qkv) {
    ops::AttentionForward f = ops::causal_attention(qkv, heads, kv_heads, scale);
    ctx.save(qkv, f.out, f.lse);
    return f.out;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [qkv, out, lse] = ctx.restore<3>();
    return {ops::causal_attention_backward(dy[0], qkv, out, lse, heads, kv_heads, scale)};
  }
};

// pack_heads and rope_heads: the same arguments, and a backward that takes them too.
using HeadsOp = Tensor (*)(const Tensor&, int64_t, int64_t, const Tensor&);
template <const char* kOpName, HeadsOp kForward, HeadsOp kBackward>
struct HeadsFn {
  static constexpr const char* kName = kOpName;
  int64_t heads, kv_heads;
  Tensor rope;  // owned by the model: not saved, never released by the graph
  Tensor forward(Context&, const Tensor& qkv) { return kForward(qkv, heads, kv_heads, rope); }
  Tensors backward(Context&, const Tensors& dy) {
    return {kBackward(dy[0], heads, kv_heads, rope)};
  }
};
constexpr char kPackHeads[] = "pack_heads";
constexpr char kRopeHeads[] = "rope_heads";
using PackHeadsFn = HeadsFn<kPackHeads, ops::pack_heads, ops::pack_heads_backward>;
using RopeHeadsFn = HeadsFn<kRopeHeads, ops::rope_heads, ops::rope_heads_backward>;

struct CrossEntropyFn {
  static constexpr const char* kName = "cross_entropy";
  int64_t ignore_index;
  Tensor forward(Context& ctx, const Tensor& logits, const Tensor& targets) {
    ops::CrossEntropyForward f = ops::cross_entropy(logits, targets, ignore_index);
    ctx.save(logits, targets, f.lse, f.counted);
    return f.loss;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [logits, targets, lse, counted] = ctx.restore<4>();
    // dloss and the count stay where they are: a GPU backward reads neither on the host.
    return {ops::cross_entropy_backward(dy[0], logits, targets, lse, ignore_index, counted),
            Tensor()};
  }
};

}  // namespace

Tensor activation(Activation act, const Tensor& x) {
  return apply(ActivationFn{act, Gating::kNone}, x);
}
Tensor gelu(const Tensor& x) { return autograd::activation(Activation::kGelu, x); }
Tensor relu(const Tensor& x) { return autograd::activation(Activation::kRelu, x); }
Tensor squared_relu(const Tensor& x) { return autograd::activation(Activation::kSquaredRelu, x); }
Tensor silu(const Tensor& x) { return autograd::activation(Activation::kSilu, x); }
Tensor gated_activation(Activation act, const Tensor& x) {
  return apply(ActivationFn{act, Gating::kGated}, x);
}
Tensor softmax(const Tensor& x) { return apply(SoftmaxFn{}, x); }

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                  ZeroCenteredGamma zc) {
  return apply(LayerNormFn{eps, zc}, x, gamma, beta);
}

Tensor rms_norm(const Tensor& x, const Tensor& gamma, float eps, ZeroCenteredGamma zc) {
  return apply(RmsNormFn{eps, zc}, x, gamma);
}

Tensor embedding(const Tensor& table, const Tensor& ids) {
  return apply(EmbeddingFn{}, table, ids);
}

Tensor dropout(const Tensor& x, float p, Generator& gen) {
  OCTET_CHECK(p >= 0.f && p < 1.f, "dropout probability ", p, " must be in [0, 1)");
  if (p == 0.f || inference_mode()) return x;
  return apply(DropoutFn{p, &gen}, x);
}

Tensor causal_attention(const Tensor& qkv, int64_t heads, float scale) {
  return apply(AttentionFn{heads, heads, scale}, qkv);
}

Tensor causal_attention(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale) {
  return apply(AttentionFn{heads, kv_heads, scale}, qkv);
}

Tensor pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope) {
  return apply(PackHeadsFn{heads, kv_heads, rope}, qkv);
}

Tensor rope_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope) {
  return apply(RopeHeadsFn{heads, kv_heads, rope}, qkv);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  return apply(CrossEntropyFn{ignore_index}, logits, targets);
}

}  // namespace octet::autograd
