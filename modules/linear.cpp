// Linear and the weight storage shared by the FP8 modules.
#include "modules/linear.h"

#include <functional>

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/linear_gemm.h"

namespace octet::modules {

void WeightStorage::init(int64_t out, int64_t in, const LinearOptions& options, FP8State& state,
                         int gemm, uint64_t seed) {
  Tensor value;
  {
    MemTagScope tag(MemTag::kWeights);
    value = Tensor::empty({out, in}, DType::kF32);
    Generator gen(seed);
    gen.fill_normal(value, 0.f, options.init_std);
  }
  if (options.fp8_primary_weights == FP8PrimaryWeights::kNo) {
    hp = options.dtype == DType::kF32 ? value : ops::cast(value, options.dtype);
    if (hp.storage()->tag() != MemTag::kWeights) hp.storage()->set_tag(MemTag::kWeights);
    autograd::set_requires_grad(hp);
    return;
  }
  OCTET_CHECK(options.recipe.has_value(),
              "FP8 primary weights need the recipe at construction (LinearOptions::recipe)");
  OCTET_CHECK(options.precision == Precision::kFP8,
              "FP8 primary weights in a module kept in high precision (Precision::kHigh)");
  state.lock_recipe();
  const Quantizer* q = state.quantizer(forward_slot(gemm, ForwardTensor::kWeight));
  {
    MemTagScope tag(MemTag::kWeights);
    // The initial cast uses a scratch amax: the weight slot's history stays zero, like every
    // other slot's, until the first optimizer step writes the new weight in place.
    fp8 = q->quantize(value, FP8Weight::needed_usage(q), Ownership::kOwned, AmaxRecording::kSkip);
  }
  // The gradient's leaf is a handle on the row-wise data (same storage, own autograd state).
  fp8_leaf = fp8->rowwise_data();
  if (fp8_leaf.shape() == fp8->shape()) {
    autograd::set_requires_grad(fp8_leaf);
  } else {
    // Packed 4-bit data: the leaf's gradient has the weight's logical shape.
    autograd::set_requires_grad_packed(fp8_leaf, fp8->shape());
  }
  // Inference (built without gradients) keeps no f32 copy; training hands it to the optimizer.
  if (autograd::grad_enabled()) initial_master = value;
}

Operand WeightStorage::operand(FP8Weight& cache, FP8State* state, int gemm, FirstMicrobatch first) {
  if (is_fp8()) {
    OCTET_CHECK(state == nullptr || !fp8_forward_high_precision(),
                "a high-precision forward (fp8.high_precision_after) needs high-precision weights; "
                "this module has FP8 primary weights (model.fp8_primary_weights)");
    OCTET_CHECK(state == nullptr || !fp8_backward_high_precision(),
                "a high-precision backward (fp8.high_precision_backward) needs high-precision "
                "weights; this module has FP8 primary weights (model.fp8_primary_weights)");
    return FP8Weight::primary(fp8, initial_master.defined() ? &initial_master : nullptr);
  }
  return cache.get(hp, state, gemm, first);
}

namespace {

using autograd::Context;
using autograd::Tensors;

struct LinearFn {
  static constexpr const char* kName = "Linear";
  LinearGemm gemm;
  Operand weight;  // this forward's weight operand
  bool has_bias = false;
  DType weight_grad_dtype = DType::kF32;
  SavedOperands saved;
  std::vector<Operand*> saved_fields() { return {&gemm.input(), &gemm.weight()}; }

  Tensor forward(Context& ctx, const Tensor& x, const Tensor& w_leaf, const Tensor& bias) {
    const bool rec = ctx.recording();
    gemm.set_needs(rec && autograd::requires_grad(x), rec && autograd::requires_grad(w_leaf));
    weight_grad_dtype = wgrad_dtype_for(w_leaf);
    // The input is cast once, with column-wise data only when wgrad will need it.
    Tensor y = gemm.forward(gemm.cast_input(x), std::move(weight), bias.defined() ? &bias : nullptr,
                            x.dtype(), rec);
    saved.save(ctx, saved_fields());
    return y;
  }

  Tensors backward(Context& ctx, const Tensors& grads) {
    const Tensor& dy = grads[0];
    const auto restored = saved.restore(ctx, saved_fields());
    const LinearGemm::Grads g = gemm.backward(dy, dy.dtype(), weight_grad_dtype);
    Tensor db = has_bias ? ops::sum_rows(dy) : Tensor();
    return {g.dx, g.dw, db};
  }
};

// A linear layer's forward through LinearFn: FP8 GEMMs under the scope's recipe when `fp8` (the
// shape rule checked, the state begun on x's device), else high precision.
Tensor linear_forward(FP8State& state, bool fp8, const char* what, const Tensor& x,
                      const Tensor& w_leaf, const Tensor& bias,
                      const std::function<Operand(FP8State*)>& weight_operand) {
  LinearFn fn;
  fn.has_bias = bias.defined();
  if (fp8) {
    check_gemm_shapes(fp8_recipe(), 0, what, x.rows(), x.cols(), w_leaf.size(0));
    state.begin_forward(fp8_recipe(), x.device());
    fn.gemm = LinearGemm(state.gemm_quantizers(0));
  }
  fn.weight = weight_operand(fp8 ? &state : nullptr);
  return autograd::apply(std::move(fn), x, w_leaf, bias);
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options)
    : FP8Module("Linear", 1, options.recipe, options.seed),
      in_(in_features),
      out_(out_features),
      options_(options) {
  OCTET_CHECK(in_features > 0 && out_features > 0, "Linear(", in_features, ", ", out_features,
              "): features must be positive");
  weight_.init(out_, in_, options_, *fp8_, 0, options_.seed);
  register_gemm_weight("weight", weight_, 0);
  if (options_.bias == Bias::kYes) {
    MemTagScope tag(MemTag::kWeights);
    bias_ = Tensor::zeros({out_}, options_.dtype);
    autograd::set_requires_grad(bias_);
    register_parameter("bias", &bias_);
  }
}

Tensor Linear::forward(const Tensor& x, FirstMicrobatch first) {
  OCTET_CHECK(x.dim() >= 1 && x.cols() == in_, "Linear(", in_, " -> ", out_, "): input ", x,
              " must end in ", in_);
  const bool fp8 = fp8_enabled() && options_.precision == Precision::kFP8;
  OCTET_CHECK(fp8 || !weight_.is_fp8(),
              "Linear with FP8 primary weights must run inside an FP8 scope");
  return linear_forward(*fp8_, fp8, "Linear", x, weight_.leaf(), bias_, [&](FP8State* state) {
    return weight_.operand(weight_cache_, state, 0, first);
  });
}

ForeignWeightLinear::ForeignWeightLinear(std::string what, const std::optional<Recipe>& recipe,
                                         uint64_t seed, Precision precision)
    : FP8Module("ForeignWeightLinear", 1, precision == Precision::kFP8 ? recipe : std::nullopt,
                seed),
      what_(std::move(what)),
      precision_(precision) {}

Tensor ForeignWeightLinear::forward(const Tensor& x, const Tensor& weight, FirstMicrobatch first) {
  OCTET_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.cols() == weight.size(1), what_, ": input ", x,
              " must end in the weight's ", weight, " in-features");
  const bool fp8 = fp8_enabled() && precision_ == Precision::kFP8;
  return linear_forward(*fp8_, fp8, what_.c_str(), x, weight, Tensor(), [&](FP8State* state) {
    return weight_cache_.get(weight, state, 0, first);
  });
}

}  // namespace octet::modules
