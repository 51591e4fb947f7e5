// Which tensor of which GEMM of an FP8 module a quantizer casts (DESIGN.md "Details that matter"):
// the slots every recipe names its quantizers by, and delayed scaling keeps its state in.
#pragma once

#include <cstdint>

namespace octet {

// Forward tensors (inputs, weights, outputs) or backward tensors (gradients).
enum class FP8Direction : uint8_t { kForward, kBackward };

// Forward slots per GEMM: input, weight, output; backward slots per GEMM: grad_output,
// grad_input. GEMM g's slots are 3g..3g+2 forward and 2g..2g+1 backward (LayerNormMLP: fc1 = 0-2,
// fc2 = 3-5 forward).
enum class ForwardTensor : uint8_t { kInput = 0, kWeight = 1, kOutput = 2 };
enum class BackwardTensor : uint8_t { kGradOutput = 0, kGradInput = 1 };
inline constexpr int kForwardSlotsPerGemm = 3;
inline constexpr int kBackwardSlotsPerGemm = 2;

struct SlotId {
  FP8Direction direction;
  int index;
  friend bool operator==(const SlotId&, const SlotId&) = default;
};
constexpr SlotId forward_slot(int gemm, ForwardTensor t) {
  return {FP8Direction::kForward, gemm * kForwardSlotsPerGemm + static_cast<int>(t)};
}
constexpr SlotId backward_slot(int gemm, BackwardTensor t) {
  return {FP8Direction::kBackward, gemm * kBackwardSlotsPerGemm + static_cast<int>(t)};
}

}  // namespace octet
