// The backward engine.
#include "autograd/engine.h"

#include <map>
#include <queue>
#include <unordered_map>

#include "autograd/function.h"
#include "autograd/node.h"
#include "kernels/ops.h"

namespace octet::autograd {
namespace {

thread_local std::vector<std::function<void()>>* t_end_callbacks = nullptr;
thread_local std::function<void(const char*)> t_node_observer;

void check_gradient(const Node& node, size_t i, const Tensor& g, const InputSignature& want) {
  OCTET_CHECK(g.shape() == want.shape, "backward of ", node.name(),
              " returned a gradient of shape ", shape_str(g.shape()), " for input #", i,
              " of shape ", shape_str(want.shape));
  // High-precision gradients of any float width are accepted (in_input_dtype rounds them); an
  // FP8 input (the data of an FP8 primary weight) takes an f32, bf16 or f16 gradient.
  const auto high = [](DType d) {
    return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
  };
  OCTET_CHECK(
      g.dtype() == want.dtype || (high(g.dtype()) && (high(want.dtype) || is_fp8(want.dtype))),
      "backward of ", node.name(), " returned a ", g.dtype(), " gradient for ", want.dtype,
      " input #", i);
  OCTET_CHECK(g.device() == want.device, "backward of ", node.name(), " returned a gradient on ",
              g.device(), " for input #", i, " on ", want.device);
}

// Adds `g` into a slot of a node's incoming gradients.
void accumulate(Tensor& slot, Tensor g) {
  if (!slot.defined()) {
    slot = std::move(g);
  } else {
    slot = ops::add(slot, g);
  }
}

// Kernels compute in f32; a bf16/f16 input gets its gradient rounded to its own dtype, once,
// here, so leaves accumulate in their parameter's dtype. FP8 inputs keep the high-precision one.
void in_input_dtype(Tensor& g, DType want) {
  if (g.dtype() != want && !is_fp8(want)) g = ops::cast(g, want);
}

struct Later {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

}  // namespace

namespace detail {

void attach_outputs(const std::shared_ptr<Node>& node, Tensors& outputs) {
  node->set_num_outputs(static_cast<int>(outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& t = outputs[i];
    if (!t.defined() || !is_floating(t.dtype())) continue;
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = static_cast<int>(i);
    t.set_autograd_meta(std::move(meta));
  }
}

}  // namespace detail

void call_at_backward_end(std::function<void()> callback) {
  OCTET_CHECK(t_end_callbacks != nullptr, "call_at_backward_end outside of a backward pass");
  t_end_callbacks->push_back(std::move(callback));
}

bool in_backward() { return t_end_callbacks != nullptr; }

void set_node_observer(std::function<void(const char*)> observer) {
  t_node_observer = std::move(observer);
}

void backward(const Tensor& root, const Tensor& grad, RetainGraph retain) {
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{grad}, retain);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              RetainGraph retain) {
  OCTET_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " outputs but ",
              grads.size(), " gradients");
  OCTET_CHECK(t_end_callbacks == nullptr, "backward called from inside a backward pass");

  // Root gradients go into the input buffers of the roots' nodes.
  std::unordered_map<Node*, Tensors> buffers;
  std::vector<std::shared_ptr<Node>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    OCTET_CHECK(r.defined(), "backward: output #", i, " is undefined");
    const Edge edge = gradient_edge(r);
    OCTET_CHECK(edge.node != nullptr, "backward: output #", i, " (", r,
                ") does not require a gradient (no recorded operation led to it)");
    Tensor g = grads[i];
    if (!g.defined()) {
      OCTET_CHECK(r.numel() == 1, "backward: output #", i, " ", r,
                  " is not a single element; pass its gradient");
      g = Tensor::full(r.shape(), 1.f, r.dtype(), r.device());
    }
    OCTET_CHECK(g.shape() == r.shape() && g.dtype() == r.dtype() && g.device() == r.device(),
                "backward: gradient ", g, " does not match output #", i, " ", r);
    Tensors& slots = buffers[edge.node.get()];
    slots.resize(static_cast<size_t>(edge.node->num_outputs()));
    accumulate(slots[static_cast<size_t>(edge.input_nr)], g);
    starts.push_back(edge.node);
  }

  // Dependencies: how many edges point at each node from the part of the graph we will run.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;  // nodes stay alive during the pass
  std::vector<Node*> stack;
  for (const auto& s : starts) {
    if (keep.emplace(s.get(), s).second) stack.push_back(s.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.node) continue;
      ++dependencies[e.node.get()];
      if (keep.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  for (const auto& s : starts) {
    if (dependencies[s.get()] == 0) ready.push(s.get());
  }
  std::vector<std::function<void()>> end_callbacks;
  t_end_callbacks = &end_callbacks;
  struct ResetCallbacks {
    ~ResetCallbacks() { t_end_callbacks = nullptr; }
  } reset;

  const bool release = retain == RetainGraph::kNo && !keep_saved_until_graph_dies();
  std::map<Node*, bool> queued;
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    if (queued[node]) continue;
    queued[node] = true;
    OCTET_CHECK(!node->ran_without_retain(), "backward through ", node->name(),
                " a second time: saved state already released (pass RetainGraph::kYes to the "
                "first backward to run it again)");
    Tensors incoming = std::move(buffers[node]);
    buffers.erase(node);
    incoming.resize(static_cast<size_t>(node->num_outputs()));
    bool any = false;
    for (const Tensor& g : incoming) any = any || g.defined();

    Tensors input_grads;
    if (any) {
      MemTagScope tag(MemTag::kActivations);
      input_grads = node->apply(std::move(incoming));
    }
    if (retain == RetainGraph::kNo && !node->reusable()) node->set_ran_without_retain();
    if (release) node->release_saved();
    if (t_node_observer) t_node_observer(node->name().c_str());

    auto& edges = node->next_edges();
    OCTET_CHECK(input_grads.empty() || input_grads.size() == edges.size(), "backward of ",
                node->name(), " returned ", input_grads.size(), " gradients for ", edges.size(),
                " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.node) continue;
      if (i < input_grads.size() && input_grads[i].defined()) {
        check_gradient(*node, i, input_grads[i], node->input_signatures()[i]);
        in_input_dtype(input_grads[i], node->input_signatures()[i].dtype);
        Tensors& slots = buffers[e.node.get()];
        slots.resize(static_cast<size_t>(e.node->num_outputs()));
        accumulate(slots[static_cast<size_t>(e.input_nr)], std::move(input_grads[i]));
      }
      if (--dependencies[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
  t_end_callbacks = nullptr;
  for (auto& callback : end_callbacks) callback();
}

}  // namespace octet::autograd
