// LayerNormMLP and LayerNormLinear: their autograd functions save exactly what backward reads
// (DESIGN.md "Details that matter"): input, norm weight, mean and rsigma, the quantized norm
// output (column-wise), the weights, and for the MLP the fc1 output and the quantized activation.
#include "modules/layernorm_mlp.h"

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/linear_gemm.h"

namespace octet::modules {
namespace {

using autograd::Context;
using autograd::Tensors;

// Each MLP activation: its model.activation name, the elementwise activation it applies (to the
// gate half when gated) and whether it is gated.
struct ActivationKind {
  MLPActivation mlp;
  std::string_view name;
  ops::Activation act;
  bool gated;
};

constexpr ActivationKind kActivationKinds[] = {
    {MLPActivation::kGelu, "gelu", ops::Activation::kGelu, false},
    {MLPActivation::kRelu, "relu", ops::Activation::kRelu, false},
    {MLPActivation::kSquaredRelu, "srelu", ops::Activation::kSquaredRelu, false},
    {MLPActivation::kSilu, "silu", ops::Activation::kSilu, false},
    {MLPActivation::kSwiglu, "swiglu", ops::Activation::kSilu, true},
    {MLPActivation::kGeglu, "geglu", ops::Activation::kGelu, true},
    {MLPActivation::kReglu, "reglu", ops::Activation::kRelu, true},
};

ActivationKind kind_of(MLPActivation a) {
  for (const ActivationKind& k : kActivationKinds) {
    if (k.mlp == a) return k;
  }
  OCTET_FAIL("unknown MLP activation ", static_cast<int>(a));
}

NormSpec spec_of(const NormOptions& norm, const Tensor& gamma, const Tensor& beta) {
  return {gamma, beta, norm.kind, norm.eps, norm.zero_centered_gamma};
}

bool needs_grad(const Tensor& t) { return autograd::requires_grad(t); }

struct LayerNormMLPFn {
  static constexpr const char* kName = "LayerNormMLP";
  NormOptions norm;
  ActivationKind act;
  Recompute recompute = Recompute::kNo;
  LinearGemm fc1, fc2;  // the forward's quantizers and what each GEMM's backward needs
  Operand w1, w2;       // this forward's weight operands
  bool need_norm_grad = false, need_db1 = false, need_db2 = false;
  // Recompute with FP8: the quantizers of the two GEMM inputs, frozen at the forward's scales.
  std::shared_ptr<const Quantizer> frozen1, frozen2;
  DType wgrad_dtype = DType::kF32;

  // Saved fields besides the GEMMs' own (fc1/fc2 input and weight); undefined when unused.
  Operand x, gamma, beta;  // the norm's backward (and, with beta, the recompute)
  Operand mean, rsigma;    // the norm's statistics (not with recompute)
  Operand b1;              // recompute: fc1's bias
  Operand w1_full;         // recompute: fc1's whole weight (its fprop runs again)
  Operand h1;              // fc1's output, for the activation's backward (not with recompute)
  SavedOperands saved;
  std::vector<Operand*> saved_fields() {
    return {&x,       &gamma,       &beta,         &mean, &rsigma,      &b1,
            &w1_full, &fc1.input(), &fc1.weight(), &h1,   &fc2.input(), &fc2.weight()};
  }

  struct Front {  // norm -> fc1 -> activation, and the casts for the two GEMMs
    ops::NormForward n;
    Operand ln, h1, a;
  };

  Front front(const Tensor& xv, const Tensor& g, const Tensor& b, const Tensor& bias1,
              const Operand& w, bool recomputing) {
    Front f;
    // The norm output goes straight to FP8 (delayed scaling: in the norm's own pass); no
    // high-precision copy of it is kept.
    const Quantizer* q1 = recomputing ? frozen1.get() : fc1.input_quantizer();
    f.ln = norm_operand(xv, spec_of(norm, g, b), q1, fc1.input_usage(),
                        recomputing ? AmaxRecording::kSkip : fp8_amax_recording(), f.n);
    Tensor pre = fc1.run_fprop(f.ln, w, bias1.defined() ? &bias1 : nullptr, xv.dtype());
    Tensor a = act.gated ? ops::gated_activation(act.act, pre) : ops::activation(act.act, pre);
    f.h1 = {pre, nullptr};
    if (!recomputing) {
      f.a = fc2.cast_input(a);
    } else {
      f.a = frozen2 ? cast_with(frozen2.get(), a, fc2.input_usage()) : Operand{a, nullptr};
    }
    return f;
  }

  Tensors forward(Context& ctx, const Tensor& xv, const Tensor& g, const Tensor& b,
                  const Tensor& w1_leaf, const Tensor& bias1, const Tensor& w2_leaf,
                  const Tensor& bias2) {
    const bool rec = ctx.recording();
    wgrad_dtype = wgrad_dtype_for(w1_leaf);  // both weights have the module's dtype
    need_norm_grad = rec && (needs_grad(xv) || needs_grad(g) || needs_grad(b));
    need_db1 = rec && needs_grad(bias1);
    need_db2 = rec && needs_grad(bias2);
    // fc1's output gradient is needed when anything before fc2 needs a gradient.
    const bool need_dh1 = need_norm_grad || (rec && needs_grad(w1_leaf)) || need_db1;
    fc1.set_needs(need_norm_grad, rec && needs_grad(w1_leaf));
    fc2.set_needs(need_dh1, rec && needs_grad(w2_leaf));
    OCTET_CHECK(!(rec && recompute == Recompute::kYes && fc1.backward_high_precision()),
                "LayerNormMLP: a high-precision backward (fp8.high_precision_backward) cannot "
                "recompute the MLP (Recompute::kYes): its forward casts are not frozen");
    if (rec && recompute == Recompute::kYes && fc1.input_quantizer() != nullptr) {
      frozen1 = fc1.input_quantizer()->frozen();
      frozen2 = fc2.input_quantizer()->frozen();
    }
    Front f = front(xv, g, b, bias1, w1, false);
    Tensor y = fc2.forward(f.a, std::move(w2), bias2.defined() ? &bias2 : nullptr, xv.dtype(), rec);
    if (rec) {
      if (recompute == Recompute::kYes) {
        // Only the inputs: norm, fc1 and the activation run again in backward.
        x = {xv, nullptr};
        gamma = {g, nullptr};
        beta = {b, nullptr};
        b1 = {bias1, nullptr};
        w1_full = w1;
        fc2.input() = Operand{};
      } else {
        if (need_norm_grad) {
          x = {xv, nullptr};
          gamma = {g, nullptr};
          mean = {f.n.mean, nullptr};
          rsigma = {f.n.rsigma, nullptr};
        }
        fc1.keep_for_backward(f.ln, w1);
        if (need_dh1) h1 = f.h1;
      }
      saved.save(ctx, saved_fields());
    }
    w1 = Operand{};
    return {y};
  }

  Tensors backward(Context& ctx, const Tensors& grads) {
    const Tensor& dy = grads[0];
    const auto restored = saved.restore(ctx, saved_fields());
    ops::NormForward stats{Tensor(), mean.hp, rsigma.hp};
    if (recompute == Recompute::kYes) {
      Front f = front(x.hp, gamma.hp, beta.hp, b1.hp, w1_full, true);
      stats = f.n;
      // Untrimmed: the whole weight stays with the context for a retained graph's next recompute.
      fc1.input() = f.ln;
      fc1.weight() = w1_full;
      fc2.input() = f.a;
      h1 = f.h1;
    }
    const LinearGemm::Grads g2 = fc2.backward(dy, dy.dtype(), wgrad_dtype);
    const Tensor db2 = need_db2 ? ops::sum_rows(dy) : Tensor();
    Tensor dh1;
    if (g2.dx.defined()) {
      dh1 = act.gated ? ops::gated_activation_backward(act.act, g2.dx, h1.hp)
                      : ops::activation_backward(act.act, g2.dx, h1.hp);
    }
    LinearGemm::Grads g1;
    if (dh1.defined()) g1 = fc1.backward(dh1, dy.dtype(), wgrad_dtype);
    const Tensor db1 = need_db1 ? ops::sum_rows(dh1) : Tensor();
    ops::NormBackward nb;
    if (need_norm_grad) nb = norm_backward(g1.dx, x.hp, stats, gamma.hp, norm);
    return {nb.dx, nb.dgamma, nb.dbeta, g1.dw, db1, g2.dw, db2};
  }
};

struct LayerNormLinearFn {
  static constexpr const char* kName = "LayerNormLinear";
  NormOptions norm;
  LinearGemm gemm;
  Operand w;  // this forward's weight operand
  bool need_norm_grad = false, need_db = false;
  ReturnNormOutput return_norm = ReturnNormOutput::kNo;
  DType wgrad_dtype = DType::kF32;

  // Saved fields besides the GEMM's own (its input and weight): the norm's backward.
  Operand x, gamma, mean, rsigma;
  SavedOperands saved;
  std::vector<Operand*> saved_fields() {
    return {&x, &gamma, &mean, &rsigma, &gemm.input(), &gemm.weight()};
  }

  Tensors forward(Context& ctx, const Tensor& xv, const Tensor& g, const Tensor& b,
                  const Tensor& w_leaf, const Tensor& bias) {
    const bool rec = ctx.recording();
    wgrad_dtype = wgrad_dtype_for(w_leaf);
    need_norm_grad = rec && (needs_grad(xv) || needs_grad(g) || needs_grad(b));
    need_db = rec && needs_grad(bias);
    gemm.set_needs(need_norm_grad, rec && needs_grad(w_leaf));
    ops::NormForward n;
    Operand ln;
    Tensor ln_out;
    if (return_norm == ReturnNormOutput::kYes) {
      // The caller wants the high-precision norm output too: normalize, then cast it.
      n = norm_forward(xv, NormParams{g, b}, norm);
      ln_out = n.y;
      ln = gemm.cast_input(n.y);
    } else {
      ln = norm_operand(xv, spec_of(norm, g, b), gemm.input_quantizer(), gemm.input_usage(),
                        fp8_amax_recording(), n);
    }
    Tensor y = gemm.forward(std::move(ln), std::move(w), bias.defined() ? &bias : nullptr,
                            xv.dtype(), rec);
    if (rec) {
      if (need_norm_grad) {
        x = {xv, nullptr};
        gamma = {g, nullptr};
        mean = {n.mean, nullptr};
        rsigma = {n.rsigma, nullptr};
      }
      saved.save(ctx, saved_fields());
    }
    if (return_norm == ReturnNormOutput::kYes) return {y, ln_out};
    return {y};
  }

  Tensors backward(Context& ctx, const Tensors& grads) {
    const Tensor& dy = grads[0];
    const Tensor d_norm_out = grads.size() > 1 ? grads[1] : Tensor();
    const auto restored = saved.restore(ctx, saved_fields());
    // Either output may come without a gradient (only the norm output may be used).
    Tensor dln = d_norm_out, dw, db;
    if (dy.defined()) {
      const LinearGemm::Grads gr = gemm.backward(dy, dy.dtype(), wgrad_dtype);
      if (gr.dx.defined()) dln = dln.defined() ? ops::add(gr.dx, dln) : gr.dx;
      dw = gr.dw;
      db = need_db ? ops::sum_rows(dy) : Tensor();
    }
    ops::NormBackward nb;
    if (need_norm_grad && dln.defined()) {
      const ops::NormForward stats{Tensor(), mean.hp, rsigma.hp};
      nb = norm_backward(dln, x.hp, stats, gamma.hp, norm);
    }
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
  for (const ActivationKind& k : kActivationKinds) {
    if (k.name == name) return k.mlp;
  }
  OCTET_FAIL("unknown MLP activation \"", name,
             "\": expected gelu, relu, srelu, silu, swiglu, geglu or reglu");
}

std::string_view mlp_activation_name(MLPActivation a) { return kind_of(a).name; }

LayerNormMLP::LayerNormMLP(int64_t hidden, int64_t ffn, LayerNormMLPOptions options)
    : FP8Module("LayerNormMLP", 2, options.linear.recipe, options.linear.seed),
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
  register_gemm_weight("fc1.weight", w1_, 0);
  if (b1_.defined()) register_parameter("fc1.bias", &b1_);
  register_gemm_weight("fc2.weight", w2_, 1);
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
  const bool fp8 = fp8_enabled() && options_.linear.precision == Precision::kFP8;
  if (fp8) {
    check_gemm_shapes(fp8_recipe(), 0, "LayerNormMLP fc1", rows, hidden_, fc1_out);
    check_gemm_shapes(fp8_recipe(), 1, "LayerNormMLP fc2", rows, ffn_, hidden_);
    fp8_->begin_forward(fp8_recipe(), x.device());
    fn.fc1 = LinearGemm(fp8_->gemm_quantizers(0));
    fn.fc2 = LinearGemm(fp8_->gemm_quantizers(1));
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
    : FP8Module("LayerNormLinear", 1, options.linear.recipe, options.linear.seed),
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
  register_gemm_weight("weight", w_, 0);
  if (b_.defined()) register_parameter("bias", &b_);
}

std::pair<Tensor, Tensor> LayerNormLinear::forward_with_norm_output(const Tensor& x,
                                                                    FirstMicrobatch first) {
  OCTET_CHECK(x.dim() >= 1 && x.cols() == in_, "LayerNormLinear(", in_, " -> ", out_, "): input ",
              x, " must end in ", in_);
  LayerNormLinearFn fn;
  fn.norm = options_.norm;
  fn.return_norm = options_.return_norm_output;
  const bool fp8 = fp8_enabled() && options_.linear.precision == Precision::kFP8;
  if (fp8) {
    check_gemm_shapes(fp8_recipe(), 0, "LayerNormLinear", x.rows(), in_, out_);
    fp8_->begin_forward(fp8_recipe(), x.device());
    fn.gemm = LinearGemm(fp8_->gemm_quantizers(0));
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
