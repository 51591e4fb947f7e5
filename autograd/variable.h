// Autograd state of a tensor: requires_grad, grad, leaf/non-leaf, detach.
#pragma once

#include <functional>

#include "autograd/node.h"
#include "runtime/tensor.h"

namespace octet::autograd {

// Marks a leaf as needing a gradient. Copies of the handle made afterwards share the state.
void set_requires_grad(Tensor& t, bool value = true);
// Marks packed quantized data (u8 bytes of a 4-bit weight) as a leaf needing a gradient whose
// shape is the weight's logical shape, `grad_shape` (the gradient is f32).
void set_requires_grad_packed(Tensor& t, const Shape& grad_shape);
bool requires_grad(const Tensor& t);
bool is_leaf(const Tensor& t);        // no grad_fn
const Tensor& grad(const Tensor& t);  // undefined until a backward reached it
void zero_grad(Tensor& t);            // drops the accumulated gradient (frees it)
Tensor detach(const Tensor& t);       // same storage, no autograd state
// Calls `hook` with the leaf's accumulated gradient each time a backward pass has added into it
// (PyTorch's post-accumulate-grad hook): within one pass the gradient is then complete, so data
// parallelism starts reducing it while the rest of the backward runs. One hook per leaf (the
// state copies of the handle share); an empty function removes it. A hook that throws ends the
// backward with its exception.
void set_grad_ready_hook(Tensor& leaf, std::function<void(const Tensor& grad)> hook);
std::shared_ptr<Node> grad_fn(const Tensor& t);

}  // namespace octet::autograd
