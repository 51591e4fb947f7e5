// Runs backward: nodes in reverse dependency order, each node's saved state released right after
// its backward (unless the graph is retained), gradients checked against their inputs and
// accumulated into leaves.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace octet::autograd {

enum class RetainGraph : uint8_t { kNo, kYes };

// d(root)/d(leaves). A one-element root may omit grad (taken as 1).
void backward(const Tensor& root, const Tensor& grad = Tensor(),
              RetainGraph retain = RetainGraph::kNo);
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              RetainGraph retain = RetainGraph::kNo);

// Called from inside a node's backward: runs `callback` once when the current backward pass
// ends (after every node ran). FP8 modules update their backward scaling slots this way.
void call_at_backward_end(std::function<void()> callback);
bool in_backward();

// Observes each node as the engine finishes it (after its saved state was released); tests use
// it to watch memory drop while backward goes on. Thread-local; pass nullptr to remove.
void set_node_observer(std::function<void(const char* node_name)> observer);

}  // namespace octet::autograd
