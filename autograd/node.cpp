// Node bookkeeping, leaf accumulation and gradient edges.
#include "autograd/node.h"

#include <atomic>

#include "kernels/ops.h"
#include "runtime/memory.h"

namespace octet::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}  // namespace

Node::Node(std::string name, int num_outputs)
    : name_(std::move(name)),
      num_outputs_(num_outputs),
      sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

AccumulateGrad::AccumulateGrad(std::shared_ptr<AutogradMeta> leaf)
    : Node("AccumulateGrad", 1), leaf_(leaf) {}

Tensors AccumulateGrad::apply(Tensors grad_outputs) {
  Tensor& g = grad_outputs[0];
  auto leaf = leaf_.lock();
  if (!leaf || !g.defined()) return {};
  if (!leaf->grad.defined()) {
    // Adopt the incoming buffer when nothing else holds it; otherwise keep a copy of our own.
    if (g.storage().use_count() == 1 && g.storage_offset() == 0 &&
        g.storage()->backward_holds() == 0) {
      g.storage()->set_tag(MemTag::kGrads);
      leaf->grad = std::move(g);
    } else {
      MemTagScope tag(MemTag::kGrads);
      leaf->grad = g.clone();
    }
  } else {
    ops::add_(leaf->grad, g);
  }
  if (leaf->grad_ready_hook) leaf->grad_ready_hook(leaf->grad);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  const auto& meta = t.autograd_meta();
  if (!meta || !meta->requires_grad) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  std::shared_ptr<Node> acc = meta->accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(meta);
    meta->accumulator = acc;
  }
  return {acc, 0};
}

}  // namespace octet::autograd
