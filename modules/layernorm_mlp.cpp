// LayerNormMLP and LayerNormLinear: their autograd functions save exactly what backward reads
// (DESIGN.md "Details that matter"): input, norm weight, mean and rsigma, the quantized norm
// output (column-wise), the weights, and for the MLP the fc1 output and the quantized activation.
#include "modules/layernorm_mlp.h"

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"

namespace octet::modules {
namespace {

using autograd::Context;
using autograd::Tensors;

struct ActivationKind {
  ops::Activation act;
  bool gated;
};

ActivationKind kind_of(MLPActivation a) {
  switch (a) {
    case MLPActivation::kGelu:
      return {ops::Activation::kGelu, false};
    case MLPActivation::kRelu:
      return {ops::Activation::kRelu, false};
    case MLPActivation::kSquaredRelu:
      return {ops::Activation::kSquaredRelu, false};
    case MLPActivation::kSilu:
      return {ops::Activation::kSilu, false};
    case MLPActivation::kSwiglu:
      return {ops::Activation::kSilu, true};
    case MLPActivation::kGeglu:
      return {ops::Activation::kGelu, true};
    case MLPActivation::kReglu:
      return {ops::Activation::kRelu, true};
  }
  OCTET_FAIL("unknown MLP activation ", static_cast<int>(a));
}

Usage usage_for(bool rowwise, bool columnwise) {
  return (rowwise ? Usage::kRowwise : Usage::kNone) |
         (columnwise ? Usage::kColumnwise : Usage::kNone);
}

// An internal quantized weight keeps only what dgrad reads once fprop is done.
void keep_for_dgrad(Operand& w) {
  if (w.quantized() && w.q->ownership() == Ownership::kInternal) keep_only(w, Usage::kColumnwise);
}

ScalingMode mode_of(const FP8State& s) {
  return s.recipe().kind == RecipeKind::kMXFP8 ? ScalingMode::kMXFP8 : ScalingMode::kPerTensor;
}

void begin_fp8(FP8State& state, const char* module, Device device,
               std::initializer_list<Shape> gemm_shapes) {
  state.begin_forward(fp8_recipe(), device);
  int i = 0;
  for (const Shape& s : gemm_shapes) {
    ops::check_fp8_gemm_shape(mode_of(state), s,
                              std::string(module) + " GEMM operand #" + std::to_string(i++));
  }
}

NormSpec spec_of(const NormOptions& norm, const Tensor& gamma, const Tensor& beta) {
  return {gamma, beta, norm.kind, norm.eps, norm.zero_centered_gamma};
}

struct LayerNormMLPFn {
  static constexpr const char* kName = "LayerNormMLP";
  NormOptions norm;
  ActivationKind act;
  Recompute recompute = Recompute::kNo;
  std::shared_ptr<FP8State> fp8;  // null: high precision
  Operand w1, w2;
  bool has_b1 = false, has_b2 = false;
  // Recompute with FP8: the quantizers of the two GEMM inputs, frozen at the forward's scales.
  std::shared_ptr<const Quantizer> frozen1, frozen2;
  SavedOperands saved;
  DType wgrad_dtype = DType::kF32;

  struct Front {  // norm -> fc1 -> activation, and the casts for the two GEMMs
    ops::NormForward n;
    Operand ln, h1_hp, a;
  };

  Front front(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& b1,
              bool for_backward, bool recomputing) {
    Front f;
    // The norm output goes straight to FP8 (delayed scaling: in the norm's own pass); no
    // high-precision copy of it is kept.
    const Quantizer* q1 = recomputing ? frozen1.get() : input_quantizer(0);
    f.ln = norm_operand(x, spec_of(norm, gamma, beta), q1, usage_for(true, for_backward),
                        recomputing ? AmaxRecording::kSkip : fp8_amax_recording(), f.n);
    Tensor h1 = gemm_fprop(f.ln, w1, b1.defined() ? &b1 : nullptr, x.dtype());
    Tensor a = act.gated ? ops::gated_activation(act.act, h1) : ops::activation(act.act, h1);
    f.h1_hp = {h1, nullptr};
    const Usage a_usage = usage_for(true, for_backward);
    f.a = recomputing ? (frozen2 ? cast_with(frozen2.get(), a, a_usage) : Operand{a, nullptr})
                      : cast_input(fp8.get(), 1, a, a_usage);
    return f;
  }

  const Quantizer* input_quantizer(int gemm) const {
    return fp8 ? fp8->quantizer(forward_slot(gemm, ForwardTensor::kInput)) : nullptr;
  }

  Tensors forward(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  const Tensor& w1_leaf, const Tensor& b1, const Tensor& w2_leaf,
                  const Tensor& b2) {
    (void)w1_leaf;
    (void)w2_leaf;
    const bool rec = ctx.recording();
    if (rec && recompute == Recompute::kYes && fp8) {
      frozen1 = fp8->frozen(forward_slot(0, ForwardTensor::kInput));
      frozen2 = fp8->frozen(forward_slot(1, ForwardTensor::kInput));
    }
    Front f = front(x, gamma, beta, b1, rec, false);
    Tensor y = gemm_fprop(f.a, w2, b2.defined() ? &b2 : nullptr, x.dtype());
    if (rec) {
      saved.save(ctx, {x, nullptr});
      saved.save(ctx, {gamma, nullptr});
      saved.save(ctx, {beta, nullptr});
      saved.save(ctx, {b1, nullptr});
      if (recompute == Recompute::kYes) {
        // Weights keep both usages: the recompute runs fc1 forward again.
        saved.save(ctx, w1);
        keep_for_dgrad(w2);
        saved.save(ctx, w2);
      } else {
        keep_only(f.ln, Usage::kColumnwise);
        keep_only(f.a, Usage::kColumnwise);
        keep_for_dgrad(w1);
        keep_for_dgrad(w2);
        saved.save(ctx, {f.n.mean, nullptr});
        saved.save(ctx, {f.n.rsigma, nullptr});
        saved.save(ctx, f.ln);
        saved.save(ctx, w1);
        saved.save(ctx, f.h1_hp);
        saved.save(ctx, f.a);
        saved.save(ctx, w2);
      }
    }
    w1 = w2 = Operand{};
    return {y};
  }

  Tensors backward(Context& ctx, const Tensors& grads) {
    const Tensor& dy = grads[0];
    std::vector<Operand> s = saved.restore(ctx);
    const Tensor x = s[0].hp, gamma = s[1].hp, beta = s[2].hp, b1 = s[3].hp;
    Operand ln, h1, a, w1o, w2o;
    ops::NormForward stats;
    if (recompute == Recompute::kYes) {
      w1o = s[4];
      w2o = s[5];
      w1 = w1o;
      Front f = front(x, gamma, beta, b1, true, true);
      w1 = Operand{};
      stats = f.n;
      ln = f.ln;
      h1 = f.h1_hp;
      a = f.a;
    } else {
      stats.mean = s[4].hp;
      stats.rsigma = s[5].hp;
      ln = s[6];
      w1o = s[7];
      h1 = s[8];
      a = s[9];
      w2o = s[10];
    }
    const Operand dyo = cast_grad(fp8.get(), 1, dy, Usage::kBoth);
    const Tensor da = gemm_dgrad(dyo, w2o, dy.dtype());
    const Tensor dw2 = gemm_wgrad(dyo, a, wgrad_dtype);
    const Tensor db2 = has_b2 ? ops::sum_rows(dy) : Tensor();
    const Tensor dh1 = act.gated ? ops::gated_activation_backward(act.act, da, h1.hp)
                                 : ops::activation_backward(act.act, da, h1.hp);
    const Operand dh1o = cast_grad(fp8.get(), 0, dh1, Usage::kBoth);
    const Tensor dln = gemm_dgrad(dh1o, w1o, dy.dtype());
    const Tensor dw1 = gemm_wgrad(dh1o, ln, wgrad_dtype);
    const Tensor db1 = has_b1 ? ops::sum_rows(dh1) : Tensor();
    const ops::NormBackward nb = norm_backward(dln, x, stats, gamma, norm);
    if (fp8) fp8->schedule_backward_update();
    return {nb.dx, nb.dgamma, nb.dbeta, dw1, db1, dw2, db2};
  }
};

struct LayerNormLinearFn {
  static constexpr const char* kName = "LayerNormLinear";
  NormOptions norm;
  std::shared_ptr<FP8State> fp8;
  Operand w;
  bool has_bias = false;
  ReturnNormOutput return_norm = ReturnNormOutput::kNo;
  SavedOperands saved;
  DType wgrad_dtype = DType::kF32;

  Tensors forward(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  const Tensor& w_leaf, const Tensor& b) {
    (void)w_leaf;
    const bool rec = ctx.recording();
    ops::NormForward n;
    Operand ln;
    Tensor ln_out;
    if (return_norm == ReturnNormOutput::kYes) {
      // The caller wants the high-precision norm output too: normalize, then cast it.
      n = norm_forward(x, NormParams{gamma, beta}, norm);
      ln_out = n.y;
      ln = cast_input(fp8.get(), 0, n.y, usage_for(true, rec));
    } else {
      const Quantizer* q = fp8 ? fp8->quantizer(forward_slot(0, ForwardTensor::kInput)) : nullptr;
      ln = norm_operand(x, spec_of(norm, gamma, beta), q, usage_for(true, rec),
                        fp8_amax_recording(), n);
    }
    Tensor y = gemm_fprop(ln, w, b.defined() ? &b : nullptr, x.dtype());
    if (rec) {
      keep_only(ln, Usage::kColumnwise);
      keep_for_dgrad(w);
      saved.save(ctx, {x, nullptr});
      saved.save(ctx, {gamma, nullptr});
      saved.save(ctx, {n.mean, nullptr});
      saved.save(ctx, {n.rsigma, nullptr});
      saved.save(ctx, ln);
      saved.save(ctx, w);
    }
    w = Operand{};
    if (return_norm == ReturnNormOutput::kYes) return {y, ln_out};
    return {y};
  }

  Tensors backward(Context& ctx, const Tensors& grads) {
    const Tensor& dy = grads[0];
    const Tensor d_norm_out = grads.size() > 1 ? grads[1] : Tensor();
    std::vector<Operand> s = saved.restore(ctx);
    ops::NormForward stats;
    stats.mean = s[2].hp;
    stats.rsigma = s[3].hp;
    // Either output may come without a gradient (only the norm output may be used).
    Tensor dln = d_norm_out, dw, db;
    if (dy.defined()) {
      const Operand dyo = cast_grad(fp8.get(), 0, dy, Usage::kBoth);
      const Tensor through_linear = gemm_dgrad(dyo, s[5], dy.dtype());
      dln = dln.defined() ? ops::add(through_linear, dln) : through_linear;
      dw = gemm_wgrad(dyo, s[4], wgrad_dtype);
      db = has_bias ? ops::sum_rows(dy) : Tensor();
      if (fp8) fp8->schedule_backward_update();
    }
    const ops::NormBackward nb = norm_backward(dln, s[0].hp, stats, s[1].hp, norm);
    return {nb.dx, nb.dgamma, nb.dbeta, dw, db};
  }
};

Tensor make_bias(int64_t n, const LinearOptions& options) {
  if (options.bias == Bias::kNo) return Tensor();
  MemTagScope tag(MemTag::kWeights);
  Tensor b = Tensor::zeros({n}, options.dtype);
  autograd::set_requires_grad(b);
  return b;
}

}  // namespace

MLPActivation mlp_activation_from_name(std::string_view name) {
  static constexpr std::pair<std::string_view, MLPActivation> kNames[] = {
      {"gelu", MLPActivation::kGelu},         {"relu", MLPActivation::kRelu},
      {"srelu", MLPActivation::kSquaredRelu}, {"silu", MLPActivation::kSilu},
      {"swiglu", MLPActivation::kSwiglu},     {"geglu", MLPActivation::kGeglu},
      {"reglu", MLPActivation::kReglu}};
  for (const auto& [n, a] : kNames) {
    if (n == name) return a;
  }
  OCTET_FAIL("unknown MLP activation \"", name,
             "\": expected gelu, relu, srelu, silu, swiglu, geglu or reglu");
}

LayerNormMLP::LayerNormMLP(int64_t hidden, int64_t ffn, LayerNormMLPOptions options)
    : FP8Module("LayerNormMLP", 2, options.linear.recipe),
      hidden_(hidden),
      ffn_(ffn),
      options_(options) {
  OCTET_CHECK(hidden > 0 && ffn > 0, "LayerNormMLP(", hidden, ", ", ffn,
              "): sizes must be positive");
  norm_.init(hidden, options_.norm);
  const int64_t fc1_out = kind_of(options_.activation).gated ? 2 * ffn : ffn;
  w1_.init(fc1_out, hidden, options_.linear, *fp8_, 0, options_.linear.seed);
  w2_.init(hidden, ffn, options_.linear, *fp8_, 1, options_.linear.seed + 1);
  b1_ = make_bias(fc1_out, options_.linear);
  b2_ = make_bias(hidden, options_.linear);
  register_parameter("norm.weight", &norm_.gamma);
  if (norm_.beta.defined()) register_parameter("norm.bias", &norm_.beta);
  register_weight("fc1.weight", w1_);
  if (b1_.defined()) register_parameter("fc1.bias", &b1_);
  register_weight("fc2.weight", w2_);
  if (b2_.defined()) register_parameter("fc2.bias", &b2_);
}

Tensor LayerNormMLP::forward(const Tensor& x, FirstMicrobatch first) {
  OCTET_CHECK(x.dim() >= 1 && x.cols() == hidden_, "LayerNormMLP(", hidden_, "): input ", x,
              " must end in ", hidden_);
  const ActivationKind act = kind_of(options_.activation);
  const int64_t rows = x.rows(), fc1_out = act.gated ? 2 * ffn_ : ffn_;
  LayerNormMLPFn fn;
  fn.norm = options_.norm;
  fn.act = act;
  fn.recompute = options_.recompute;
  fn.has_b1 = b1_.defined();
  fn.has_b2 = b2_.defined();
  const bool fp8 = fp8_enabled();
  if (fp8) {
    begin_fp8(*fp8_, "LayerNormMLP", x.device(),
              {{rows, hidden_},
               {fc1_out, hidden_},
               {rows, fc1_out},
               {rows, ffn_},
               {hidden_, ffn_},
               {rows, hidden_}});
    fn.fp8 = fp8_;
  } else {
    OCTET_CHECK(!w1_.is_fp8(), "LayerNormMLP with FP8 primary weights must run in an FP8 scope");
  }
  fn.w1 = w1_.operand(cache1_, fp8 ? fp8_.get() : nullptr, 0, first);
  fn.w2 = w2_.operand(cache2_, fp8 ? fp8_.get() : nullptr, 1, first);
  return autograd::apply(std::move(fn), x, norm_.gamma, norm_.beta, w1_.leaf(), b1_, w2_.leaf(),
                         b2_)[0];
}

LayerNormLinear::LayerNormLinear(int64_t in_features, int64_t out_features,
                                 LayerNormLinearOptions options)
    : FP8Module("LayerNormLinear", 1, options.linear.recipe),
      in_(in_features),
      out_(out_features),
      options_(options) {
  OCTET_CHECK(in_features > 0 && out_features > 0, "LayerNormLinear(", in_features, ", ",
              out_features, "): sizes must be positive");
  norm_.init(in_features, options_.norm);
  w_.init(out_features, in_features, options_.linear, *fp8_, 0, options_.linear.seed);
  b_ = make_bias(out_features, options_.linear);
  register_parameter("norm.weight", &norm_.gamma);
  if (norm_.beta.defined()) register_parameter("norm.bias", &norm_.beta);
  register_weight("weight", w_);
  if (b_.defined()) register_parameter("bias", &b_);
}

std::pair<Tensor, Tensor> LayerNormLinear::forward_with_norm_output(const Tensor& x,
                                                                    FirstMicrobatch first) {
  OCTET_CHECK(x.dim() >= 1 && x.cols() == in_, "LayerNormLinear(", in_, " -> ", out_, "): input ",
              x, " must end in ", in_);
  LayerNormLinearFn fn;
  fn.norm = options_.norm;
  fn.has_bias = b_.defined();
  fn.return_norm = options_.return_norm_output;
  const bool fp8 = fp8_enabled();
  if (fp8) {
    begin_fp8(*fp8_, "LayerNormLinear", x.device(),
              {{x.rows(), in_}, {out_, in_}, {x.rows(), out_}});
    fn.fp8 = fp8_;
  } else {
    OCTET_CHECK(!w_.is_fp8(), "LayerNormLinear with FP8 primary weights must run in an FP8 scope");
  }
  fn.w = w_.operand(cache_, fp8 ? fp8_.get() : nullptr, 0, first);
  Tensors out = autograd::apply(std::move(fn), x, norm_.gamma, norm_.beta, w_.leaf(), b_);
  return {out[0], out.size() > 1 ? out[1] : Tensor()};
}

Tensor LayerNormLinear::forward(const Tensor& x, FirstMicrobatch first) {
  return forward_with_norm_output(x, first).first;
}

}  // namespace octet::modules
