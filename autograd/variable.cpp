// Per-tensor autograd accessors.
#include "autograd/variable.h"

#include "runtime/error.h"

namespace octet::autograd {
namespace {
const Tensor kUndefined;
}  // namespace

void set_requires_grad(Tensor& t, bool value) {
  OCTET_CHECK(t.defined(), "set_requires_grad on an undefined tensor");
  auto meta = t.autograd_meta();
  OCTET_CHECK(!meta || !meta->grad_fn, "set_requires_grad on ", t,
              ": only leaves can be marked (this tensor is the output of ", meta->grad_fn->name(),
              "); detach() it first");
  OCTET_CHECK(!value || is_floating(t.dtype()), "set_requires_grad on ", t,
              ": only floating tensors can require gradients");
  if (!meta) {
    meta = std::make_shared<AutogradMeta>();
    t.set_autograd_meta(meta);
  }
  meta->requires_grad = value;
}

void set_requires_grad_packed(Tensor& t, const Shape& grad_shape) {
  OCTET_CHECK(t.defined() && t.dtype() == DType::kU8, "set_requires_grad_packed on ", t,
              ": packed data is a u8 tensor");
  OCTET_CHECK(!t.autograd_meta() || !t.autograd_meta()->grad_fn, "set_requires_grad_packed on ", t,
              ": only leaves can be marked");
  auto meta = t.autograd_meta();
  if (!meta) {
    meta = std::make_shared<AutogradMeta>();
    t.set_autograd_meta(meta);
  }
  meta->requires_grad = true;
  meta->packed = true;
  meta->grad_shape = grad_shape;
}

bool requires_grad(const Tensor& t) {
  const auto& meta = t.autograd_meta();
  return meta && meta->requires_grad;
}

bool is_leaf(const Tensor& t) {
  const auto& meta = t.autograd_meta();
  return !meta || !meta->grad_fn;
}

const Tensor& grad(const Tensor& t) {
  const auto& meta = t.autograd_meta();
  return meta ? meta->grad : kUndefined;
}

void zero_grad(Tensor& t) {
  const auto& meta = t.autograd_meta();
  if (meta) meta->grad = Tensor();
}

void set_grad_ready_hook(Tensor& leaf, std::function<void(const Tensor&)> hook) {
  OCTET_CHECK(requires_grad(leaf) && is_leaf(leaf), "set_grad_ready_hook on ", leaf,
              ": only a leaf that requires a gradient has one");
  leaf.autograd_meta()->grad_ready_hook = std::move(hook);
}

Tensor detach(const Tensor& t) {
  Tensor out = t;
  out.set_autograd_meta(nullptr);
  return out;
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  const auto& meta = t.autograd_meta();
  return meta ? meta->grad_fn : nullptr;
}

}  // namespace octet::autograd
