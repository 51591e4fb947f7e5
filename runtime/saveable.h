// What a save-for-backward context can hold besides plain tensors (DESIGN.md "Saved tensors and
// ownership"). Quantized tensors implement it; autograd's context is the only caller.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace octet {

enum class Ownership : uint8_t {
  kOwned,     // has an owner outside the graph (parameter, FP8 primary weight, weight cache):
              // saved whole by reference, never modified by the graph
  kInternal,  // made by the operation in forward: hands its buffers to the context
};

class Saveable {
 public:
  virtual ~Saveable() = default;
  virtual Ownership ownership() const = 0;
  // Internal objects only: moves every buffer out, leaving metadata (shape, dtype, scale
  // values...), so the context becomes the buffers' only holder.
  virtual std::vector<Tensor> take_buffers() = 0;
  // Internal objects only: puts back exactly what take_buffers returned.
  virtual void give_buffers(std::vector<Tensor> buffers) = 0;
  // Bumped by every in-place change of the values. The context checks it on restoring an owned
  // object: changed since it was saved (an optimizer step between forward and backward) is a
  // clear error, not a silently wrong gradient.
  virtual uint64_t version() const { return 0; }
  // The buffers an owned object holds now. The context also checks their storages' versions (a
  // write through another handle on them, e.g. a parameter's leaf tensor, or a checkpoint loaded
  // into them) and that the object still holds exactly these.
  virtual std::vector<Tensor> held_tensors() const { return {}; }
};

}  // namespace octet
