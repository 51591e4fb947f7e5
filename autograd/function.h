// Defining a differentiable operation: a struct with forward and backward, run through apply().
//
//   struct GeluFn {
//     static constexpr const char* kName = "gelu";
//     Tensor forward(Context& ctx, const Tensor& x) { ctx.save(x); return ops::activation(..); }
//     Tensors backward(Context& ctx, const Tensors& dy) { auto [x] = ctx.restore<1>(); ... }
//   };
//   Tensor gelu(const Tensor& x) { return apply(GeluFn{}, x); }
//
// forward runs kernels (ops::), never other autograd functions; non-tensor parameters are members
// of the struct. backward gets one gradient per output (undefined = zero) and returns one per
// tensor input (undefined = no gradient).
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "runtime/memory.h"

namespace octet::autograd {

template <typename Fn>
class FunctionNode final : public Node {
 public:
  FunctionNode(Fn fn, int num_outputs) : Node(Fn::kName, num_outputs), fn_(std::move(fn)) {
    ctx_.set_owner_name(Fn::kName);
  }
  Tensors apply(Tensors grad_outputs) override { return fn_.backward(ctx_, grad_outputs); }
  void release_saved() override { ctx_.release(); }
  Context& context() { return ctx_; }
  Fn& fn() { return fn_; }

 private:
  Fn fn_;
  Context ctx_;
};

namespace detail {

inline bool any_requires_grad() { return false; }
template <typename... Rest>
bool any_requires_grad(const Tensor& t, const Rest&... rest) {
  const auto& meta = t.autograd_meta();
  return (meta && meta->requires_grad) || any_requires_grad(rest...);
}

inline Tensors as_tensors(Tensor t) { return {std::move(t)}; }
inline Tensors as_tensors(Tensors t) { return t; }

// Attaches grad_fn to every floating output.
void attach_outputs(const std::shared_ptr<Node>& node, Tensors& outputs);

// What the gradient of input `t` must look like: t's shape, dtype and device, or for a packed
// leaf (set_requires_grad_packed) its logical shape in f32.
inline InputSignature signature_of(const Tensor& t) {
  if (!t.defined()) return {};
  const auto& meta = t.autograd_meta();
  if (meta && meta->packed) return {meta->grad_shape, DType::kF32, t.device()};
  return {t.shape(), t.dtype(), t.device()};
}

}  // namespace detail

template <typename Fn, typename... Inputs>
auto apply(Fn fn, const Inputs&... inputs) {
  static_assert((std::is_same_v<Inputs, Tensor> && ...), "apply() takes Tensor inputs only");
  using Result = decltype(fn.forward(std::declval<Context&>(), inputs...));
  // What an operation makes is an activation unless the caller tagged it otherwise.
  const MemTag tag = current_mem_tag() == MemTag::kOther ? MemTag::kActivations : current_mem_tag();
  MemTagScope activations(tag);
  if (!grad_enabled() || !detail::any_requires_grad(inputs...)) {
    Context discard(false);
    return fn.forward(discard, inputs...);
  }
  auto node = std::make_shared<FunctionNode<Fn>>(std::move(fn), 0);
  for (const Tensor* t : {&inputs...}) {
    node->next_edges().push_back(gradient_edge(*t));
    node->input_signatures().push_back(detail::signature_of(*t));
  }
  Result result = node->fn().forward(node->context(), inputs...);
  Tensors outputs = detail::as_tensors(result);
  detail::attach_outputs(node, outputs);
  if constexpr (std::is_same_v<Result, Tensor>) {
    return outputs[0];
  } else {
    return outputs;
  }
}

}  // namespace octet::autograd
