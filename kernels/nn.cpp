// Argument checks and dispatch for kernels/nn.h. Activations keep their dtype through each op;
// a backend that reads and writes bf16 activations itself (CUDA) gets them as they are, the
// others (the CPU kernels; f16 everywhere) get f32 workspace copies and write f32 workspace
// results that are rounded into the output here (the embedding table is passed as it is).
#include "kernels/nn.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/nn_cpu.h"
#include "kernels/device_policy.h"
#include "kernels/op_checks.h"
#include "runtime/memory.h"
#include "runtime/named.h"

namespace octet::ops {
namespace {

using detail::backend_for;
using detail::check_defined;
using detail::on_device;
using detail::op_device;

// Defined and f32/bf16/f16.
void check_float(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  const DType d = t.dtype();
  OCTET_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16, op, ": ", name,
              " must be f32, bf16 or f16, got ", t);
}

void check_same_shape(const char* op, const Tensor& a, const char* an, const Tensor& b,
                      const char* bn) {
  OCTET_CHECK(a.shape() == b.shape(), op, ": ", an, " ", shape_str(a.shape()), " and ", bn, " ",
              shape_str(b.shape()), " must have the same shape");
}

// `t` as f32: itself, or a converted copy that lives for the call (counted as workspace).
Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  MemTagScope tag(MemTag::kWorkspace);
  Tensor out = Tensor::empty(t.shape(), DType::kF32, t.device());
  on_device(t.device())->convert(t, out);
  return out;
}

// A new f32 tensor on the device of `like`.
Tensor f32_like(const Tensor& like, const Shape& shape) {
  return Tensor::empty(shape, DType::kF32, like.device());
}

// Whether `device`'s backend reads and writes activations of dtype d itself (f32 everywhere, bf16
// and f16 where the backend takes them); any other goes through f32.
bool native(Device device, DType d) {
  return d == DType::kF32 ||
         ((d == DType::kBF16 || d == DType::kF16) && backend_for(device).takes_16bit_activations());
}

// An activation input as the backend reads it: itself, or an f32 copy for the call.
Tensor act_input(const Tensor& t) { return native(t.device(), t.dtype()) ? t : as_f32(t); }

// An activation output of `dtype`: the backend writes kernel(), finish() returns the result,
// rounded from an f32 workspace where the backend does not write `dtype` itself.
class ActOutput {
 public:
  ActOutput(const Shape& shape, DType dtype, Device device)
      : result_(Tensor::empty(shape, dtype, device)) {
    if (native(device, dtype)) {
      kernel_ = result_;
    } else {
      MemTagScope tag(MemTag::kWorkspace);
      kernel_ = Tensor::empty(shape, DType::kF32, device);
    }
  }
  Tensor& kernel() { return kernel_; }
  Tensor finish() {
    if (kernel_.data() != result_.data()) on_device(result_.device())->convert(kernel_, result_);
    return result_;
  }

 private:
  Tensor result_, kernel_;
};

// A per-channel parameter: (C,) floating.
Tensor channel_param(const char* op, const Tensor& t, const char* name, int64_t channels) {
  check_float(op, t, name);
  OCTET_CHECK(t.dim() == 1 && t.numel() == channels, op, ": ", name, " must be (", channels,
              ",) to match the last dimension of x, got ", t);
  return as_f32(t);
}

// A (rows,) f32 statistic saved by a norm's forward.
void check_row_stat(const char* op, const Tensor& t, const char* name, int64_t rows) {
  check_defined(op, t, name);
  OCTET_CHECK(t.dtype() == DType::kF32 && t.numel() == rows, op, ": ", name, " must be an f32 (",
              rows, ",) tensor (one per row of x), got ", t);
}

void check_index_dtype(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  OCTET_CHECK(t.dtype() == DType::kI32 || t.dtype() == DType::kI64, op, ": ", name,
              " must be i32 or i64, got ", t);
}

// i32/i64 indices of a CPU tensor as int64. CUDA indices stay on the device: its kernels check
// them and the host raises a bad one at its next read (runtime/cuda.h), so none is copied back.
std::vector<int64_t> host_indices(const char* op, const Tensor& t, const char* name) {
  check_index_dtype(op, t, name);
  if (!t.device().is_cpu()) return {};
  return cpu::index_values(t);
}

void check_ids_in_range(const char* op, const std::vector<int64_t>& ids, int64_t rows) {
  for (size_t i = 0; i < ids.size(); ++i) {
    OCTET_CHECK(ids[i] >= 0 && ids[i] < rows, op, ": id ", ids[i], " at position ", i,
                " is out of range for a table of ", rows, " rows (ids must be in [0, ", rows, "))");
  }
}

Shape with_last(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

Shape leading(const Shape& shape) { return Shape(shape.begin(), shape.end() - 1); }

}  // namespace

constexpr Named<Activation> kActivations[] = {{Activation::kGelu, "gelu"},
                                              {Activation::kRelu, "relu"},
                                              {Activation::kSquaredRelu, "srelu"},
                                              {Activation::kSilu, "silu"}};
const char* activation_name(Activation act) { return name_in(kActivations, act).data(); }

// ---- activations ----

Tensor activation(Activation act, const Tensor& x) {
  check_float("activation", x, "x");
  ActOutput y(x.shape(), x.dtype(), x.device());
  on_device(x.device())->activation(act, act_input(x), y.kernel());
  return y.finish();
}

Tensor activation_backward(Activation act, const Tensor& dy, const Tensor& x) {
  constexpr const char* op = "activation_backward";
  check_float(op, dy, "dy");
  check_float(op, x, "x");
  const Device device = op_device(op, {{dy, "dy"}, {x, "x"}});
  check_same_shape(op, dy, "dy", x, "x");
  ActOutput dx(x.shape(), x.dtype(), device);
  on_device(device)->activation_backward(act, act_input(dy), act_input(x), dx.kernel());
  return dx.finish();
}

namespace {
void check_gated_input(const char* op, const Tensor& x) {
  check_float(op, x, "x");
  OCTET_CHECK(x.dim() >= 1 && x.cols() % 2 == 0, op, ": the last dimension of x ",
              shape_str(x.shape()), " must be even (it holds [a | g] halves)");
}
}  // namespace

Tensor gated_activation(Activation act, const Tensor& x) {
  check_gated_input("gated_activation", x);
  ActOutput y(with_last(x.shape(), x.cols() / 2), x.dtype(), x.device());
  on_device(x.device())->gated_activation(act, act_input(x), y.kernel());
  return y.finish();
}

Tensor gated_activation_backward(Activation act, const Tensor& dy, const Tensor& x) {
  constexpr const char* op = "gated_activation_backward";
  check_gated_input(op, x);
  check_float(op, dy, "dy");
  const Device device = op_device(op, {{x, "x"}, {dy, "dy"}});
  const Shape want = with_last(x.shape(), x.cols() / 2);
  OCTET_CHECK(dy.shape() == want, op, ": dy ", shape_str(dy.shape()), " must be ", shape_str(want),
              " (x ", shape_str(x.shape()), " with its last dimension halved)");
  ActOutput dx(x.shape(), x.dtype(), device);
  on_device(device)->gated_activation_backward(act, act_input(dy), act_input(x), dx.kernel());
  return dx.finish();
}

// ---- softmax ----

Tensor softmax(const Tensor& x) {
  check_float("softmax", x, "x");
  OCTET_CHECK(x.dim() >= 1, "softmax: x must have at least one dimension, got ", x);
  ActOutput y(x.shape(), x.dtype(), x.device());
  on_device(x.device())->softmax(act_input(x), y.kernel());
  return y.finish();
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  constexpr const char* op = "softmax_backward";
  check_float(op, dy, "dy");
  check_float(op, y, "y");
  const Device device = op_device(op, {{dy, "dy"}, {y, "y"}});
  check_same_shape(op, dy, "dy", y, "y");
  OCTET_CHECK(y.dim() >= 1, op, ": y must have at least one dimension, got ", y);
  ActOutput dx(y.shape(), y.dtype(), device);
  on_device(device)->softmax_backward(act_input(dy), act_input(y), dx.kernel());
  return dx.finish();
}

// ---- norms ----

namespace {
void check_norm_input(const char* op, const Tensor& x, float eps) {
  check_float(op, x, "x");
  OCTET_CHECK(x.dim() >= 1 && x.cols() > 0, op, ": x must have a non-empty last dimension, got ",
              x);
  OCTET_CHECK(std::isfinite(eps) && eps >= 0.f, op, ": eps must be finite and >= 0, got ", eps);
}

NormForward norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                         float eps, ZeroCenteredGamma zc) {
  const bool layer = kind == NormKind::kLayerNorm;
  const char* op = layer ? "layernorm" : "rmsnorm";
  check_norm_input(op, x, eps);
  const Device device = op_device(op, {{x, "x"}, {gamma, "gamma"}, {beta, "beta"}});
  const Tensor g = channel_param(op, gamma, "gamma", x.cols());
  Tensor b;
  if (beta != nullptr) b = channel_param(op, *beta, "beta", x.cols());
  ActOutput y(x.shape(), x.dtype(), device);
  NormForward f{Tensor(), layer ? f32_like(x, {x.rows()}) : Tensor(), f32_like(x, {x.rows()})};
  on_device(device)->norm_forward(kind, act_input(x), g, beta ? &b : nullptr, eps, zc, y.kernel(),
                                  layer ? &f.mean : nullptr, f.rsigma);
  f.y = y.finish();
  return f;
}
}  // namespace

NormForward layernorm(const Tensor& x, const Tensor& gamma, const Tensor* beta, float eps,
                      ZeroCenteredGamma zc) {
  return norm_forward(NormKind::kLayerNorm, x, gamma, beta, eps, zc);
}

NormForward rmsnorm(const Tensor& x, const Tensor& gamma, float eps, ZeroCenteredGamma zc) {
  return norm_forward(NormKind::kRMSNorm, x, gamma, nullptr, eps, zc);
}

NormForward norm_fp8(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                     float eps, ZeroCenteredGamma zc, const Tensor& scale, Tensor* rowwise,
                     Tensor* columnwise, Tensor* amax, FP8CastCounts* counts) {
  const bool layer = kind == NormKind::kLayerNorm;
  const char* op = layer ? "layernorm_fp8" : "rmsnorm_fp8";
  check_norm_input(op, x, eps);
  const Device device = op_device(op, {{x, "x"},
                                       {gamma, "gamma"},
                                       {beta, "beta"},
                                       {scale, "scale"},
                                       {rowwise, "row-wise output"},
                                       {columnwise, "column-wise output"},
                                       {amax, "amax"}});
  const Tensor g = channel_param(op, gamma, "gamma", x.cols());
  Tensor b;
  if (beta != nullptr) b = channel_param(op, *beta, "beta", x.cols());
  OCTET_CHECK(rowwise != nullptr || columnwise != nullptr, op,
              ": asked for neither row-wise nor column-wise output");
  OCTET_CHECK(scale.defined() && scale.numel() == 1 && scale.dtype() == DType::kF32, op,
              ": scale must be a one-element f32 tensor, got ", scale);
  const DType fp8 = rowwise ? rowwise->dtype() : columnwise->dtype();
  OCTET_CHECK(is_fp8(fp8), op, ": output dtype must be e4m3 or e5m2, got ", fp8);
  if (rowwise != nullptr) {
    OCTET_CHECK(rowwise->shape() == x.shape() && rowwise->dtype() == fp8, op, ": row-wise output ",
                *rowwise, " must be ", fp8, " of shape ", shape_str(x.shape()));
  }
  if (columnwise != nullptr) {
    const Shape want = {x.cols(), x.rows()};
    OCTET_CHECK(columnwise->shape() == want && columnwise->dtype() == fp8, op,
                ": column-wise output ", *columnwise, " must be ", fp8, " of shape ",
                shape_str(want));
  }
  if (amax != nullptr) {
    OCTET_CHECK(amax->numel() == 1 && amax->dtype() == DType::kF32, op,
                ": amax must be a one-element f32 tensor, got ", *amax);
  }
  NormForward f{Tensor(), layer ? f32_like(x, {x.rows()}) : Tensor(), f32_like(x, {x.rows()})};
  on_device(device)->norm_quantize_fp8(kind, act_input(x), g, beta ? &b : nullptr, eps, zc, scale,
                                       rowwise, columnwise, amax, layer ? &f.mean : nullptr,
                                       f.rsigma, counts);
  for (Tensor* t : {rowwise, columnwise, amax}) {
    if (t != nullptr) t->bump_version();
  }
  return f;
}

namespace {
NormBackward norm_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor* mean,
                           const Tensor& rsigma, const Tensor& gamma, ZeroCenteredGamma zc) {
  check_norm_input(op, x, 0.f);
  check_float(op, dy, "dy");
  const Device device =
      op_device(op, {{x, "x"}, {dy, "dy"}, {mean, "mean"}, {rsigma, "rsigma"}, {gamma, "gamma"}});
  check_same_shape(op, dy, "dy", x, "x");
  if (mean != nullptr) check_row_stat(op, *mean, "mean", x.rows());
  check_row_stat(op, rsigma, "rsigma", x.rows());
  const Tensor g = channel_param(op, gamma, "gamma", x.cols());
  ActOutput dx(x.shape(), x.dtype(), device);
  NormBackward r{Tensor(), f32_like(x, {x.cols()}),
                 mean != nullptr ? f32_like(x, {x.cols()}) : Tensor()};
  on_device(device)->norm_backward(act_input(dy), act_input(x), mean, rsigma, g, zc, dx.kernel(),
                                   r.dgamma, mean != nullptr ? &r.dbeta : nullptr);
  r.dx = dx.finish();
  return r;
}
}  // namespace

NormBackward layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                const Tensor& rsigma, const Tensor& gamma, ZeroCenteredGamma zc) {
  return norm_backward("layernorm_backward", dy, x, &mean, rsigma, gamma, zc);
}

NormBackward rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& rsigma,
                              const Tensor& gamma, ZeroCenteredGamma zc) {
  return norm_backward("rmsnorm_backward", dy, x, nullptr, rsigma, gamma, zc);
}

// ---- embedding ----

Tensor embedding(const Tensor& table, const Tensor& ids) {
  constexpr const char* op = "embedding";
  check_float(op, table, "table");
  OCTET_CHECK(table.dim() == 2, op, ": table must be (V, C), got ", table);
  const Device device = op_device(op, {{table, "table"}, {ids, "ids"}});
  check_ids_in_range(op, host_indices(op, ids, "ids"), table.rows());
  Shape shape = ids.shape();
  shape.push_back(table.cols());
  ActOutput out(shape, table.dtype(), device);
  on_device(device)->embedding(table, ids, out.kernel());
  return out.finish();
}

Tensor embedding_backward(const Tensor& dy, const Tensor& ids, int64_t num_embeddings) {
  constexpr const char* op = "embedding_backward";
  check_float(op, dy, "dy");
  const Device device = op_device(op, {{dy, "dy"}, {ids, "ids"}});
  const std::vector<int64_t> idx = host_indices(op, ids, "ids");
  OCTET_CHECK(num_embeddings > 0, op, ": num_embeddings must be positive, got ", num_embeddings);
  OCTET_CHECK(dy.dim() == ids.dim() + 1 && leading(dy.shape()) == ids.shape(), op, ": dy ",
              shape_str(dy.shape()), " must be ids' shape ", shape_str(ids.shape()),
              " plus the embedding dimension");
  check_ids_in_range(op, idx, num_embeddings);
  Tensor dtable = f32_like(dy, {num_embeddings, dy.cols()});
  const Tensor dy2 = act_input(dy).reshape({dy.rows(), dy.cols()});
  on_device(device)->embedding_backward(dy2, ids, dtable);
  return dtable;
}

// ---- dropout ----

DropoutForward dropout(const Tensor& x, float p, Generator& gen) {
  check_float("dropout", x, "x");
  OCTET_CHECK(p >= 0.f && p <= 1.f, "dropout: p must be in [0, 1], got ", p);
  const RngState s = gen.state();
  ActOutput y(x.shape(), x.dtype(), x.device());
  DropoutForward f{Tensor(), Tensor::empty(x.shape(), DType::kU8, x.device())};
  on_device(x.device())->dropout(act_input(x), p, s.seed, s.offset, y.kernel(), f.mask);
  gen.set_state({s.seed, s.offset + static_cast<uint64_t>(x.numel())});
  f.y = y.finish();
  return f;
}

Tensor dropout_backward(const Tensor& dy, const Tensor& mask, float p) {
  constexpr const char* op = "dropout_backward";
  check_float(op, dy, "dy");
  check_defined(op, mask, "mask");
  const Device device = op_device(op, {{dy, "dy"}, {mask, "mask"}});
  OCTET_CHECK(mask.dtype() == DType::kU8, op, ": mask must be u8, got ", mask);
  check_same_shape(op, dy, "dy", mask, "mask");
  OCTET_CHECK(p >= 0.f && p <= 1.f, op, ": p must be in [0, 1], got ", p);
  ActOutput dx(dy.shape(), dy.dtype(), device);
  on_device(device)->dropout_backward(act_input(dy), mask, p, dx.kernel());
  return dx.finish();
}

// ---- causal attention ----

namespace {
// Checks qkv (B, T, (H + 2G) * D); returns C = H*D.
int64_t check_qkv(const char* op, const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale) {
  check_float(op, qkv, "qkv");
  OCTET_CHECK(heads >= 1, op, ": heads must be >= 1, got ", heads);
  OCTET_CHECK(kv_heads >= 1 && heads % kv_heads == 0, op, ": kv_heads ", kv_heads,
              " must divide heads ", heads);
  const int64_t slots = heads + 2 * kv_heads;
  OCTET_CHECK(qkv.dim() == 3 && qkv.size(2) > 0 && qkv.size(2) % slots == 0, op, ": qkv ",
              shape_str(qkv.shape()),
              " must be (B, T, (heads + 2 * kv_heads) * head_dim) with heads ", heads,
              " and kv_heads ", kv_heads);
  OCTET_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  return qkv.size(2) / slots * heads;
}
}  // namespace

AttentionForward causal_attention(const Tensor& qkv, int64_t heads, float scale) {
  return causal_attention(qkv, heads, heads, scale);
}

Tensor causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, float scale) {
  return causal_attention_backward(dout, qkv, out, lse, heads, heads, scale);
}

AttentionForward causal_attention(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale) {
  const int64_t C = check_qkv("causal_attention", qkv, heads, kv_heads, scale);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  ActOutput out({B, T, C}, qkv.dtype(), qkv.device());
  AttentionForward f{Tensor(), f32_like(qkv, {B, heads, T})};
  const auto backend = on_device(qkv.device());
  if (kv_heads == heads) {
    backend->causal_attention(act_input(qkv), heads, scale, out.kernel(), f.lse);
  } else if (!backend->grouped_attention(act_input(qkv), heads, kv_heads, scale, out.kernel(),
                                         f.lse)) {
    const Tensor packed = pack_heads(qkv, heads, kv_heads, Tensor());  // (B, T, 3, H, D)
    backend->causal_attention(act_input(packed), heads, scale, out.kernel(), f.lse);
  }
  f.out = out.finish();
  return f;
}

Tensor causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, int64_t kv_heads, float scale) {
  constexpr const char* op = "causal_attention_backward";
  const int64_t C = check_qkv(op, qkv, heads, kv_heads, scale);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  const Shape want = {B, T, C};
  check_float(op, dout, "dout");
  check_float(op, out, "out");
  check_defined(op, lse, "lse");
  const Device device = op_device(op, {{qkv, "qkv"}, {dout, "dout"}, {out, "out"}, {lse, "lse"}});
  OCTET_CHECK(dout.shape() == want && out.shape() == want, op, ": dout ", shape_str(dout.shape()),
              " and out ", shape_str(out.shape()), " must be ", shape_str(want), " for qkv ",
              shape_str(qkv.shape()));
  OCTET_CHECK(lse.dtype() == DType::kF32 && lse.shape() == Shape({B, heads, T}), op,
              ": lse must be f32 (", B, ", ", heads, ", ", T, "), got ", lse);
  const auto backend = on_device(device);
  if (kv_heads == heads) {
    ActOutput dqkv(qkv.shape(), qkv.dtype(), device);
    backend->causal_attention_backward(act_input(dout), act_input(qkv), act_input(out), lse, heads,
                                       scale, dqkv.kernel());
    return dqkv.finish();
  }
  {
    ActOutput dqkv(qkv.shape(), qkv.dtype(), device);
    if (backend->grouped_attention_backward(act_input(dout), act_input(qkv), act_input(out), lse,
                                            heads, kv_heads, scale, dqkv.kernel())) {
      return dqkv.finish();
    }
  }
  // The forward's repeated heads again, their gradient, and each group's sum.
  const Tensor packed = pack_heads(qkv, heads, kv_heads, Tensor());
  const Tensor dpacked = causal_attention_backward(dout, packed, out, lse, heads, heads, scale);
  return pack_heads_backward(dpacked, heads, kv_heads, Tensor());
}

// ---- rotary positions and grouped-query heads ----

namespace {
// Checks pack_heads' shapes for T positions of width (H + 2G) * D on `device`; returns D.
int64_t check_pack(const char* op, int64_t T, int64_t width, Device device, int64_t heads,
                   int64_t kv_heads, const Tensor& rope) {
  OCTET_CHECK(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0, op, ": kv_heads ", kv_heads,
              " must divide heads ", heads);
  OCTET_CHECK(width > 0 && width % (heads + 2 * kv_heads) == 0, op, ": width ", width,
              " must be (heads + 2 * kv_heads) * D with heads ", heads, " and kv_heads ", kv_heads);
  const int64_t D = width / (heads + 2 * kv_heads);
  if (rope.defined()) {
    OCTET_CHECK(D % 2 == 0, op, ": rotary positions need an even head dimension, got ", D);
    OCTET_CHECK(
        rope.dtype() == DType::kF32 && rope.dim() == 2 && rope.size(0) >= T && rope.size(1) == D,
        op, ": rope must be f32 (max_len >= ", T, ", ", D, "), got ", rope);
    OCTET_CHECK(rope.device() == device, op, ": rope is on ", rope.device(), ", the data on ",
                device);
  }
  return D;
}
}  // namespace

namespace {
// qkv (B, T, (H + 2G) * D) -> (B, T, (H + 2K) * D), K = packed_kv (H or G).
Tensor pack_to(const char* op, const Tensor& qkv, int64_t heads, int64_t kv_heads,
               const Tensor& rope, int64_t packed_kv) {
  check_float(op, qkv, "qkv");
  OCTET_CHECK(qkv.dim() == 3, op, ": qkv must be (B, T, (heads + 2 * kv_heads) * D), got ", qkv);
  const int64_t D = check_pack(op, qkv.size(1), qkv.size(2), qkv.device(), heads, kv_heads, rope);
  ActOutput out({qkv.size(0), qkv.size(1), (heads + 2 * packed_kv) * D}, qkv.dtype(), qkv.device());
  on_device(qkv.device())->pack_heads(act_input(qkv), heads, kv_heads, rope, out.kernel());
  return out.finish();
}

// dpacked (B, T, (H + 2K) * D), K = packed_kv -> dqkv (B, T, (H + 2G) * D).
Tensor pack_from(const char* op, const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                 const Tensor& rope, int64_t packed_kv) {
  check_float(op, dpacked, "dpacked");
  OCTET_CHECK(heads >= 1 && packed_kv >= 1, op, ": heads ", heads, " and kv_heads ", kv_heads,
              " must be >= 1");
  const int64_t slots = heads + 2 * packed_kv;
  OCTET_CHECK(dpacked.dim() == 3 && dpacked.size(2) > 0 && dpacked.size(2) % slots == 0, op,
              ": dpacked ", shape_str(dpacked.shape()), " must be (B, T, ", slots,
              " * D) with heads ", heads, " and kv_heads ", kv_heads);
  const int64_t D = dpacked.size(2) / slots;
  const Shape shape = {dpacked.size(0), dpacked.size(1), (heads + 2 * kv_heads) * D};
  check_pack(op, dpacked.size(1), shape[2], dpacked.device(), heads, kv_heads, rope);
  ActOutput dqkv(shape, dpacked.dtype(), dpacked.device());
  on_device(dpacked.device())
      ->pack_heads_backward(act_input(dpacked), heads, kv_heads, rope, dqkv.kernel());
  return dqkv.finish();
}
}  // namespace

Tensor pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope) {
  return pack_to("pack_heads", qkv, heads, kv_heads, rope, heads);
}

Tensor pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                           const Tensor& rope) {
  return pack_from("pack_heads_backward", dpacked, heads, kv_heads, rope, heads);
}

Tensor rope_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope) {
  return pack_to("rope_heads", qkv, heads, kv_heads, rope, kv_heads);
}

Tensor rope_heads_backward(const Tensor& dqkv, int64_t heads, int64_t kv_heads,
                           const Tensor& rope) {
  return pack_from("rope_heads_backward", dqkv, heads, kv_heads, rope, kv_heads);
}

Tensor rope_table(int64_t max_len, int64_t head_dim, double theta) {
  OCTET_CHECK(max_len > 0 && head_dim > 0 && head_dim % 2 == 0, "rope_table: max_len ", max_len,
              " must be > 0 and head_dim ", head_dim, " even and > 0");
  OCTET_CHECK(std::isfinite(theta) && theta > 1.0, "rope_table: theta ", theta,
              " must be finite and > 1");
  const int64_t half = head_dim / 2;
  Tensor table = Tensor::empty({max_len, head_dim}, DType::kF32);
  float* p = table.data_as<float>();
  for (int64_t i = 0; i < half; ++i) {
    const auto inv_freq = static_cast<float>(
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim)));
    for (int64_t t = 0; t < max_len; ++t) {
      const float angle = static_cast<float>(t) * inv_freq;
      p[t * head_dim + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      p[t * head_dim + half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return table;
}

// ---- attention over a key/value cache ----

namespace {
// Checks packed (N, T, (H + 2G) * D) against the caches (N, max_len, G, D) for rows
// [pos, pos + T); returns H.
int64_t check_cache(const char* op, const Tensor& packed, const Tensor& k_cache,
                    const Tensor& v_cache, int64_t pos) {
  check_float(op, packed, "packed");
  check_defined(op, k_cache, "k_cache");
  check_defined(op, v_cache, "v_cache");
  OCTET_CHECK(k_cache.dtype() == DType::kF32 && k_cache.dim() == 4 &&
                  v_cache.shape() == k_cache.shape() && v_cache.dtype() == DType::kF32 &&
                  k_cache.size(2) > 0 && k_cache.size(3) > 0,
              op, ": the caches must be f32 (N, max_len, G, D) of one shape, got ", k_cache,
              " and ", v_cache);
  const int64_t N = k_cache.size(0), len = k_cache.size(1), G = k_cache.size(2),
                D = k_cache.size(3);
  const int64_t width = packed.dim() == 3 ? packed.size(2) : 0;
  const int64_t H = width % D == 0 ? width / D - 2 * G : 0;
  OCTET_CHECK(packed.dim() == 3 && packed.size(0) == N && H >= G && H % G == 0, op, ": packed ",
              shape_str(packed.shape()), " must be (", N, ", T, (H + 2 * ", G, ") * ", D,
              ") with H a positive multiple of ", G, " for caches ", shape_str(k_cache.shape()));
  OCTET_CHECK(pos >= 0 && pos + packed.size(1) <= len, op, ": rows [", pos, ", ",
              pos + packed.size(1), ") do not fit a cache of ", len, " positions");
  op_device(op, {{packed, "packed"}, {k_cache, "k_cache"}, {v_cache, "v_cache"}});
  return H;
}
}  // namespace

void kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache, int64_t pos) {
  check_cache("kv_cache_write", packed, k_cache, v_cache, pos);
  on_device(packed.device())->kv_cache_write(act_input(packed), k_cache, v_cache, pos);
}

Tensor cached_attention(const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,
                        int64_t pos, float scale) {
  constexpr const char* op = "cached_attention";
  const int64_t heads = check_cache(op, packed, k_cache, v_cache, pos);
  OCTET_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  ActOutput out({packed.size(0), packed.size(1), heads * k_cache.size(3)}, packed.dtype(),
                packed.device());
  on_device(packed.device())
      ->cached_attention(act_input(packed), k_cache, v_cache, pos, scale, out.kernel());
  return out.finish();
}

// ---- cross-entropy ----

namespace {
void check_targets(const char* op, const Tensor& logits, const Tensor& targets,
                   int64_t ignore_index) {
  check_float(op, logits, "logits");
  OCTET_CHECK(logits.dim() >= 2 && logits.cols() > 0, op,
              ": logits must be (N, V) with V > 0, got ", logits);
  const std::vector<int64_t> t = host_indices(op, targets, "targets");
  OCTET_CHECK(targets.shape() == leading(logits.shape()), op, ": targets ",
              shape_str(targets.shape()), " must have logits' leading shape ",
              shape_str(leading(logits.shape())));
  const int64_t classes = logits.cols();
  for (size_t i = 0; i < t.size(); ++i) {
    OCTET_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < classes), op, ": target ", t[i],
                " at row ", i, " is out of range for ", classes,
                " classes (and is not ignore_index ", ignore_index, ")");
  }
}
}  // namespace

CrossEntropyForward cross_entropy(const Tensor& logits, const Tensor& targets,
                                  int64_t ignore_index) {
  constexpr const char* op = "cross_entropy";
  check_targets(op, logits, targets, ignore_index);
  const Device device = op_device(op, {{logits, "logits"}, {targets, "targets"}});
  Tensor lse = f32_like(logits, targets.shape());
  Tensor loss = f32_like(logits, {1});
  Tensor counted = Tensor::empty({1}, DType::kI64, device);
  on_device(device)->cross_entropy(act_input(logits), targets, ignore_index, loss, lse, counted);
  return {loss, lse, counted};
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, int64_t ignore_index, const Tensor& counted) {
  constexpr const char* op = "cross_entropy_backward";
  check_targets(op, logits, targets, ignore_index);
  check_defined(op, lse, "lse");
  check_float(op, dloss, "dloss");
  check_defined(op, counted, "counted");
  const Device device = op_device(op, {{logits, "logits"},
                                       {targets, "targets"},
                                       {lse, "lse"},
                                       {dloss, "dloss"},
                                       {counted, "counted"}});
  OCTET_CHECK(lse.dtype() == DType::kF32 && lse.shape() == targets.shape(), op,
              ": lse must be f32 with targets' shape ", shape_str(targets.shape()), ", got ", lse);
  OCTET_CHECK(dloss.numel() == 1, op, ": dloss must have one element, got ", dloss);
  OCTET_CHECK(counted.numel() == 1 && counted.dtype() == DType::kI64, op,
              ": counted must be the forward's (1,) i64 count, got ", counted);
  ActOutput dlogits(logits.shape(), logits.dtype(), device);
  on_device(device)->cross_entropy_backward(as_f32(dloss), counted, act_input(logits), targets, lse,
                                            ignore_index, dlogits.kernel());
  return dlogits.finish();
}

Tensor cross_entropy_backward(float dloss, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, int64_t ignore_index, int64_t count) {
  OCTET_CHECK(count >= 0, "cross_entropy_backward: count must be >= 0, got ", count);
  check_defined("cross_entropy_backward", logits, "logits");
  Tensor counted = Tensor::empty({1}, DType::kI64);
  *counted.data_as<int64_t>() = count;
  return cross_entropy_backward(Tensor::full({1}, dloss, DType::kF32, logits.device()), logits,
                                targets, lse, ignore_index, counted.to(logits.device()));
}

}  // namespace octet::ops
