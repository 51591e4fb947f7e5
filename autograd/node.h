// Graph nodes: one per recorded operation (its backward, its saved context, the gradient edges
// of its inputs), plus the leaf accumulators; and the per-tensor autograd state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "runtime/tensor.h"

namespace octet::autograd {

class Node;

// Where the gradient of one input goes: input slot `input_nr` of `node`; null node = no gradient.
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
};

// What a gradient must look like to be accepted for an input.
struct InputSignature {
  Shape shape;
  DType dtype = DType::kF32;
  Device device;
};

using Tensors = std::vector<Tensor>;

class Node {
 public:
  Node(std::string name, int num_outputs);
  virtual ~Node() = default;

  // Gradients of the inputs (one per edge) from gradients of the outputs (undefined = zero).
  virtual Tensors apply(Tensors grad_outputs) = 0;
  // Drops saved state right after this node's backward (unless the graph is retained).
  virtual void release_saved() {}
  // Nodes without saved state (leaf accumulators) may run in any number of backward passes.
  virtual bool reusable() const { return false; }

  const std::string& name() const { return name_; }
  int num_outputs() const { return num_outputs_; }
  void set_num_outputs(int n) { num_outputs_ = n; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge>& next_edges() { return next_edges_; }
  std::vector<InputSignature>& input_signatures() { return inputs_; }
  bool ran_without_retain() const { return ran_without_retain_; }
  void set_ran_without_retain() { ran_without_retain_ = true; }

 private:
  std::string name_;
  int num_outputs_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
  std::vector<InputSignature> inputs_;
  bool ran_without_retain_ = false;
};

// Per-tensor autograd state (held by Tensor::autograd_meta()).
struct AutogradMeta {
  bool requires_grad = false;
  // A leaf that stands for packed quantized data (an NVFP4 primary weight's bytes): its gradient
  // is an f32 tensor of this logical shape, not of the leaf's own shape and dtype.
  bool packed = false;
  Shape grad_shape;
  Tensor grad;                      // leaves: accumulated gradient (MemTag::kGrads)
  std::shared_ptr<Node> grad_fn;    // non-leaves: the node that made this tensor
  int output_nr = 0;                // which output of grad_fn
  std::weak_ptr<Node> accumulator;  // leaves: the shared AccumulateGrad node
  // Leaves: called with the gradient each time a backward pass has added into it (see
  // set_grad_ready_hook).
  std::function<void(const Tensor& grad)> grad_ready_hook;
};

// The node that adds an incoming gradient into a leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<AutogradMeta> leaf);
  Tensors apply(Tensors grad_outputs) override;
  bool reusable() const override { return true; }

 private:
  std::weak_ptr<AutogradMeta> leaf_;
};

// The edge that carries a gradient into `t` (its grad_fn, or its leaf accumulator); a null edge
// when `t` does not require a gradient.
Edge gradient_edge(const Tensor& t);

}  // namespace octet::autograd
